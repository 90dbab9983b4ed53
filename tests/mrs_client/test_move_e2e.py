"""End to end: real node processes, the real guarantee API, the real `mrs` command."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time

import pytest

from dag_common.cluster_store.embedded import EmbeddedClusterStore
from tests.cluster_harness import ROOT, THREE_NODES, LocalCluster
from tests.mrs_client.e2e import live, shorten_guarantee_waits
from tests.mrs_client.fakes import SyncMoves
from tests.prometheus import promtool_check, samples, value
from tests.replication_node.e2e import in_block_mode

pytestmark = pytest.mark.slow

FAST = [
    "--health-check-interval",
    "200ms",
    "--stall-retry-interval",
    "300ms",
    "--flush-retry-interval",
    "200ms",
]


def databases():
    return [
        {
            "name": "DB1",
            "copies": [
                {"node": "mbx1", "activation_preference": 1},
                {"node": "mbx2", "activation_preference": 2},
            ],
        },
        {
            "name": "DB2",
            "data_move_replication_constraint": "SecondCopy",
            "copies": [
                {"node": "mbx2", "activation_preference": 1},
                {"node": "mbx3", "activation_preference": 2},
            ],
        },
    ]


@pytest.fixture
async def env(tmp_path):
    cluster = LocalCluster(
        tmp_path,
        nodes=THREE_NODES,
        databases=databases(),
        # The operator activates after a kill: automatic failover would race it.
        defaults={"failover_after": None},
    )
    shorten_guarantee_waits(cluster)
    await cluster.start()
    api = await cluster.start_guarantee_api()
    yield cluster
    api.terminate()
    api.wait(timeout=20)
    await cluster.close()


def mrs(cluster, *args, timeout=180):
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "mrs_client.cli",
            *args,
            "--config",
            str(cluster.config_path),
        ],
        capture_output=True,
        text=True,
        env=cluster.env(),
        cwd=ROOT,
        timeout=timeout,
    )


async def seed_mailbox(cluster, n=300):
    await cluster.ok("PUT", "mbx1", "/v1/databases/DB1/mailboxes/alice", json={"display_name": "A"})
    await cluster.ok(
        "POST", "mbx1", "/v1/databases/DB1/mailboxes/alice/folders", json={"folder": "Projects"}
    )
    for start in range(0, n, 100):
        await cluster.ok(
            "POST",
            "mbx1",
            "/v1/databases/DB1/mailboxes/alice/items",
            json={
                "items": [
                    {
                        "item_id": f"m{i}",
                        "folder": "Projects" if i % 3 else "Inbox",
                        "subject": f"s{i}",
                        "body": f"body {i} " * 40,
                    }
                    for i in range(start, min(n, start + 100))
                ]
            },
        )
    for i in range(0, n, 50):
        await cluster.ok("DELETE", "mbx1", f"/v1/databases/DB1/mailboxes/alice/items/m{i}")
    return {
        k: v for k, v in (await cluster.items("mbx1", "DB1", "alice")).items() if not v["deleted"]
    }


async def demand_rolls(cluster, node: str, db: str) -> float:
    """Generations the active on `node` closed on demand (`roll-log`)."""
    _, text = await cluster.call("GET", node, "/metrics")
    found = samples(text.decode())
    return sum(
        v
        for (name, labels), v in found.items()
        if name == "replication_log_rolls_total"
        and ("cause", "demand") in labels
        and ("database", db) in labels
    )


async def test_move_completes_and_survives_loss_of_the_target_active(env):
    """With the target's copy following in block mode (the default), the move flushes
    through the durable end of the target's open log and never rolls it; killed right
    after completion, the target's active leaves the moved mailbox whole on the copy, its
    block-mode buffer kept past the move's flush point."""
    cluster = env
    source = await seed_mailbox(cluster)
    await in_block_mode(cluster, "DB2", ["mbx3"])
    result = await asyncio.to_thread(
        mrs, cluster, "move", "--mailbox", "alice", "--to", "DB2", *FAST
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "held in block mode by mbx3" in result.stdout, result.stdout
    assert await demand_rolls(cluster, "mbx2", "DB2") == 0
    (move,) = json.loads(mrs(cluster, "list", "--json").stdout)
    stats = json.loads(mrs(cluster, "stats", move["id"], "--json").stdout)
    assert stats["final_offset"] is not None, stats
    # The position is the active's to say, behind the token like every call.
    position = await cluster.ok("GET", "mbx2", "/v1/databases/DB2/log/position")
    assert position["block_followers"] == ["mbx3"] and position["passive_copies"] == ["mbx3"]
    status, body = await cluster.call("GET", "mbx3", "/v1/databases/DB2/log/position")
    assert status == 409 and "passive" in body["error"], body
    status, _ = await cluster.call(
        "GET", "mbx2", "/v1/databases/DB2/log/position", headers={"Authorization": "Bearer x"}
    )
    assert status == 401
    moved = await cluster.items("mbx2", "DB2", "alice")
    assert live(moved) == live(source)
    mailbox = await cluster.ok("GET", "mbx1", "/v1/databases/DB1/mailboxes/alice")
    assert mailbox["soft_deleted"] is True
    target = await cluster.ok("GET", "mbx2", "/v1/databases/DB2/mailboxes/alice")
    assert target["locked"] is False and set(target["folders"]) >= {"Projects", "Inbox"}
    store = EmbeddedClusterStore(cluster.root / "cluster.db")
    assert await store.mailbox_database("alice") == "DB2"
    store.close()
    # The seed's Example 1: the target's active dies right after completion and a copy is
    # activated. The mailbox must be there, whole, on the new active.
    cluster.kill("mbx2")
    activate = await asyncio.to_thread(
        cluster.node_cli, "db", "activate", "DB2", "--node", "mbx3", "--json"
    )
    assert activate.returncode == 0, activate.stdout + activate.stderr
    # The open log is counted lost (nothing shows the old active wrote nothing after the
    # buffer's end), but kept through the unlock's flush point and so past the final sync's.
    kept = json.loads(activate.stdout)["kept_open_log"]
    assert kept is not None, activate.stdout
    flushed = (stats["final_generation"], stats["final_offset"])
    assert (kept["generation"], kept["through_byte"]) > flushed, (kept, stats)

    await cluster.wait_status("mbx3", "DB2", "Mounted")
    on_new_active = await cluster.items("mbx3", "DB2", "alice")
    assert live(on_new_active) == live(source)
    mailbox = await cluster.ok("GET", "mbx3", "/v1/databases/DB2/mailboxes/alice")
    assert mailbox["locked"] is False and not mailbox["soft_deleted"]


async def test_move_stalls_on_suspended_copies_fails_and_resumes(env):
    cluster = env
    source = await seed_mailbox(cluster, n=60)
    await cluster.ok(
        "POST", "mbx3", "/v1/databases/DB2/copies/mbx3/suspend", json={"reason": "maintenance"}
    )
    result = await asyncio.to_thread(
        mrs, cluster, "move", "--mailbox", "alice", "--to", "DB2", *FAST, "--stall-limit", "2s"
    )
    assert result.returncode == 1, result.stdout + result.stderr
    listing = json.loads(mrs(cluster, "list", "--json").stdout)
    (move,) = listing
    assert move["state"] == "Failed" and move["step"] == 1
    stats = json.loads(mrs(cluster, "stats", move["id"], "--json").stdout)
    assert "stalled" in stats["failure"] and stats["guarantee_answers"]
    assert all(a["status"] != "Satisfied" for a in stats["guarantee_answers"])
    # nothing was changed on the target or the source
    status, _ = await cluster.call("GET", "mbx2", "/v1/databases/DB2/mailboxes/alice")
    assert status == 404
    # a failed move is never resumed by itself. An operator's resume starts the stall limit
    # afresh: with the copy still suspended the move stalls again (it does not fail at once)...
    resumed = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "mrs_client.cli",
            "resume",
            move["id"],
            *FAST,
            "--stall-limit",
            "5m",
            "--config",
            str(cluster.config_path),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=cluster.env(),
        cwd=ROOT,
    )
    try:

        async def stalled_again():
            (m,) = json.loads(mrs(cluster, "list", "--json").stdout)
            return m["state"] == "Stalled"

        await cluster.wait_for("the resumed move to stall", stalled_again)
        # ...a second move of the same mailbox is refused while this one holds it...
        again = mrs(cluster, "move", "--mailbox", "alice", "--to", "DB2")
        assert again.returncode == 2 and "already" in again.stderr, again.stderr
        # ...and so is a second client resuming the same move while this one runs it...
        twice = mrs(cluster, "resume", move["id"], *FAST)
        assert twice.returncode == 2 and "being run by another" in twice.stderr, twice.stderr
        # ...and once the copy is resumed, a Satisfied answer lets the move go on by itself.
        await cluster.ok("POST", "mbx3", "/v1/databases/DB2/copies/mbx3/resume")
        out, _ = await asyncio.to_thread(resumed.communicate, timeout=180)
    finally:
        if resumed.poll() is None:
            resumed.kill()
    assert resumed.returncode == 0, out
    assert live(await cluster.items("mbx2", "DB2", "alice")) == live(source)


