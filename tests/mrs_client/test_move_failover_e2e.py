"""End to end, over real node processes and the real guarantee API: kill -9 of an end's
active copy (or a switchover) in the middle of a move, automatic failover under
BestAvailability, and the move either completes with the target holding exactly the
source's live items, or fails with the source whole and not soft-deleted.

The mover runs in this process (an asyncio task) over the real node client, with a thin
wrapper that pauses it at a chosen call, so that the test kills a node at that exact point
(after a batch was acknowledged, before the next one) and then lets it go on.
"""

from __future__ import annotations

import asyncio
import logging

import pytest

from mrs_client.requests_store import MoveRequestStore
from tests.cluster_harness import THREE_NODES, LocalCluster
from tests.mrs_client.e2e import (
    Pause,
    Run,
    active_of,
    fill,
    live,
    mover_in_process,
    outcome,
    seed,
    shorten_guarantee_waits,
)

pytestmark = pytest.mark.slow


def databases():
    return [
        {
            "name": "DB1",
            # File mode: the open log is lost with its active (block mode would keep what
            # the copies held), the lossy failover the source's tests need.
            "block_mode": False,
            "copies": [
                {"node": "mbx1", "activation_preference": 1},
                {"node": "mbx2", "activation_preference": 2},
                {"node": "mbx3", "activation_preference": 3},
            ],
        },
        {
            "name": "DB2",
            "data_move_replication_constraint": "SecondCopy",
            "copies": [
                {"node": "mbx2", "activation_preference": 1},
                {"node": "mbx3", "activation_preference": 2},
                {"node": "mbx1", "activation_preference": 3},
            ],
        },
    ]


@pytest.fixture
async def cluster(tmp_path):
    c = LocalCluster(
        tmp_path,
        nodes=THREE_NODES,
        databases=databases(),
        defaults={"failover_after": "2s", "auto_database_mount_dial": "BestAvailability"},
    )
    shorten_guarantee_waits(c)
    await c.start()
    api = await c.start_guarantee_api()
    for db, passives in (("DB1", ("mbx2", "mbx3")), ("DB2", ("mbx3", "mbx1"))):
        for node in passives:
            await c.wait_status(node, db, "Healthy")
    yield c
    api.terminate()
    api.wait(timeout=20)
    await c.close()


def target_writes(after: int):
    return lambda method, db, n: (method, db) == ("put_items", "DB2") and n >= after


async def kill_target_active_at(
    c: LocalCluster, run: Run, pause: Pause, requests: MoveRequestStore
) -> None:
    """At the pause: kill -9 DB2's active, wait for the failover, let the mover go on."""
    await asyncio.wait_for(pause.reached.wait(), timeout=240)
    assert not run.task.done(), run.lines
    acknowledged = requests.get(run.move_id).items_copied  # type: ignore[union-attr]
    c.kill("mbx2")  # DB2's active: what its open log held was never shipped
    node = await active_of(c, "DB2")
    held = len(live(await c.items(node, "DB2", "alice")))
    print(f"acknowledged {acknowledged} items; {node}, DB2's new active, holds {held}")
    pause.release.set()


async def test_kill_9_of_the_target_active_during_the_initial_sync(cluster):
    c = cluster
    await seed(c)
    async with mover_in_process(c) as (start, requests):
        run = await start()
        pause = run.nodes.pause(target_writes(after=12))
        await kill_target_active_at(c, run, pause, requests)
        record, _ = await outcome(c, run)
    assert record.target_epoch > 1 and record.reconciles >= 1, run.lines
    assert any(line.startswith("reconciled") for line in run.lines)


