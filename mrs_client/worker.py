"""`mrs serve`: a worker that runs the cluster's queued moves, many at once on one event loop.

Every `poll` seconds (and whenever one of its moves ends) the worker reads the unfinished
moves, the batches and the live move leases from the move store, asks `scheduling.pick` which
to start, and starts each in a task of its own.  A move runs only under its lease, which the
mover claims (`lease.hold`): two workers picking the same move at once start it once, the
other gets MoveBusy and forgets it.  A worker killed (-9) or cut off from the store stops
renewing; once its leases have run out another worker (or itself, restarted) takes its moves
and goes on from their saved cursors.

Stopping (SIGTERM, `stop()`): the worker starts nothing more and asks each move to give
itself back at its next safe point (`Gates.release`); the record stays as it is, the lease is
released, and another worker takes it at once.  Moves that have not reached a safe point
within `grace` are cancelled where they are, which is as safe as a kill -9.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from dag_common.clock import Clock
from dag_common.errors import ClusterStoreError
from dag_common.tasks import cancel_and_wait
from mrs_client.batches import requeue, retry_due
from mrs_client.errors import MoveBusy, MoveError, MoveRejected, NodeCallError
from mrs_client.fleet_view import FleetSnapshot
from mrs_client.lease import worker_id
from mrs_client.move_store.interface import BatchRecord, LeaseLost, MoveRecord, MoveStore
from mrs_client.mover import Mover
from mrs_client.policy import MoveState
from mrs_client.scheduling import STARTABLE, MoveLimits, pick
from mrs_client.throttle import Throttle

logger = logging.getLogger(__name__)


def completion_held_until(
    batch: BatchRecord | None, record: MoveRecord, now: datetime
) -> datetime | None:
    """When a synced move of `batch` syncs next, if the batch holds it back from completing
    (None: it completes now).  A batch holds its moves while `--complete-after` has not come
    or while `--suspend-when-ready-to-complete` waits for `mrs batch complete`."""
    if batch is None or batch.complete_requested is not None:
        return None
    s = batch.settings
    due = now + timedelta(seconds=s.incremental_sync_interval)
    if s.complete_after is not None:
        if s.complete_after <= now:
            return None
        return min(due, s.complete_after)
    return due if s.suspend_when_ready_to_complete else None


@dataclass
class WorkerStats:
    """What a worker did, for its metrics and its log."""

    ended: dict[str, int] = field(default_factory=dict)  # final state -> count
    lost: int = 0  # moves stopped because their lease was lost
    busy: int = 0  # moves another worker started first
    cut_off: int = 0  # moves stopped because the move store could not be reached
    retried: int = 0  # failed moves a batch queued again


class Worker:
    """Runs queued moves of the move store under the limits (module docstring)."""

    def __init__(
        self,
        *,
        store: MoveStore,
        make_mover: Callable[[], Mover],
        active_node: Callable[[str], Awaitable[str | None]],
        clock: Clock,
        limits: MoveLimits | None = None,
        poll: float = 1.0,
        grace: float = 30.0,
        worker: str | None = None,
        count_every: float = 10.0,
    ) -> None:
        """`make_mover`: a Mover for one move (each move has its own gates and lease);
        `active_node`: a database's active node (None: not known), for the per-node
        limits."""
        self._store = store
        self._make_mover = make_mover
        self._active_node = active_node
        self._clock = clock
        self.limits = limits or MoveLimits()
        self._poll = poll
        self._grace = grace
        self.running: dict[str, tuple[asyncio.Task[None], Mover]] = {}
        self._ended = asyncio.Event()
        self._stopping = asyncio.Event()
        self.stats = WorkerStats()
        self.me = worker or worker_id("mrs-serve")
        # The move store counted for the metrics and the status page (fleet_view), at
        # most every `count_every` seconds.
        self.snapshot: FleetSnapshot | None = None
        self._count_every = count_every
        self._counted_at: float | None = None
        self._throttles: dict[str, Throttle] = {}  # batch -> its cap's share here

    async def run(self) -> None:
        """Start moves until `stop()`; then give back those running (module docstring)."""
        try:
            while not self._stopping.is_set():
                try:
                    await self.start_due()
                    await self._count()
                except Exception as exc:  # the store down: the moves running go on
                    logger.warning("worker: cannot read the move store: %s; will retry", exc)
                self._ended.clear()
                await self._wait_for_news()
        finally:
            await self._give_back()

    def stop(self) -> None:
        self._stopping.set()

    async def _wait_for_news(self) -> None:
        waits = [
            asyncio.ensure_future(self._clock.sleep(self._poll)),
            asyncio.ensure_future(self._ended.wait()),
            asyncio.ensure_future(self._stopping.wait()),
        ]
        try:
            await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        finally:
            await cancel_and_wait(waits)

    async def start_due(self) -> list[str]:
        """One pass: queue again the failed moves a batch retries, share each batch's
        throughput cap, start the moves due now; their ids."""
        # Asked at once, not one after the other: a slot freed waits for this pass (each
        # read is a hop to the store's thread, a few ms under eight moves at once).
        held, listed_batches, listed = await asyncio.gather(
            self._store.holders(),
            self._store.batches(),
            self._store.list(states=STARTABLE | {MoveState.FAILED}),
        )
        batches = {b.name: b for b in listed_batches}
        moves: list[MoveRecord] = []
        for record in listed:
            if record.state is MoveState.FAILED:  # queued again, if its batch retries it
                queued = await self._retry(record, batches.get(record.batch or ""))
                if queued is None:
                    continue
                record = queued
            moves.append(record)
        self._share_caps(batches, moves, held)
        dbs = sorted({m.source_db for m in moves} | {m.target_db for m in moves})
        nodes = dict(zip(dbs, await asyncio.gather(*map(self._node, dbs)), strict=True))
        # Running: a live lease anywhere, or started here and not yet holding its lease.
        running = {**held, **dict.fromkeys(self.running, True)}
        chosen = pick(
            moves,
            held=running,
            batches=batches,
            node_of=lambda db: nodes.get(db),
            limits=self.limits,
            mine=len(self.running),
            now=self._clock.now(),
        )
        for record in chosen:
            mover = self._make_mover()
            batch = batches.get(record.batch or "")

            async def held_until(r: MoveRecord, name: str | None = record.batch) -> datetime | None:
                current = await self._store.batch(name) if name else None
                return completion_held_until(current, r, self._clock.now())

            mover.hold_before_completion = held_until if batch is not None else None
            mover.gates.throttle = self._throttles.get(record.batch or "")
            task = asyncio.create_task(self._run_one(record.id, mover), name=f"move {record.id}")
            self.running[record.id] = (task, mover)
        return [r.id for r in chosen]

    async def _count(self) -> None:
        """Count the move store for the metrics and the page, when due."""
        now = self._clock.monotonic()
        if self._counted_at is not None and now - self._counted_at < self._count_every:
            return
        self._counted_at = now
        holders = {i: h.worker for i, h in (await self._store.holders()).items()}
        self.snapshot = FleetSnapshot.of(
            await self._store.list(), await self._store.batches(), holders, self._clock.now()
        )

    async def _retry(self, record: MoveRecord, batch: BatchRecord | None) -> MoveRecord | None:
        """A failed move of a batch that retries it (it failed by a stall limit): queued
        again, to run after the batch's stall_retry_after.  None: it stays failed."""
        due = retry_due(record, batch)
        if due is None:
            return None
        queued = await requeue(
            self._store,
            record,
            worker=self.me,
            clock=self._clock,
            from_states={MoveState.FAILED},
            retries=record.retries + 1,
            not_before=due,
        )
        if queued is not None:
            self.stats.retried += 1
            logger.info(
                "move %s failed stalled (%s); batch %s queues it again for %s (retry %d of %d)",
                record.id,
                record.failed_stalled,
                record.batch,
                due.isoformat(timespec="seconds"),
                queued.retries,
                batch.settings.stall_retries if batch else 0,
            )
        return queued

    def _share_caps(
        self, batches: dict[str, BatchRecord], moves: list[MoveRecord], held: Mapping[str, object]
    ) -> None:
        """Each capped batch's throttle here gets the share of its cap that the batch's
        moves running here are of those running anywhere (the workers share no state but
        the store: each takes its part)."""
        of_batch = {m.id: m.batch for m in moves}
        for name, batch in batches.items():
            cap = batch.settings.max_mb_per_s
            throttle = self._throttles.setdefault(name, Throttle(self._clock))
            if cap is None:
                throttle.rate = None
                continue
            anywhere = sum(1 for move_id in held if of_batch.get(move_id) == name)
            here = sum(1 for move_id in self.running if of_batch.get(move_id) == name)
            share = 1.0 if anywhere == 0 else max(here, 1) / max(anywhere, here, 1)
            throttle.rate = cap * 1e6 * share

    async def _node(self, database: str) -> str | None:
        try:
            return await self._active_node(database)
        except Exception:  # the store cannot say: the node limits count it under None
            return None

    async def _run_one(self, move_id: str, mover: Mover) -> None:
        try:
            record = await mover.run(move_id)
            self.stats.ended[str(record.state)] = self.stats.ended.get(str(record.state), 0) + 1
            logger.info("move %s: %s", move_id, record.state)
        except MoveBusy:
            self.stats.busy += 1  # another worker started it first
        except LeaseLost as exc:
            self.stats.lost += 1
            logger.warning("%s", exc)
        except MoveRejected as exc:  # cancelled meanwhile, or its request is wrong now
            logger.warning("move %s not run: %s", move_id, exc)
        except (MoveError, NodeCallError) as exc:
            logger.warning("move %s: %s", move_id, exc)
        except (OSError, ClusterStoreError) as exc:  # the move store cannot be reached
            self.stats.cut_off += 1
            logger.warning(
                "move %s stopped: the move store cannot be reached (%s); it goes on in the "
                "worker that takes it once its lease ends",
                move_id,
                exc,
            )
        except Exception:
            logger.exception("move %s: unexpected error; its record is as last saved", move_id)
        finally:
            self.running.pop(move_id, None)
            self._ended.set()

    async def _give_back(self) -> None:
        """Ask each running move to give itself back at its next safe point; cancel those
        still running after the grace."""
        if not self.running:
            return
        logger.info(
            "worker stopping: giving back %d move(s) at their safe points", len(self.running)
        )
        for _, mover in self.running.values():
            mover.gates.release.set()
        tasks = [task for task, _ in self.running.values()]
        _, pending = await asyncio.wait(tasks, timeout=self._grace)
        if pending:
            logger.warning(
                "worker stopping: %d move(s) not at a safe point after %.0f s: stopped where "
                "they are (as after a kill -9; the next worker goes on from their cursors)",
                len(pending),
                self._grace,
            )
            with contextlib.suppress(Exception):
                await cancel_and_wait(pending)