async def test_a_stalled_move_goes_on_as_soon_as_the_copy_is_resumed(env):
    """The mover's questions wait on the service: with a 10-minute stall retry interval, a
    move stalled on a suspended copy goes on within seconds of the copy's resume, not at
    the next 10-minute bucket (before issue 14: 98 s of a 120 s bucket, tried by hand)."""
    cluster = env
    source = await seed_mailbox(cluster, n=60)
    await cluster.ok(
        "POST", "mbx3", "/v1/databases/DB2/copies/mbx3/suspend", json={"reason": "maintenance"}
    )
    move = subprocess.Popen(
        [
            sys.executable, "-m", "mrs_client.cli", "move", "--mailbox", "alice", "--to", "DB2",
            "--stall-retry-interval", "10m", "--flush-retry-interval", "10m",
            "--config", str(cluster.config_path),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=cluster.env(),
        cwd=ROOT,
    )  # fmt: skip
    try:

        async def stalled():
            listing = json.loads(mrs(cluster, "list", "--json").stdout)
            return bool(listing) and listing[0]["state"] == "Stalled"

        await cluster.wait_for("the move to stall on the suspended copy", stalled)
        await cluster.ok("POST", "mbx3", "/v1/databases/DB2/copies/mbx3/resume")
        resumed = time.monotonic()
        out, _ = await asyncio.to_thread(move.communicate, timeout=120)
        went_on_in = time.monotonic() - resumed
    finally:
        if move.poll() is None:
            move.kill()
    assert move.returncode == 0, out
    assert went_on_in < 120, "well inside the 10-minute bucket it would have slept out"
    # While it waited, one short line said for what, not the whole reason again and again.
    waiting = [line for line in out.splitlines() if "waiting for healthy copies" in line]
    assert len(waiting) == 1, out
    assert waiting[0].endswith(
        "waiting for healthy copies of DB2: mbx3: status Suspended (maintenance)"
    ), waiting
    assert live(await cluster.items("mbx2", "DB2", "alice")) == live(source)


async def test_a_move_goes_on_once_the_average_forgets_a_copy_that_caught_up(tmp_path):
    """A copy falls behind (suspended while the target's log grows) during a move, then
    catches up: the move waits on the caller's average copy queue only until the questions
    asked while the copy was behind leave the average's window (6 s here, 3 min by
    default), saying when that will be, and then goes on. Counted over the last 60
    questions, the average kept a move stalled long after the copies recovered.  (The
    window outlasts the copy's catching up, on a busy machine too: a prediction is made
    only once the copy's own queue is under the limit; with 2 s, CI saw the average clear
    before that, and no line said when.)"""
    cluster = LocalCluster(tmp_path, nodes=THREE_NODES, databases=databases())
    shorten_guarantee_waits(cluster)
    cluster.config["guarantee_api"]["limits"]["average_window_time"] = "6s"
    cluster.write_config()
    await cluster.start()
    api = await cluster.start_guarantee_api()
    move = None
    try:
        source = await seed_mailbox(cluster, n=60)
        await cluster.ok("POST", "mbx3", "/v1/databases/DB2/copies/mbx3/suspend")
        await cluster.ok("PUT", "mbx2", "/v1/databases/DB2/mailboxes/other")
        for i in range(14):  # 14 generations the suspended copy lacks: its queue is 14
            await cluster.ok(
                "POST", "mbx2", "/v1/databases/DB2/mailboxes/other/items", json={"item_id": f"o{i}"}
            )
            await cluster.ok("POST", "mbx2", "/v1/databases/DB2/roll-log")
        move = subprocess.Popen(
            [
                sys.executable, "-m", "mrs_client.cli", "move", "--mailbox", "alice", "--to",
                "DB2", *FAST, "--config", str(cluster.config_path),
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=cluster.env(),
            cwd=ROOT,
        )  # fmt: skip

        async def behind_on_average():
            # Several of the caller's questions while the copy is behind (not one: after it
            # catches up, a single sample at 14 is outweighed by the next at 0 at once).
            listing = json.loads(mrs(cluster, "list", "--json").stdout)
            if not listing:
                return False
            requests = SyncMoves(cluster.root / "cluster.db")
            try:
                answers = requests.answers(listing[0]["id"])
            finally:
                requests.close()
            return sum("AverageCopyQueue not met" in (a.reason or "") for a in answers) >= 4

        await cluster.wait_for("the move to stall with the copy behind", behind_on_average)
        await cluster.ok("POST", "mbx3", "/v1/databases/DB2/copies/mbx3/resume")
        out, _ = await asyncio.to_thread(move.communicate, timeout=120)
        assert move.returncode == 0, out
        assert live(await cluster.items("mbx2", "DB2", "alice")) == live(source)
    finally:
        if move is not None and move.poll() is None:
            move.kill()
        api.terminate()
        api.wait(timeout=20)
        await cluster.close()
    # Once the copy was Healthy again only its average held the move, and the line said
    # when it would clear: within the window, as the older questions left it.
    cleared = [
        line
        for line in out.splitlines()
        if "mbx3: average copy queue" in line and "expected to clear in about" in line
    ]
    assert cleared, out
    within = {f"{n} s" for n in range(7)}  # the 6 s window, rounded
    assert all(line.rsplit("about ", 1)[1] in within for line in cleared), cleared


async def test_bad_requests_change_nothing(env):
    cluster = env
    await seed_mailbox(cluster, n=5)
    for args, message in [
        (["--mailbox", "nobody", "--to", "DB2"], "unknown mailbox"),
        (["--mailbox", "alice", "--to", "DB9"], "unknown database"),
        (["--mailbox", "alice", "--to", "DB1"], "already in DB1"),
    ]:
        result = mrs(cluster, "move", *args)
        assert result.returncode == 2 and message in result.stderr, result.stderr
    await cluster.ok("POST", "mbx1", "/v1/databases/DB1/mailboxes/alice/lock")
    result = mrs(cluster, "move", "--mailbox", "alice", "--to", "DB2")
    assert result.returncode == 2 and "locked" in result.stderr
    assert json.loads(mrs(cluster, "list", "--json").stdout) == []


# A crash at each of the ten steps is tested in process (test_mover_steps.py); over real
# processes, a real kill -9 at three: after the target is created, at the final sync and
# flush (the source locked), and at the unlock (the directory already updated).
@pytest.mark.parametrize("kill_at", [2, 6, 9])
async def test_kill_9_of_the_client_then_resume(env, kill_at):
    cluster = env
    source = await seed_mailbox(cluster, n=400)
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "mrs_client.cli",
            "move",
            "--mailbox",
            "alice",
            "--to",
            "DB2",
            *FAST,
            "--sync-batch",
            "50",
            "--config",
            str(cluster.config_path),
        ],
        stdout=subprocess.PIPE,
        text=True,
        env=cluster.env(),
        cwd=ROOT,
    )
    deadline = time.monotonic() + 120
    seen = False
    for line in proc.stdout:
        seen = f"step {kill_at}:" in line
        if seen or time.monotonic() > deadline:
            break
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert seen, f"the move never reached step {kill_at}"
    (move,) = json.loads(mrs(cluster, "list", "--json").stdout)
    assert move["state"] != "Completed"
    if kill_at < 10:  # the source stays whole and live until step 10
        mailbox = await cluster.ok("GET", "mbx1", "/v1/databases/DB1/mailboxes/alice")
        assert not mailbox["soft_deleted"]
        assert live(await cluster.items("mbx1", "DB1", "alice")) == live(source)
    resumed = await asyncio.to_thread(mrs, cluster, "resume", move["id"], *FAST)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert live(await cluster.items("mbx2", "DB2", "alice")) == live(source)
    assert (await cluster.ok("GET", "mbx1", "/v1/databases/DB1/mailboxes/alice"))["soft_deleted"]


