"""In-process fakes for moving the active role: `FakePeers` (the other nodes, as a table of
copy reports the test changes as time passes, and a record of every call), a three-node
config, a real embedded cluster store on the test's manual clock, and `drive` (runs a
coroutine to its end, moving the manual clock to each wait's deadline)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Coroutine
from pathlib import Path
from typing import Any, TypeVar

from dag_common.clock import ManualClock
from dag_common.cluster_store.embedded import EmbeddedClusterStore
from dag_common.cluster_store.interface import ActivationCause
from dag_common.config import ClusterConfig, parse_config
from dag_common.model import CopyRole, CopyStatus, CopyStatusReport
from replication_node.cluster.peers import BlockBufferKept, LastLogsCopied

T = TypeVar("T")

NODES = ("a", "b", "c")  # a is the active, preference 1; b preference 2; c preference 3
TTL = 6.0


def report(
    node: str,
    *,
    role: CopyRole = CopyRole.PASSIVE,
    status: CopyStatus = CopyStatus.DISCONNECTED_AND_HEALTHY,
    inspected: int = 10,
    replayed: int | None = None,
    generated: int | None = None,
    **fields: Any,
) -> CopyStatusReport:
    """The copy of DB1 on `node` as its node would report it."""
    return CopyStatusReport(
        database="DB1",
        node=node,
        site="s",
        role=role,
        status=status,
        activation_preference=NODES.index(node) + 1,
        last_log_inspected=inspected,
        last_log_replayed=inspected if replayed is None else replayed,
        last_log_generated=inspected if generated is None else generated,
        **fields,
    )


def config(tmp_path: Path, **defaults: Any) -> ClusterConfig:
    """Three nodes a, b, c holding copies of DB1 (preferences 1, 2, 3)."""
    return parse_config(
        {
            "cluster": "test",
            "defaults": defaults,
            "nodes": [
                {"name": n, "site": "s", "url": f"http://{n}.invalid:1", "data_dir": n}
                for n in NODES
            ],
            "databases": [
                {
                    "name": "DB1",
                    "copies": [
                        {"node": n, "activation_preference": i + 1} for i, n in enumerate(NODES)
                    ],
                }
            ],
        },
        base_dir=tmp_path,
    )


async def store_with_active(
    tmp_path: Path, clock: ManualClock, *, generated: int = 10, open_generation: int = 0
) -> EmbeddedClusterStore:
    """A real cluster store file whose leases run on `clock`: a active at epoch 1, its
    LastLogGenerated published, and `open_generation` announced as holding commits."""
    store = EmbeddedClusterStore(tmp_path / "cluster.db", clock=clock)
    await store.set_active(
        "DB1", "a", expected_epoch=0, start_generation=1, cause=ActivationCause.FIRST_MOUNT
    )
    await store.publish_last_log_generated("DB1", "a", 1, generated)
    if open_generation:
        await store.publish_open_generation("DB1", "a", 1, open_generation, 100)
    return store


class FakePeers:
    """The other nodes as a table: `reports[node]` is that node's copy of DB1 (None: it does
    not answer).  Every call is recorded in `calls`; the answers to the take-over calls are
    set by the test, and `on_call` (if set) runs before each call is answered, to change the
    world at that moment (another activation winning meanwhile)."""

    def __init__(self, reports: dict[str, CopyStatusReport | None]) -> None:
        self.reports = dict(reports)
        self.calls: list[tuple[str, ...]] = []
        self.quiesce_answer: int | None = 7
        self.last_logs = LastLogsCopied(failure="HTTP 599: not set by the test")
        self.last_logs_bring: dict[str, CopyStatusReport | None] = {}
        self.buffer = BlockBufferKept()
        self.buffer_brings: dict[str, CopyStatusReport | None] = {}
        self.on_call: Callable[[str], Awaitable[None]] | None = None

    async def _called(self, *call: str) -> None:
        self.calls.append(call)
        if self.on_call is not None:
            await self.on_call(call[0])
        await asyncio.sleep(0)  # a real call yields: let others run meanwhile

    def names(self) -> list[str]:
        """The calls made, by name, in order."""
        return [c[0] for c in self.calls]

    async def copy_report(self, node: str, database: str) -> CopyStatusReport | None:
        await self._called("copy_report", node)
        return self.reports[node]

    async def copy_reports(self, database: str) -> dict[str, CopyStatusReport | None]:
        await self._called("copy_reports")
        return dict(self.reports)

    async def quiesce(self, node: str, database: str, target: str) -> int | None:
        await self._called("quiesce", node, target)
        return self.quiesce_answer

    async def unquiesce(self, node: str, database: str) -> None:
        await self._called("unquiesce", node)

    async def copy_last_logs(self, node: str, database: str) -> LastLogsCopied:
        await self._called("copy_last_logs", node)
        self.reports.update(self.last_logs_bring)
        return self.last_logs

    async def keep_block_buffer(self, node: str, database: str) -> BlockBufferKept:
        await self._called("keep_block_buffer", node)
        self.reports.update(self.buffer_brings)
        return self.buffer

    async def reconcile_all(self, database: str) -> None:
        await self._called("reconcile_all")


async def drive(
    clock: ManualClock,
    coro: Coroutine[Any, Any, T],
    *,
    on_tick: Callable[[float], None] | None = None,
    limit: float = 24 * 3600.0,
    sleepers: int = 1,
) -> T:
    """Run `coro` to its end: whenever it waits on `clock`, move the clock to the first
    wait's deadline (then `on_tick(now)`, for the test to change the world as time passes).
    A wait never taken on the clock (a real one) is only yielded to, never advanced.
    `sleepers`: how many tasks wait on the clock when all are idle (the coroutine and the
    test's own, e.g. an active renewing its lease): the clock moves only once that many
    sleep, so that none is caught mid-step (in a thread: the store file) as time passes."""
    task = asyncio.ensure_future(coro)
    try:
        while not task.done():
            for _ in range(10):
                await asyncio.sleep(0)
            if task.done():
                break
            pending = clock.pending_sleeps()
            if len(pending) < sleepers:
                await asyncio.sleep(0.001)  # a thread (the store file) not yet done
                continue
            assert clock.monotonic() < limit, f"still waiting after {limit}s on the clock"
            await clock.advance(max(0.0, pending[0]))
            if on_tick is not None:
                on_tick(clock.monotonic())
    finally:
        if not task.done():
            task.cancel()
    return task.result()


def lost_active() -> dict:
    """a does not answer; b has inspected through 10 (all the store knows), c through 9."""
    return {"a": None, "b": report("b"), "c": report("c", inspected=9)}
