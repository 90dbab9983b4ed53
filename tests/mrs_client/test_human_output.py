"""Issue 48: what `mrs` prints for a person has no Python repr in it (`recorded: ['alice']`,
`mailboxes ['alice']`, `stall_reason None`): the records' commands over a move store filled
in code, and a whole move's progress lines over the mover's fakes."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

from mrs_client.cli import main
from mrs_client.move_store.interface import BatchRecord
from mrs_client.policy import GuaranteeAnswer, GuaranteeStatus, MoveState, MoveStep
from tests.cluster_harness import cluster_config, write_cluster_config
from tests.human_output import reprs
from tests.mrs_client.fakes import MoverEnv, SyncMoves

NOW = datetime(2026, 11, 23, 12, 0, tzinfo=UTC)


def test_the_records_commands_print_words(tmp_path, capsys):
    config = write_cluster_config(
        tmp_path / "cluster.yaml",
        cluster_config(
            [("mbx1", "redmond", "http://127.0.0.1:7101")],
            [{"name": "DB1", "copies": [{"node": "mbx1", "activation_preference": 1}]},
             {"name": "DB2", "copies": [{"node": "mbx1", "activation_preference": 2}]}],
        ),
    )  # fmt: skip
    store = SyncMoves(tmp_path / "var" / "cluster.db")
    done = store.create(
        mailboxes=("alice", "alice.archive"), source_db="DB1", target_db="DB2", now=NOW,
        batch="wave1",
    )  # fmt: skip
    store.save(replace(done, state=MoveState.COMPLETED, step=MoveStep(10), completed=NOW), NOW)
    queued = store.create(mailboxes=("bob",), source_db="DB1", target_db="DB2", now=NOW)
    batch = BatchRecord(name="wave1", created=NOW, moves=(done.id,))
    store._store.call(store._store._create, [], batch)
    store.close()
    printed = {}
    for args in (
        ["stats", done.id],  # no stall, no failure: nothing to say, and said as "-"
        ["stats", queued.id],
        ["show", done.id],
        ["list"],
        ["batch", "list"],
        ["batch", "show", "wave1"],
        ["batch", "report", "wave1"],
    ):
        assert main([*args, "--config", str(config)]) == 0, args
        out = capsys.readouterr()
        printed[" ".join(args[:2])] = reprs(out.out + out.err)
    assert {k: v for k, v in printed.items() if v} == {}
    assert main(["stats", done.id, "--config", str(config)]) == 0
    stats = capsys.readouterr().out.splitlines()
    assert "mailboxes         alice, alice.archive" in stats
    assert "stall_reason      -" in stats and "failure           -" in stats


async def test_a_moves_progress_lines_are_words(tmp_path):
    """A move that stalls on its target's copies, then goes on and completes."""
    env = MoverEnv(tmp_path)
    unhealthy = GuaranteeAnswer(GuaranteeStatus.NOT_SATISFIED, timedelta(0), "DB2\\mbx3: Suspended")
    healthy = {"yes": False}
    env.guarantee.on_health = lambda db: None if healthy["yes"] or db != "DB2" else unhealthy

    def recover(line: str) -> None:
        if line.startswith("waiting for healthy copies"):
            healthy["yes"] = True

    env.on_line.append(recover)
    final = await env.move()
    assert final.state is MoveState.COMPLETED, env.lines
    assert env.lines[0] == f"move {final.id} recorded: alice DB1 -> DB2"
    assert any(line.startswith("waiting for healthy") for line in env.lines), env.lines
    assert reprs("\n".join(env.lines)) == []