async def test_a_primary_mailbox_and_its_archive_move_together(env):
    cluster = env
    primary = await seed_mailbox(cluster, n=50)
    await cluster.ok("PUT", "mbx1", "/v1/databases/DB1/mailboxes/alice.archive")
    await cluster.ok(
        "POST",
        "mbx1",
        "/v1/databases/DB1/mailboxes/alice.archive/items",
        json={
            "items": [
                {"item_id": f"a{i}", "subject": "old", "body": f"kept {i}"} for i in range(30)
            ]
        },
    )
    archive = await cluster.items("mbx1", "DB1", "alice.archive")
    result = await asyncio.to_thread(
        mrs, cluster, "move", "--mailbox", "alice", "--to", "DB2", "--with-archive", *FAST
    )
    assert result.returncode == 0, result.stdout + result.stderr
    (move,) = json.loads(mrs(cluster, "list", "--json").stdout)
    assert move["state"] == "Completed" and move["mailboxes"] == ["alice", "alice.archive"]
    assert live(await cluster.items("mbx2", "DB2", "alice")) == live(primary)
    assert live(await cluster.items("mbx2", "DB2", "alice.archive")) == live(archive)
    store = EmbeddedClusterStore(cluster.root / "cluster.db")
    assert await store.mailbox_database("alice") == "DB2"
    assert await store.mailbox_database("alice.archive") == "DB2"
    store.close()
    for name in ("alice", "alice.archive"):
        assert (await cluster.ok("GET", "mbx1", f"/v1/databases/DB1/mailboxes/{name}"))[
            "soft_deleted"
        ]
        assert not (await cluster.ok("GET", "mbx2", f"/v1/databases/DB2/mailboxes/{name}"))[
            "locked"
        ]


