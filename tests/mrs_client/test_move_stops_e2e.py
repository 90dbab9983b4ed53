"""End to end: `mrs suspend` and `mrs cancel` from a second `mrs` process while a real
`mrs move` runs, over real node processes and the real guarantee API."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time

import pytest

from tests.cluster_harness import ROOT
from tests.mrs_client import test_move_e2e
from tests.mrs_client.e2e import live
from tests.mrs_client.test_move_e2e import FAST, mrs, seed_mailbox

pytestmark = pytest.mark.slow
env = test_move_e2e.env  # the same three-node cluster with the guarantee API


def start_move(cluster, *extra: str) -> subprocess.Popen:
    return subprocess.Popen(
        [
            sys.executable, "-m", "mrs_client.cli", "move", "--mailbox", "alice", "--to", "DB2",
            *FAST, *extra,
            "--config", str(cluster.config_path),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=cluster.env(),
        cwd=ROOT,
    )  # fmt: skip


def read_until(proc: subprocess.Popen, words: str, seen: list[str]) -> str:
    """The move's id, once a line of its output holds `words` (lines kept in `seen`)."""
    deadline = time.monotonic() + 120
    for line in proc.stdout:
        seen.append(line)
        if words in line:
            return line.split()[0]
        assert time.monotonic() < deadline, "".join(seen)
    raise AssertionError(f"the move ended before {words!r}:\n{''.join(seen)}")


async def test_a_move_suspended_by_another_mrs_while_copying_resumes_and_completes(env):
    cluster = env
    source = await seed_mailbox(cluster, n=3000)
    move = start_move(cluster, "--sync-batch", "10")
    lines: list[str] = []
    move_id = await asyncio.to_thread(read_until, move, "step 3:", lines)
    suspended = await asyncio.to_thread(mrs, cluster, "suspend", move_id)
    assert suspended.returncode == 0, suspended.stdout + suspended.stderr
    assert suspended.stdout.startswith(f"move {move_id} suspended at step "), suspended.stdout
    rest, _ = await asyncio.to_thread(move.communicate, timeout=60)
    output = "".join(lines) + rest
    assert move.returncode == 1, output
    assert "move stopped by `mrs suspend` at step" in output
    assert f"move {move_id}: Suspended at step" in output.splitlines()[-1]
    shown = (await asyncio.to_thread(mrs, cluster, "show", move_id)).stdout
    assert "State                 Suspended" in shown, shown
    record = json.loads((await asyncio.to_thread(mrs, cluster, "show", move_id, "--json")).stdout)
    assert record["state"] == "Suspended" and 0 < record["items_copied"] < len(source)
    # Suspended, the move keeps its locked target copy and its claim.
    target = await cluster.ok("GET", "mbx2", "/v1/databases/DB2/mailboxes/alice")
    assert target["locked"]
    again = await asyncio.to_thread(mrs, cluster, "move", "--mailbox", "alice", "--to", "DB2")
    assert again.returncode == 2 and "already" in again.stderr, again.stderr
    resumed = await asyncio.to_thread(mrs, cluster, "resume", move_id, *FAST)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert live(await cluster.items("mbx2", "DB2", "alice")) == live(source)
    assert (await cluster.ok("GET", "mbx1", "/v1/databases/DB1/mailboxes/alice"))["soft_deleted"]


async def test_cancel_of_a_suspended_move_leaves_the_source_readable_and_free(env):
    cluster = env
    source = await seed_mailbox(cluster, n=300)
    move = start_move(cluster, "--sync-batch", "50")
    lines: list[str] = []
    # Killed at its final sync (the source locked since step 5), then suspended.
    move_id = await asyncio.to_thread(read_until, move, "step 6:", lines)
    os.kill(move.pid, signal.SIGKILL)
    move.wait()
    assert (await cluster.ok("GET", "mbx1", "/v1/databases/DB1/mailboxes/alice"))["locked"]
    suspended = await asyncio.to_thread(mrs, cluster, "suspend", move_id)
    assert suspended.returncode == 0, suspended.stdout + suspended.stderr
    cancelled = await asyncio.to_thread(mrs, cluster, "cancel", move_id)
    assert cancelled.returncode == 0, cancelled.stdout + cancelled.stderr
    assert cancelled.stdout == (
        f"move {move_id} cancelled: target mailbox removed from DB2, source unlocked\n"
    )
    # The target copy is gone from DB2; the source is whole, unlocked and takes mail again.
    status, _ = await cluster.call("GET", "mbx2", "/v1/databases/DB2/mailboxes/alice")
    assert status == 404
    box = await cluster.ok("GET", "mbx1", "/v1/databases/DB1/mailboxes/alice")
    assert not box["locked"] and not box["soft_deleted"]
    assert live(await cluster.items("mbx1", "DB1", "alice")) == live(source)
    await cluster.ok(
        "POST",
        "mbx1",
        "/v1/databases/DB1/mailboxes/alice/items",
        json={"item_id": "after", "folder": "Inbox", "subject": "hello", "body": "again"},
    )
    shown = json.loads((await asyncio.to_thread(mrs, cluster, "show", move_id, "--json")).stdout)
    assert shown["state"] == "Cancelled" and shown["stop_requested"] is None
    twice = await asyncio.to_thread(mrs, cluster, "cancel", move_id)
    assert twice.returncode == 0 and "already cancelled" in twice.stdout
    # The mailbox is free: a new move is accepted and completes, through DB2's copies that
    # replayed the removal.
    moved = await asyncio.to_thread(
        mrs, cluster, "move", "--mailbox", "alice", "--to", "DB2", *FAST
    )
    assert moved.returncode == 0, moved.stdout + moved.stderr
    source = live(await cluster.items("mbx1", "DB1", "alice"))
    assert "after" in source
    assert live(await cluster.items("mbx2", "DB2", "alice")) == source
