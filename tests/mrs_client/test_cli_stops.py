"""`mrs suspend` and `mrs cancel` at the command line: one line or the record as JSON, and
the refusals as one `error:` line with exit code 2 (no node is asked for any of these)."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import UTC, datetime

from mrs_client.cli import main
from mrs_client.policy import MoveState, MoveStep
from tests.cluster_harness import cluster_config, write_cluster_config
from tests.mrs_client.fakes import SyncMoves

NOW = datetime(2026, 11, 23, 12, 0, tzinfo=UTC)


def setup(tmp_path):
    config = write_cluster_config(
        tmp_path / "cluster.yaml",
        cluster_config(
            [("mbx1", "redmond", "http://127.0.0.1:7101")],
            [{"name": "DB1", "copies": [{"node": "mbx1", "activation_preference": 1}]},
             {"name": "DB2", "copies": [{"node": "mbx1", "activation_preference": 2}]}],
        ),
    )  # fmt: skip
    store = SyncMoves(tmp_path / "var" / "cluster.db")
    ids = {}
    for name, changes in {
        "queued": {},
        "done": {"state": MoveState.COMPLETED, "completed": NOW, "steps_done": 10},
        "unlocking": {"state": MoveState.STALLED, "step": MoveStep.UNLOCK_TARGET, "steps_done": 8},
    }.items():
        record = store.create(mailboxes=(name,), source_db="DB1", target_db="DB2", now=NOW)
        store.save(replace(record, **changes), NOW)
        ids[name] = record.id
    args = ["--config", str(config)]
    return args, ids, store


def test_suspend_of_a_move_nobody_runs_says_so_in_one_line(tmp_path, capsys):
    args, ids, _ = setup(tmp_path)
    move_id = ids["queued"]
    assert main(["suspend", move_id, *args]) == 0
    out = capsys.readouterr().out
    assert out == (
        f"move {move_id} suspended at step 1 (0 of 10 done); `mrs resume {move_id}` goes on\n"
    )
    assert main(["suspend", move_id, "--json", *args]) == 0
    assert json.loads(capsys.readouterr().out)["state"] == "Suspended"
    assert main(["list", "--state", "Suspended", *args]) == 0
    assert move_id in capsys.readouterr().out


def test_refusals_are_one_error_line_and_exit_2(tmp_path, capsys):
    args, ids, store = setup(tmp_path)
    cases = [
        (["suspend", ids["done"]], f"move {ids['done']} is completed"),
        (["cancel", ids["done"]], f"move {ids['done']} is completed"),
        (["cancel", ids["unlocking"]], "since step 8, the move can only go forward"),
        (["suspend", "0123abcd"], "no move request '0123abcd'"),
        (["cancel", "0123abcd"], "no move request '0123abcd'"),
        (["suspend", ids["queued"], "--wait", "soon"], "--wait:"),
    ]
    for argv, words in cases:
        assert main([*argv, *args]) == 2, argv
        err = capsys.readouterr().err
        assert err.startswith("error: ") and words in err and err.count("\n") == 1, err
    assert store.get(ids["unlocking"]).state is MoveState.STALLED
    assert store.get(ids["queued"]).state is MoveState.QUEUED
