"""The open log at risk over real node processes: kill -9 of the active with acknowledged
commits in its E00.log.  Under Lossless no copy mounts while its node is down; the node
coming back holds its last logs for the best copy, which copies them (the open log too) and
mounts with every acknowledged item; under BestAvailability a copy mounts and the
loss reported counts the open log; an open log holding only its header loses nothing."""

from __future__ import annotations

import asyncio
import json

import pytest

from tests.replication_node.e2e import converged, three_nodes

pytestmark = pytest.mark.slow


async def started(tmp_path, dial):
    c = three_nodes(tmp_path, defaults={"failover_after": "1s", "auto_database_mount_dial": dial})
    await c.start()
    for node in ("mbx2", "mbx3"):
        await c.wait_status(node, "DB1", "Healthy")
    return c


async def acknowledged_writes(cluster, mailbox, n):
    """`n` items written one per request, each answered 201; no roll."""
    await cluster.ok("PUT", "mbx1", f"/v1/databases/DB1/mailboxes/{mailbox}")
    for i in range(n):
        status, body = await cluster.call(
            "POST",
            "mbx1",
            f"/v1/databases/DB1/mailboxes/{mailbox}/items",
            json={"item_id": f"i{i}", "subject": f"s{i}", "body": "b" * 200},
        )
        assert status == 201, body
    return body["lsn"]["generation"]


async def test_lossless_waits_for_the_lost_active_and_loses_nothing(tmp_path):
    c = await started(tmp_path, "Lossless")
    try:
        open_generation = await acknowledged_writes(c, "alice", 30)

        # the copies count the open log holding commits as outstanding work
        async def queued():
            copy = (await c.status("mbx2"))["DB1"]
            # the mailbox and 30 items: 31 commits, heard within a second of the last one
            return copy["copy_queue_length"] == 1 and copy["open_commits"] == 31

        await c.wait_for("mbx2's copy queue to count the open log", queued)
        assert (await c.status("mbx1"))["DB1"]["last_log_generated"] == open_generation
        before = await c.items("mbx1", "DB1", "alice")
        assert len(before) == 30
        c.kill("mbx1")

        # the failover monitor of the best copy considers it, and refuses
        async def refused():
            return "more than Lossless allows" in c.log("mbx2")

        await c.wait_for("the failover to be refused under Lossless", refused)
        assert f"generation {open_generation}, the open log E00.log" in c.log("mbx2")
        code, body = await c.call(
            "POST", "mbx2", "/v1/databases/DB1/activate", json={"node": "mbx2"}
        )
        assert code == 409, body
        assert (
            f"1 log(s) lost: generation {open_generation}, the open log E00.log with at least "
            "31 acknowledged commit(s)" in body["error"]
        )
        assert "until mbx1 returns with its logs" in body["error"]
        lost = (body["lost_logs"], body["lost_open_log"], body["lost_commits_at_least"])
        assert lost == (1, True, 31)
        for node in ("mbx2", "mbx3"):
            assert (await c.status(node))["DB1"]["role"] == "Passive"
        # the status tells the operator the same: one log outstanding, the open one
        shown = json.loads((await asyncio.to_thread(c.node_cli, "status", "--json")).stdout)
        row = next(r for r in shown if r.get("node") == "mbx2" and r["database"] == "DB1")
        assert row["copy_queue_length"] == 1 and row["last_log_generated"] == open_generation
        table = (await asyncio.to_thread(c.node_cli, "status")).stdout
        assert (
            f"DB1: no copy is mounted; mounting mbx2 now: 1 log(s) lost: generation "
            f"{open_generation}, the open log E00.log with at least 31 acknowledged" in table
        ), table

        # the node comes back: it holds its last logs for the waiting copy instead of
        # mounting; that copy copies them, the open log included, and mounts losing nothing
        await c.start("mbx1")
        await c.wait_status("mbx2", "DB1", "Mounted")
        assert await c.items("mbx2", "DB1", "alice") == before, "every acknowledged item"
        log = c.log("mbx2")
        assert (
            f"last logs copied from mbx1: closed generations through {open_generation - 1}, "
            f"and the open log E00.log as generation {open_generation}; 0 log(s) lost" in log
        ), log
        assert "the copy on mbx2 waits to mount it with this node's last logs" in c.log("mbx1")
        assert "re-mounted" not in c.log("mbx1")
        # a write acknowledged before the failure survived it: the new epoch begins after
        # the open log the copy kept
        epochs = [(await c.status(n))["DB1"]["epoch"] for n in ("mbx1", "mbx2", "mbx3")]
        assert (await c.status("mbx2"))["DB1"]["role"] == "Active"
        # the old active rejoins as a passive copy of the new one, without a reseed, and
        # every copy converges on the new stream, a new write included
        await c.ok(
            "POST", "mbx2", "/v1/databases/DB1/mailboxes/alice/items", json={"item_id": "after"}
        )
        await converged(c, "DB1", "mbx2", ["mbx1", "mbx3"])
        for node in ("mbx1", "mbx3"):
            held = await c.items(node, "DB1", "alice")
            assert set(held) == set(before) | {"after"}, (node, epochs)
        assert (await c.status("mbx1"))["DB1"]["role"] == "Passive"
        assert "reseed" not in c.log("mbx1").lower()
    finally:
        await c.close()


async def test_best_availability_mounts_a_copy_and_counts_the_open_log(tmp_path):
    c = await started(tmp_path, "BestAvailability")
    try:
        open_generation = await acknowledged_writes(c, "alice", 10)
        c.kill("mbx1")

        async def mounted():
            statuses = [(await c.status(n))["DB1"]["status"] for n in ("mbx2", "mbx3")]
            return "Mounted" in statuses

        await c.wait_for("a copy to mount", mounted)
        log = c.log("mbx2") + c.log("mbx3")
        assert f"1 log(s) lost: generation {open_generation}, the open log E00.log" in log
        assert "0 log(s) lost" not in log
    finally:
        await c.close()


async def test_lossless_mounts_at_once_when_the_open_log_holds_only_its_header(tmp_path):
    c = await started(tmp_path, "Lossless")
    try:
        await acknowledged_writes(c, "alice", 10)
        closed = await converged(c, "DB1", "mbx1", ["mbx2", "mbx3"])  # roll-log: E00.log empty
        before = await c.items("mbx1", "DB1", "alice")
        c.kill("mbx1")

        await c.wait_status("mbx2", "DB1", "Mounted")
        assert f"0 log(s) lost (mbx2 has inspected through generation {closed}" in c.log("mbx2")
        assert await c.items("mbx2", "DB1", "alice") == before
    finally:
        await c.close()