async def test_kill_9_of_the_target_active_during_an_incremental_sync(cluster):
    c = cluster
    await seed(c, n=800)
    async with mover_in_process(c) as (start, requests):
        run = await start()
        first_read = run.nodes.pause(
            lambda method, db, n: (method, db) == ("items", "DB1") and n >= 2, after=False
        )
        await asyncio.wait_for(first_read.reached.wait(), timeout=240)
        # The initial sync is done; changes for the incremental sync to copy:
        await fill(c, "mbx1", 5000, 400)
        puts = run.nodes.counts.get(("put_items", "DB2"), 0)
        pause = run.nodes.pause(target_writes(after=puts + 4))
        first_read.release.set()
        await kill_target_active_at(c, run, pause, requests)
        record, source = await outcome(c, run)
    assert "m5399" in source and record.reconciles >= 1, run.lines


async def test_kill_9_of_the_target_active_between_the_final_sync_and_the_flush(cluster):
    c = cluster
    await seed(c, n=600)
    async with mover_in_process(c) as (start, requests):
        run = await start()
        # The final sync's flush point is marked (the target's log position read, its
        # copies following in block mode; or its log rolled); the kill comes right after.
        pause = run.nodes.pause(
            lambda method, db, n: method in ("log_position", "roll_log") and db == "DB2"
        )
        await kill_target_active_at(c, run, pause, requests)
        record, _ = await outcome(c, run)
    assert record.target_epoch > 1 and record.reconciles >= 1, run.lines


async def test_a_switchover_of_the_target_mid_move_is_followed_without_a_stall(cluster, caplog):
    c = cluster
    caplog.set_level(logging.INFO, logger="mrs_client.node_client")
    await seed(c)
    async with mover_in_process(c) as (start, requests):
        run = await start()
        pause = run.nodes.pause(target_writes(after=8))
        await asyncio.wait_for(pause.reached.wait(), timeout=240)
        acknowledged = requests.get(run.move_id).items_copied  # type: ignore[union-attr]
        switch = asyncio.create_task(
            asyncio.to_thread(c.node_cli, "db", "switchover", "DB2", "--to", "mbx3")
        )

        async def quiesced() -> bool:
            # refused before any change is made: 409 while writes are stopped
            status, _ = await c.call(
                "POST", "mbx2", "/v1/databases/DB2/mailboxes/zzprobe/items", json={"subject": "x"}
            )
            return status == 409 or switch.done()

        await c.wait_for("the old active to stop its writes", quiesced)
        pause.release.set()
        done = await switch
        assert done.returncode == 0, done.stdout + done.stderr
        held = len(live(await c.items("mbx3", "DB2", "alice")))
        assert held >= acknowledged, "a switchover loses nothing"
        record, _ = await outcome(c, run)
    # The writes refused while the old active was quiesced were asked again shortly,
    # without a stall (before, each cost the seed's 30 s stall_retry_interval).
    assert "following a switchover of DB2 to mbx3" in caplog.text
    stalls = [line for line in run.lines if line.startswith("stalled:") and "409" in line]
    assert not stalls, stalls
    assert record.target_epoch > 1 and record.reconciles >= 1, run.lines


async def test_kill_9_of_the_source_active_then_writes_on_its_new_active(cluster):
    c = cluster
    await seed(c, n=900)
    # Acknowledged by DB1's active, in its open log, never shipped: lost with it.
    await fill(c, "mbx1", 0, 10, tag="risk")
    async with mover_in_process(c) as (start, _):
        run = await start()
        # two thirds into the initial sync (the listing it copies from holds the risk items)
        pause = run.nodes.pause(target_writes(after=16))
        await asyncio.wait_for(pause.reached.wait(), timeout=240)
        c.kill("mbx1")
        new_active = await active_of(c, "DB1")
        items = await c.items(new_active, "DB1", "alice")
        assert not [k for k in items if k.startswith("risk")], "the failover lost them"
        await fill(c, new_active, 0, 10, tag="new")  # numbered again from the lost numbers
        pause.release.set()
        record, source = await outcome(c, run)
    assert {f"new{i}" for i in range(10)} <= set(source)
    assert not {k for k in source if k.startswith("risk")}
    assert record.source_epoch > 1 and record.reconciles >= 1, run.lines