async def test_a_move_leaves_its_counters_in_a_node_exporter_textfile(env, tmp_path):
    cluster = env
    source = await seed_mailbox(cluster)
    prom = tmp_path / "textfile" / "mrs-alice.prom"
    args = ["move", "--mailbox", "alice", "--to", "DB2", "--metrics-textfile", str(prom)]
    refused = await asyncio.to_thread(mrs, cluster, *args, *FAST)
    assert refused.returncode == 2 and "no directory" in refused.stderr
    prom.parent.mkdir()
    result = await asyncio.to_thread(mrs, cluster, *args, *FAST)
    assert result.returncode == 0, result.stdout + result.stderr
    text = prom.read_text()
    promtool_check(text)
    (move_id,) = {line.split('move_id="')[1].split('"')[0] for line in text.splitlines()
                  if line.startswith("mrs_move_step{")}  # fmt: skip
    move = {"move_id": move_id}
    assert value(text, "mrs_move_state", **move, state="Completed") == 1
    assert value(text, "mrs_move_state", **move, state="InProgress") == 0
    assert value(text, "mrs_move_steps_done", **move) == 10
    assert value(text, "mrs_move_items_copied_total", **move) >= len(source)
    assert value(text, "mrs_move_copied_bytes_total", **move) > 0
    satisfied = value(
        text, "mrs_guarantee_answers_total", **move, method="CheckReplicationFlush",
        status="Satisfied",
    )  # fmt: skip
    assert satisfied >= 1
    assert value(text, "mrs_move_last_update_timestamp_seconds", **move) > time.time() - 300
    assert not list(prom.parent.glob("*.prom.*")), "no temp file left beside it"
