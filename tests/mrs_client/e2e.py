"""Shared by the mover's tests over real node processes and the real guarantee API: the
service's waits shortened, a mover run in this process over the real node client (with
pauses a test sets, to kill a node at an exact point), a seeded mailbox, and the check of a
move's outcome (the target holding exactly the source's live items)."""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from dag_common.clock import SystemClock
from dag_common.cluster_store.embedded import EmbeddedClusterStore
from dag_common.config import load_config
from dag_common.http_client import client_session
from dag_common.node_client import NodeStoreClient
from mrs_client.guarantee_client import GrpcGuaranteeClient
from mrs_client.move_store.embedded import EmbeddedMoveStore
from mrs_client.move_store.interface import MoveRecord
from mrs_client.mover import Mover
from mrs_client.policy import MoveSettings, MoveState
from tests.cluster_harness import TOKEN, LocalCluster
from tests.mrs_client.fakes import SyncMoves

SETTINGS = MoveSettings(
    health_check_interval=timedelta(milliseconds=200),
    stall_retry_interval=timedelta(milliseconds=300),
    flush_retry_interval=timedelta(milliseconds=200),
    flush_first_check_after=timedelta(milliseconds=400),
    sync_batch=40,
    sync_batch_bytes=32 * 1024,
)


def shorten_guarantee_waits(c: LocalCluster) -> None:
    """The service's waits (the seed's 10 s / 2 min / 1 min) shortened like the mover's;
    the config written again (before the cluster starts)."""
    c.config["guarantee_api"]["limits"] = {
        "wait_no_status": "1s",
        "wait_no_healthy_copy": "1s",
        "wait_behind": "1s",
    }
    c.write_config()


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
    mailbox: str = "alice"


@contextlib.asynccontextmanager
async def mover_in_process(c: LocalCluster, settings: MoveSettings = SETTINGS):
    config = load_config(c.config_path)
    directory = EmbeddedClusterStore(c.root / "cluster.db")
    requests = EmbeddedMoveStore(c.root / "cluster.db")
    stored = SyncMoves(c.root / "cluster.db")  # what a test reads, synchronously
    guarantee = GrpcGuaranteeClient.from_config(config, token=TOKEN)  # TLS if configured
    async with client_session(config) as session:  # TLS as the cluster's config says
        nodes = PausingNodes(
            NodeStoreClient(config, token=TOKEN, session=session, bodies_as_bytes=True)
        )
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
            max_item_sizes={db.name: config.max_item_size_of(db) for db in config.databases},
        )

        async def start(mailbox: str = "alice") -> Run:
            record = await mover.submit(await mover.request(mailbox, "DB2"))
            task = asyncio.create_task(mover.run(record.id))
            return Run(nodes, task, lines, record.id, mailbox)

        try:
            yield start, stored
        finally:
            await guarantee.close()
            directory.close()
            await requests.aclose()
            stored.close()


async def fill(
    c: LocalCluster, node: str, first: int, n: int, *, tag: str = "m", mailbox: str = "alice"
) -> None:
    """Write items to `mailbox` in DB1 on `node` (its active), 40 a request."""
    for start in range(first, first + n, 40):
        await c.ok(
            "POST",
            node,
            f"/v1/databases/DB1/mailboxes/{mailbox}/items",
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


async def seed(c: LocalCluster, n: int = 1200, mailbox: str = "alice") -> None:
    box = f"/v1/databases/DB1/mailboxes/{mailbox}"
    await c.ok("PUT", "mbx1", box, json={"display_name": mailbox.title()})
    await c.ok("POST", "mbx1", f"{box}/folders", json={"folder": "Projects"})
    await fill(c, "mbx1", 0, n, mailbox=mailbox)
    for i in range(0, n, 97):
        await c.ok("DELETE", "mbx1", f"{box}/items/m{i}")
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
    source = live(await c.items(source_node, "DB1", run.mailbox))
    box = await c.ok("GET", source_node, f"/v1/databases/DB1/mailboxes/{run.mailbox}")
    if record.state is not MoveState.COMPLETED:
        # the only other acceptable end: the source whole, and not soft-deleted
        assert record.state is MoveState.FAILED and not box["soft_deleted"], record
        raise AssertionError(f"the move failed (source kept): {record.failure}\n{run.lines}")
    target_node = await active_of(c, "DB2")
    target = live(await c.items(target_node, "DB2", run.mailbox))
    assert target == source, (
        f"missing on the target: {sorted(set(source) - set(target))[:10]}, "
        f"extra: {sorted(set(target) - set(source))[:10]}"
    )
    assert box["soft_deleted"]
    row = await c.ok("GET", target_node, f"/v1/databases/DB2/mailboxes/{run.mailbox}")
    assert not row["locked"] and not row["soft_deleted"]
    store = EmbeddedClusterStore(c.root / "cluster.db")
    assert await store.mailbox_database(run.mailbox) == "DB2"
    store.close()
    return record, source
