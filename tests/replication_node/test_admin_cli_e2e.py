"""`replication-node status` and `db` admin calls as an operator runs them, over real nodes:
one line saying what happened (the record with --json), and a refused token said as such,
exit 2, whichever way the command found out."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from typing import Any

import pytest

from tests.cluster_harness import ROOT, LocalCluster
from tests.human_output import reprs
from tests.replication_node.e2e import two_nodes

pytestmark = pytest.mark.slow


@pytest.fixture
async def cluster(tmp_path):
    c = two_nodes(tmp_path)
    await c.start()
    await c.wait_status("mbx2", "DB1", "Healthy")
    yield c
    await c.close()


def run(cluster: LocalCluster, *args: str, token: str | None = None):
    """`replication-node ARGS --config …` as an operator runs it (with another token)."""
    return cluster.node_cli(*args, timeout=60, env={"DG_AUTH_TOKEN": token} if token else None)


def run_local(*args: str) -> subprocess.CompletedProcess[str]:
    """`replication-node ARGS` of the commands that read files only (no config)."""
    return subprocess.run(
        [sys.executable, "-m", "replication_node.cli.main", *args],
        capture_output=True, text=True, cwd=ROOT, timeout=60,
    )  # fmt: skip


async def test_admin_calls_say_in_one_line_what_they_did(cluster):
    rolled = run(cluster, "db", "roll-log", "DB1")
    assert rolled.returncode == 0, rolled.stderr
    assert rolled.stdout.startswith("DB1: generation ") and rolled.stdout.count("\n") == 1
    assert "closed (epoch 1)" in rolled.stdout
    suspended = run(cluster, "db", "suspend", "DB1", "--node", "mbx2", "--reason", "patching")
    assert suspended.returncode == 0, suspended.stderr
    assert suspended.stdout == "DB1\\mbx2: suspended; now Suspended (patching)\n"
    resumed = run(cluster, "db", "resume", "DB1", "--node", "mbx2", "--json")
    assert resumed.returncode == 0, resumed.stderr
    record = json.loads(resumed.stdout)
    assert record["node"] == "mbx2" and record["database"] == "DB1"
    refused = run(cluster, "db", "suspend", "DB1", "--node", "mbx1")
    assert refused.returncode == 2 and refused.stdout == ""
    assert refused.stderr == "error: the copy of DB1 on mbx1 is active; suspend a passive copy\n"


async def test_a_refused_token_is_said_as_such_with_exit_2(cluster):
    for args in (
        ("status",),
        ("db", "roll-log", "DB1"),
        ("db", "suspend", "DB1", "--node", "mbx2"),
        ("db", "switchover", "DB1", "--to", "mbx2"),
        ("db", "history", "DB1"),
        ("audit",),
    ):
        done = run(cluster, *args, token="not-the-cluster-token-0123")
        assert done.returncode == 2, (args, done.stdout, done.stderr)
        assert done.stderr == "error: authentication failed (check the token)\n", (args, done)
        assert done.stdout == "", (args, done.stdout)


async def test_status_reads_as_a_person_would_and_filters(cluster):
    table = run(cluster, "status")
    assert table.returncode == 0, table.stderr
    lines = table.stdout.splitlines()
    assert lines[0].startswith("as of 20")  # the date and time of the table
    assert "Pref" in lines[1] and "ReplayLag" in lines[1]
    mbx2 = next(line for line in lines if line.startswith("DB1\\mbx2"))
    assert " Healthy " in mbx2 and "    2 " in mbx2  # its activation preference
    only = run(cluster, "status", "--node", "mbx2").stdout.splitlines()
    assert [line for line in only if line.startswith("DB1\\")] == [
        line for line in only if line.startswith("DB1\\mbx2")
    ]
    assert not any("no copy is mounted" in line for line in only), only
    cluster.kill("mbx2")
    down = run(cluster, "status").stdout
    row = next(line for line in down.splitlines() if line.startswith("DB1\\mbx2"))
    assert row.endswith("unreachable: connection refused"), row
    unknown = run(cluster, "status", "--database", "DB9")
    assert unknown.returncode == 2 and "no database 'DB9'" in unknown.stderr


async def test_rebalance_moves_the_active_back_to_its_preferred_copy(cluster):
    moved = run(cluster, "db", "switchover", "DB1", "--to", "mbx2")
    assert moved.returncode == 0, moved.stderr
    await cluster.wait_status("mbx1", "DB1", "Healthy")
    plan = run(cluster, "db", "rebalance", "--dry-run")
    assert plan.returncode == 0, plan.stderr
    assert plan.stdout.splitlines()[0] == "DB1: would switch over from mbx2 to mbx1"
    assert (await cluster.status("mbx2"))["DB1"]["status"] == "Mounted"  # nothing done

    done = run(cluster, "db", "rebalance")
    assert done.returncode == 0, done.stderr
    first, summary = done.stdout.splitlines()
    assert first.startswith("DB1: switched over from mbx2 to mbx1 at epoch "), first
    assert first.endswith("; 0 log(s) lost") and summary == "1 switched over, 0 failed, 0 skipped"
    assert (await cluster.status("mbx1"))["DB1"]["status"] == "Mounted"

    again = run(cluster, "db", "rebalance")
    assert again.returncode == 0, again.stderr
    assert again.stdout.splitlines() == [
        "DB1: already on its preferred copy (mbx1)",
        "nothing to do: every database is on its preferred copy",
    ]


async def test_rebalance_skips_a_database_whose_preferred_copy_cannot_take_over(cluster):
    assert run(cluster, "db", "switchover", "DB1", "--to", "mbx2").returncode == 0
    await cluster.wait_status("mbx1", "DB1", "Healthy")
    suspended = run(cluster, "db", "suspend", "DB1", "--node", "mbx1", "--reason", "patching")
    assert suspended.returncode == 0, suspended.stderr
    skipped = run(cluster, "db", "rebalance")
    assert skipped.returncode == 0, skipped.stderr
    assert skipped.stdout.splitlines() == [
        "DB1: skipped: the preferred copy cannot take over: mbx1 is Suspended (patching) "
        "(stays on mbx2)",
        "nothing to switch over; 1 database(s) skipped",
    ]
    cluster.kill("mbx1")
    down = run(cluster, "db", "rebalance")
    assert down.returncode == 0, down.stderr
    assert down.stdout.startswith(
        "DB1: skipped: the preferred copy cannot take over: mbx1: unreachable: connection refused"
    ), down.stdout


async def test_a_call_to_a_stopped_node_is_given_up_at_its_timeout_and_never_carried_out(cluster):
    """Issue 48: a node stopped (SIGSTOP) still has its kernel accept the call and keep it;
    the command gives up at --timeout in one line saying how to check, and the node, when
    it runs again and reads the call past its deadline, refuses it: nothing is suspended."""
    stopped = cluster.procs["mbx2"]
    stopped.send_signal(signal.SIGSTOP)
    try:
        started = time.monotonic()
        given_up = run(cluster, "db", "suspend", "DB1", "--node", "mbx2", "--timeout", "1s")
        waited = time.monotonic() - started
    finally:
        stopped.send_signal(signal.SIGCONT)
    assert given_up.returncode == 1 and given_up.stdout == "", given_up.stderr
    assert given_up.stderr == (
        "error: node mbx2 did not answer within 1s: the suspend of DB1\\mbx2 may still be "
        "carried out, if mbx2 read the call in time: `replication-node status --database DB1` "
        "shows whether it was\n"
    )
    assert waited < 30, waited  # the interpreter's start on a loaded machine, and 1 s

    async def suspends() -> list[dict[str, Any]]:
        trail = await cluster.ok("GET", "mbx2", "/v1/audit?database=DB1")
        return [e for e in trail["lines"] if e["path"].endswith("/copies/mbx2/suspend")]

    async def read() -> bool:  # the node, running again, has read the call it was sent
        return bool(await suspends())

    await cluster.wait_for("mbx2 to read the suspend it was sent while stopped", read)
    [line] = await suspends()
    assert (line["status"], line["result"]) == (408, "refused"), line
    assert (await cluster.status("mbx2"))["DB1"]["status"] == "Healthy"
    assert "after its caller's deadline (by this server's clock)" in cluster.log("mbx2")


async def test_no_command_prints_a_python_repr(cluster, tmp_path):
    """Issue 48: human output has no brackets of a list, no None: every command that
    prints for a person, run against the cluster."""
    commands = [
        ("status",),
        ("status", "--database", "DB1"),
        ("db", "roll-log", "DB1"),
        ("db", "suspend", "DB1", "--node", "mbx2", "--reason", "patching"),
        ("db", "resume", "DB1", "--node", "mbx2"),
        ("db", "suspend", "DB1", "--node", "mbx2", "--activation-only"),
        ("db", "resume", "DB1", "--node", "mbx2", "--activation-only"),
        ("db", "history", "DB1"),
        ("db", "rebalance", "--dry-run"),
        ("db", "rebalance"),
        ("mailbox", "create", "alice", "--database", "DB1"),
        ("mailbox", "put", "alice", "--database", "DB1", "--count", "3"),
        ("mailbox", "list", "alice", "--database", "DB1"),
        ("mailbox", "where", "alice"),
        ("cluster", "pause", "--reason", "patching"),
        ("status",),
        ("cluster", "resume"),
        ("db", "backup", "DB1", "--from", "mbx2", "--to", str(tmp_path / "full")),
        ("db", "restore", str(tmp_path / "full"), "--to", str(tmp_path / "restored")),
        ("db", "header", str(tmp_path / "restored" / "DB1.sqlite")),
        ("audit",),
    ]
    printed = []
    for args in commands:
        files_only = args[:2] in (("db", "header"), ("db", "restore"))
        done = run_local(*args) if files_only else run(cluster, *args)
        assert done.returncode == 0, (args, done.stderr)
        printed.append((args, reprs(done.stdout + done.stderr)))
    logs = sorted((tmp_path / "full").rglob("E*.log"))
    dumped = run_local("log", "dump", str(logs[-1]), "--records")
    assert dumped.returncode == 0, dumped.stderr
    printed.append((("log", "dump"), reprs(dumped.stdout)))
    assert [(args, lines) for args, lines in printed if lines] == []
