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
import dataclasses
import json
import logging
import time

import aiohttp
import pytest

from mrs_client.policy import MoveState
from tests.cluster_harness import THREE_NODES, LocalCluster
from tests.mrs_client.e2e import (
    SETTINGS,
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
from tests.mrs_client.fakes import SyncMoves
from tests.resilience.workload import Writer

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
    c: LocalCluster, run: Run, pause: Pause, requests: SyncMoves
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


async def test_kill_9_of_the_target_active_while_a_mailbox_of_large_items_is_moved(cluster):
    """Items of 1-30 MiB (each its own write, staged across many 1 MiB generations on the
    target), the target's active killed after the first large ones were acknowledged: the
    move completes after the failover with the target holding exactly the source's items,
    the large ones whole."""
    c = cluster
    await seed(c, n=200)
    sizes = {"L1": 1_500_000, "L2": 6_000_000, "L3": 12_000_000, "L4": 30_000_000}
    for item_id, size in sizes.items():
        body = (f"{item_id} " * (size // 3 + 1))[:size]
        await c.ok(
            "POST",
            "mbx1",
            "/v1/databases/DB1/mailboxes/alice/items",
            json={"item_id": item_id, "subject": item_id, "body": body},
            timeout=aiohttp.ClientTimeout(total=300),
        )
    async with mover_in_process(c) as (start, requests):
        run = await start()
        first_large = run.nodes.pause(target_writes(after=4))  # L1 and L2 written
        await kill_target_active_at(c, run, first_large, requests)
        record, source = await outcome(c, run)
    assert record.target_epoch > 1, run.lines
    assert {k: len(source[k][2]) for k in sizes} == sizes  # and the target equals the source


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
    caplog.set_level(logging.INFO, logger="dag_common.node_client")
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
    # without a stall (before, each cost the seed's 30 s stall_retry_interval).  The first
    # refusal names mbx3 (quiesced) or no one yet (the copies changing role): either way the
    # mover follows.
    assert "following a switchover of DB2" in caplog.text
    stalls = [line for line in run.lines if line.startswith("stalled:") and "409" in line]
    assert not stalls, stalls
    assert record.target_epoch > 1 and record.reconciles >= 1, run.lines


async def test_switchovers_under_16_writers_and_a_move_each_succeed_on_the_first_try(cluster):
    """Ten switchovers of DB2 round its three copies while 16 writers write into it and
    moves copy mailboxes into it (one always running, the next started when one ends): each
    `db switchover` succeeds on the first try, no acknowledged write is lost, a write refused
    meanwhile is a 409 naming the target (never a 5xx, never an error after it was written),
    nothing dismounts or goes through crash recovery, and each move follows the switchovers
    without a stall.  Before, a commit caught between its fsync and its fence when the quiesce
    released the lease stopped the stream: the active dismounted, re-mounted through crash
    recovery, and the switchover failed; and a read sent to the old active while its copy
    changed role was a 404 that stalled the move."""
    c = cluster
    boxes = [f"box{n}" for n in range(10)]
    for box in boxes:
        await seed(c, n=400, mailbox=box)
    await c.ok("PUT", "mbx2", "/v1/databases/DB2/mailboxes/load", json={"display_name": "L"})
    nodes = ["mbx2", "mbx3", "mbx1"]
    writers = [
        Writer(c, "DB2", "load", nodes, target="mbx2", prefix=f"w{n}-", body=2000)
        for n in range(16)
    ]
    tasks = [asyncio.create_task(w.run()) for w in writers]
    runs: list[Run] = []
    try:
        async with mover_in_process(c, dataclasses.replace(SETTINGS, sync_batch=10)) as (
            start,
            _,
        ):
            since = time.monotonic()
            for w in writers:
                await w.acks_after(2, since)
            active, switched = "mbx2", []
            for i in range(10):
                target = nodes[(i + 1) % 3]
                # The copy taking over is Healthy: the old active of the switchover before
                # last has caught up as a passive (an operator would look first as well).
                await c.wait_status(target, "DB2", "Healthy")
                if not runs or runs[-1].task.done():
                    runs.append(await start(boxes[len(runs)]))
                done = await asyncio.to_thread(
                    c.node_cli, "db", "switchover", "DB2", "--to", target, "--json"
                )
                assert done.returncode == 0, f"switchover {i + 1} to {target}: {done.stderr}"
                switched.append(json.loads(done.stdout)["node"])
                active, since = target, time.monotonic()
                # the load goes on on the new active before the next one
                await writers[i].acks_after(3, since, node=active)
            assert switched == [nodes[(i + 1) % 3] for i in range(10)]
            records = [(await outcome(c, run))[0] for run in runs]
    finally:
        for w in writers:
            w.stopped = True
        await asyncio.gather(*tasks)
    answers = [a for w in writers for a in w.answers]
    acked = {a.item for a in answers if a.acked}
    held = {k for k, v in (await c.items(active, "DB2", "load")).items() if not v["deleted"]}
    assert acked <= held, f"acknowledged and lost: {sorted(acked - held)[:10]}"
    refused = [a for a in answers if not a.acked]
    assert all(a.code == 409 for a in refused), {(a.code, a.error) for a in refused}
    assert len(acked) > 16 * 20, f"the load was light: {len(acked)} writes acknowledged"
    for node in nodes:
        log = c.log(node)
        assert "crash recovery" not in log and "dismounted after" not in log, node
    lines = runs[0].lines  # every move's, in order: one mover ran them
    stalls = [line for line in lines if line.startswith("stalled:")]
    assert not stalls, stalls
    assert all(record.state is MoveState.COMPLETED for record in records), lines
    print(
        f"{len(acked)} writes acknowledged, {len(refused)} refused (409) over 10 switchovers; "
        f"{len(runs)} moves"
    )


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
