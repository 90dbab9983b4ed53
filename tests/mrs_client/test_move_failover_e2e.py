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
import contextlib
import logging
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import aiohttp
import pytest

from dag_common.clock import SystemClock
from dag_common.config import load_config
from mrs_client.guarantee_client import GrpcGuaranteeClient
from mrs_client.mover import Mover
from mrs_client.node_client import NodeStoreClient
from mrs_client.policy import MoveSettings, MoveState
from mrs_client.requests_store import MoveRecord, MoveRequestStore
from replication_node.cluster.store.embedded import EmbeddedClusterStore
from tests.cluster_harness import TOKEN, LocalCluster

pytestmark = pytest.mark.slow

NODES = [("mbx1", "redmond"), ("mbx2", "redmond"), ("mbx3", "dublin")]
SETTINGS = MoveSettings(
    health_check_interval=timedelta(milliseconds=200),
    stall_retry_interval=timedelta(milliseconds=300),
    flush_retry_interval=timedelta(milliseconds=200),
    flush_first_check_after=timedelta(milliseconds=400),
    sync_batch=40,
    sync_batch_bytes=32 * 1024,
)


def databases():
    return [
        {
            "name": "DB1",
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
        nodes=NODES,
        databases=databases(),
        defaults={"failover_after": "2s", "auto_database_mount_dial": "BestAvailability"},
    )
    c.config["guarantee_api"]["limits"] = {
        "wait_no_status": "1s",
        "wait_no_healthy_copy": "1s",
        "wait_behind": "1s",
    }
    c.write_config()
    await c.start()
    api = await c.start_guarantee_api()
    for db, passives in (("DB1", ("mbx2", "mbx3")), ("DB2", ("mbx3", "mbx1"))):
        for node in passives:
            await c.wait_status(node, db, "Healthy")
    yield c
    api.terminate()
    api.wait(timeout=20)
    await c.close()


@dataclass
class Pause:
    """Pause the mover at the first call matching `when` (before or after it runs)."""

    when: Any  # (method, database, calls so far of that method on that database) -> bool
    after: bool = True
    reached: asyncio.Event = field(default_factory=asyncio.Event)
    release: asyncio.Event = field(default_factory=asyncio.Event)


class PausingNodes:
    """The real node client, with pauses a test sets (store_api.NodeStore)."""

    def __init__(self, inner: NodeStoreClient) -> None:
        self.inner = inner
        self.pauses: list[Pause] = []
        self.counts: dict[tuple[str, str], int] = {}

    def pause(self, when: Any, *, after: bool = True) -> Pause:
        p = Pause(when, after)
        self.pauses.append(p)
        return p

    async def _checkpoint(self, method: str, database: str, after: bool) -> None:
        n = self.counts.get((method, database), 0)
        for p in self.pauses:
            if p.after == after and not p.reached.is_set() and p.when(method, database, n):
                p.reached.set()
                await p.release.wait()

    def __getattr__(self, method: str) -> Any:
        call = getattr(self.inner, method)

        async def wrapped(database: str, *args: Any, **kw: Any) -> Any:
            self.counts[(method, database)] = self.counts.get((method, database), 0) + 1
            await self._checkpoint(method, database, after=False)
            result = await call(database, *args, **kw)
            await self._checkpoint(method, database, after=True)
            return result

        return wrapped


@dataclass
class Run:
    nodes: PausingNodes
    task: asyncio.Task[MoveRecord]
    lines: list[str]
    move_id: str


@contextlib.asynccontextmanager
async def mover_in_process(c: LocalCluster, settings: MoveSettings = SETTINGS):
    config = load_config(c.config_path)
    directory = EmbeddedClusterStore(c.root / "cluster.db")
    requests = MoveRequestStore(c.root / "moves.db")
    guarantee = GrpcGuaranteeClient(config.guarantee_api.listen, token=TOKEN)
    async with aiohttp.ClientSession() as session:
        nodes = PausingNodes(NodeStoreClient(config, token=TOKEN, session=session))
        lines: list[str] = []
        mover = Mover(
            requests=requests,
            nodes=nodes,  # type: ignore[arg-type]
            guarantee=guarantee,
            directory=directory,
            databases={"DB1", "DB2"},
            clock=SystemClock(),
            settings=settings,
            progress=lambda record, line: line and lines.append(line),
        )

        async def start(mailbox: str = "alice") -> Run:
            record = await mover.submit(mailbox, "DB2")
            return Run(nodes, asyncio.create_task(mover.run(record.id)), lines, record.id)

        try:
            yield start, requests
        finally:
            await guarantee.close()
            directory.close()
            requests.close()


async def fill(c: LocalCluster, node: str, first: int, n: int, *, tag: str = "m") -> None:
    """Write items to alice in DB1 on `node` (its active), 40 a request."""
    for start in range(first, first + n, 40):
        await c.ok(
            "POST",
            node,
            "/v1/databases/DB1/mailboxes/alice/items",
            json={
                "items": [
                    {
                        "item_id": f"{tag}{i}",
                        "folder": "Projects" if i % 3 else "Inbox",
                        "subject": f"{tag} {i}",
                        "body": f"{tag} body {i} " * 90,  # about 1.2 KB
                    }
                    for i in range(start, min(first + n, start + 40))
                ]
            },
        )


async def seed(c: LocalCluster, n: int = 1200) -> None:
    await c.ok("PUT", "mbx1", "/v1/databases/DB1/mailboxes/alice", json={"display_name": "A"})
    await c.ok(
        "POST", "mbx1", "/v1/databases/DB1/mailboxes/alice/folders", json={"folder": "Projects"}
    )
    await fill(c, "mbx1", 0, n)
    for i in range(0, n, 97):
        await c.ok("DELETE", "mbx1", f"/v1/databases/DB1/mailboxes/alice/items/m{i}")
    await c.ok("POST", "mbx1", "/v1/databases/DB1/roll-log")


async def active_of(c: LocalCluster, db: str) -> str:
    """The node whose copy of `db` is mounted now (among the running ones)."""
    found: list[str] = []

    async def mounted() -> bool:
        for node in list(c.procs):
            copy = (await c.status(node)).get(db)
            if copy and copy["role"] == "Active" and copy["status"] == "Mounted":
                found.append(node)
                return True
        return False

    await c.wait_for(f"a mounted copy of {db}", mounted, timeout=120)
    return found[-1]


def live(items: dict[str, dict[str, Any]]) -> dict[str, tuple[str, str, str]]:
    return {k: (v["folder"], v["subject"], v["body"]) for k, v in items.items() if not v["deleted"]}


async def outcome(c: LocalCluster, run: Run) -> tuple[MoveRecord, dict[str, tuple[str, str, str]]]:
    """Wait for the move; check it completed with the target equal to the source (read
    through the nodes that hold the actives now); the source's live items."""
    record = await asyncio.wait_for(run.task, timeout=300)
    print("\n".join(run.lines))  # shown when a test fails
    source_node = await active_of(c, "DB1")
    source = live(await c.items(source_node, "DB1", "alice"))
    box = await c.ok("GET", source_node, "/v1/databases/DB1/mailboxes/alice")
    if record.state is not MoveState.COMPLETED:
        # the only other acceptable end: the source whole, and not soft-deleted
        assert record.state is MoveState.FAILED and not box["soft_deleted"], record
        raise AssertionError(f"the move failed (source kept): {record.failure}\n{run.lines}")
    target_node = await active_of(c, "DB2")
    target = live(await c.items(target_node, "DB2", "alice"))
    assert target == source, (
        f"missing on the target: {sorted(set(source) - set(target))[:10]}, "
        f"extra: {sorted(set(target) - set(source))[:10]}"
    )
    assert box["soft_deleted"]
    row = await c.ok("GET", target_node, "/v1/databases/DB2/mailboxes/alice")
    assert not row["locked"] and not row["soft_deleted"]
    store = EmbeddedClusterStore(c.root / "cluster.db")
    assert await store.mailbox_database("alice") == "DB2"
    store.close()
    return record, source


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
        # The roll closes the log holding the last batches; the kill comes right after,
        # before (most of the time) a copy has fetched it.
        pause = run.nodes.pause(lambda method, db, n: (method, db) == ("roll_log", "DB2"))
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
