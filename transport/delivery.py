"""The delivery loop: every Queued delivery to the active copy of its recipient's database.

Deliveries wait per recipient mailbox, in the order they were queued.  A worker takes a
ready mailbox (none is worked on by two workers at once, so a mailbox gets its messages in
order), resolves it through the mailbox directory, and writes what waits for it as one
transaction of items (up to BATCH_ITEMS, BATCH_BYTES; a larger message alone): one node
round trip and one fsync for many messages, which is how the transport keeps up with a
client writing items itself.  The node's client (`dag_common.node_client`) finds the
database's active and follows a switchover.

A message just queued from parts in memory (an LMTP or SMTP DATA, a `message/rfc822` post)
is delivered from those parts, not read back from the queue: the queue's file and the body's
file stay its durable copy, written and fsync'd before the sender's answer as ever, and
anything not delivered from memory (a restart, a retry, a redelivery) is read from them.
`FreshBodies` holds them until each of the message's deliveries has taken its first try,
FRESH_BYTES at most (a message past it is read back as before): reading back a 1 MiB body
from its file was 16 reads in a worker thread into freshly faulted pages, and a trip
through the queue's writer thread for its row (~1 ms of the transport's CPU a MiB,
issue 49).

What a failure does is `retry.py`'s rule; a mailbox that failed waits on the monotonic
clock before its next try, the others go on.  Durable state is `queue.QueueStore`'s: a
delivery is marked Delivered only after the node acknowledged it (durable there), so a
transport killed in between delivers it again after its restart, as the same item.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from collections import deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Protocol

from dag_common.api_types import item_id_for
from dag_common.clock import Clock
from dag_common.config import DEFAULT_MEMORY_BUDGET
from dag_common.errors import ClusterStoreError, NodeCallError
from dag_common.memory import MemoryBudget
from dag_common.message_body import Parts
from dag_common.node_client import NodeStoreClient
from dag_common.rfc822 import BodyFormat
from transport.messages import Delivery, Queued
from transport.metrics import TransportMetrics
from transport.queue import QueueStore, Stored
from transport.retry import Failure, RetryPolicy, classify, next_try

logger = logging.getLogger(__name__)

BATCH_ITEMS = 200
BATCH_BYTES = 512 * 1024  # half of a default log file: a batch is never a spanning write
# A message this large or larger is written as its bytes, alone (`_write`).
RAW_FROM = 64 * 1024
SWEEP_INTERVAL = 3600.0  # seconds between two sweeps of every dumpster
# Bodies of messages just queued held for their first delivery, in bytes at most (and an
# eighth of the memory budget at most): the bodies a burst's deliveries are about to send.
FRESH_BYTES = 16 * 1024 * 1024


class Directory(Protocol):
    async def mailbox_database(self, mailbox: str) -> str | None: ...


class FreshDirectory(Directory, Protocol):
    async def fresh(self, mailbox: str) -> str | None:
        """The directory's answer now, not one remembered."""
        ...


@dataclass
class _Fresh:
    message_id: str
    subject: str
    format: BodyFormat
    parts: Parts
    size: int  # bytes of the parts
    waiting: set[int]  # the deliveries (ids) that have not taken it yet
    using: int = 0  # deliveries sending it now


class FreshBodies:
    """The bodies of messages just queued, for their deliveries' first try (see the module's
    docstring): `limit` bytes at most, each let go once every delivery of its message has
    taken it (or failed, or been given up) and finished with it."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.held = 0
        self._bodies: dict[str, _Fresh] = {}

    def keep(self, message: Queued, deliveries: list[Delivery]) -> bool:
        """Hold `message`'s parts (its body as the queue wrote them) for `deliveries`;
        False if it is not held (no parts: posted as text; past the limit)."""
        size = message.length
        if (
            message.text is not None
            or not deliveries
            or self.held + size > self.limit
            or message.message_id in self._bodies
        ):
            return False
        self._bodies[message.message_id] = _Fresh(
            message.message_id, message.subject, message.format, message.parts, size,
            {d.id for d in deliveries},
        )  # fmt: skip
        self.held += size
        return True

    @contextlib.contextmanager
    def take(self, batch: list[Delivery]) -> Iterator[dict[int, Stored]]:
        """The bodies held for `batch`'s deliveries, by delivery id, as `Stored` (those not
        held are absent), for as long as the block runs."""
        taken: dict[int, tuple[_Fresh, Stored]] = {}
        for d in batch:
            fresh = self._bodies.get(d.message_id)
            if fresh is not None and d.id in fresh.waiting:
                fresh.waiting.discard(d.id)
                fresh.using += 1
                taken[d.id] = (fresh, Stored(d, fresh.subject, fresh.format, fresh.parts))
        try:
            yield {i: stored for i, (_, stored) in taken.items()}
        finally:
            for fresh, _ in taken.values():
                fresh.using -= 1
                self._settle(fresh)

    def drop(self, batch: Iterable[Delivery]) -> None:
        """`batch`'s deliveries will not take their bodies from here (a try failed before
        it, or they were given up): read from the queue next time."""
        for d in batch:
            fresh = self._bodies.get(d.message_id)
            if fresh is not None:
                fresh.waiting.discard(d.id)
                self._settle(fresh)

    def _settle(self, fresh: _Fresh) -> None:
        if not fresh.waiting and not fresh.using and self._bodies.get(fresh.message_id) is fresh:
            del self._bodies[fresh.message_id]
            self.held -= fresh.size


class Deliverer:
    """Delivers the queue's deliveries with `concurrency` workers."""

    def __init__(
        self,
        *,
        store: QueueStore,
        directory: FreshDirectory,
        nodes: NodeStoreClient,
        policy: RetryPolicy,
        clock: Clock,
        metrics: TransportMetrics,
        concurrency: int,
        memory: MemoryBudget | None = None,
    ) -> None:
        self._store = store
        # The bodies of deliveries in flight, at most (`TransportSettings.memory_budget`).
        self._memory = memory or MemoryBudget(DEFAULT_MEMORY_BUDGET)
        self.fresh = FreshBodies(min(FRESH_BYTES, self._memory.limit // 8))
        self._directory = directory
        self._nodes = nodes
        self._policy = policy
        self._clock = clock
        self._metrics = metrics
        self._concurrency = concurrency
        self._waiting: dict[str, deque[Delivery]] = {}
        self._ready: deque[str] = deque()
        self._busy: set[str] = set()  # being delivered, or waiting out a backoff
        self._streak: dict[str, int] = {}  # tries failed in a row, per recipient
        self._alone: set[int] = set()  # deliveries to send one at a time (a batch refused)
        self._wake = asyncio.Condition()
        self._timers: set[asyncio.Task[None]] = set()
        self.waiting = 0  # deliveries queued here, and not yet delivered or given up

    async def add(self, deliveries: Iterable[Delivery]) -> None:
        async with self._wake:
            for d in deliveries:
                self._waiting.setdefault(d.recipient, deque()).append(d)
                self._make_ready(d.recipient)
                self.waiting += 1
            self._wake.notify_all()
        self._metrics.queue_length.set(self.waiting)

    def _make_ready(self, recipient: str) -> None:
        if recipient not in self._busy and recipient not in self._ready:
            self._ready.append(recipient)

    async def run(self) -> None:
        """Load what the queue holds, then deliver until cancelled."""
        await self.add(await self._store.queued())
        workers = [
            asyncio.create_task(self._worker(), name=f"delivery {n}")
            for n in range(self._concurrency)
        ]
        workers.append(asyncio.create_task(self._sweep(), name="dumpster sweep"))
        try:
            await asyncio.gather(*workers)
        finally:
            for task in [*workers, *self._timers]:
                task.cancel()
            await asyncio.gather(*workers, *self._timers, return_exceptions=True)

    async def _sweep(self) -> None:
        """The dumpster's bounds on every database, every SWEEP_INTERVAL (a delivery applies
        them to its own database at once)."""
        while True:
            await self._clock.sleep(SWEEP_INTERVAL)
            try:
                await self._store.sweep(self._clock.now().timestamp())
            except Exception:
                logger.exception("the dumpster's sweep failed; again in %g s", SWEEP_INTERVAL)

    async def _worker(self) -> None:
        while True:
            async with self._wake:
                await self._wake.wait_for(lambda: bool(self._ready))
                recipient = self._ready.popleft()
                self._busy.add(recipient)
                batch = self._take(self._waiting[recipient])
            try:
                await self._deliver(recipient, batch)
            except Exception:  # a bug or the queue's disk: put the batch back, say it
                logger.exception("delivering %d messages to %s failed", len(batch), recipient)
                self.fresh.drop(batch)
                await self._back_off(recipient, batch, delay=self._policy.max_interval)

    def _take(self, waiting: deque[Delivery]) -> list[Delivery]:
        first = waiting.popleft()
        batch, size = [first], first.size
        if first.id in self._alone:
            return batch
        while waiting and len(batch) < BATCH_ITEMS:
            d = waiting[0]
            if d.id in self._alone or size + d.size > BATCH_BYTES:
                break
            batch.append(waiting.popleft())
            size += d.size
        return batch

    async def _deliver(self, recipient: str, batch: list[Delivery]) -> None:
        try:
            database = await self._directory.mailbox_database(recipient)
        except ClusterStoreError as exc:  # the store away: nothing is wrong with the message
            await self._failed(recipient, batch, Failure.WAIT, f"the directory: {exc}")
            return
        if database is None:
            await self._failed(recipient, batch, Failure.COUNTS, "not in the mailbox directory")
            return
        started = self._clock.monotonic()
        try:
            # The bodies are read from the queue's file only now, within the transport's
            # memory budget: deliveries beyond it wait their turn.
            size = sum(d.size for d in batch)
            async with self._memory.share(size, f"a delivery to {recipient}", patient=True):
                with self.fresh.take(batch) as fresh:
                    stored = await self._stored(batch, fresh)
                    await self._write(database, recipient, stored)
        except NodeCallError as exc:
            moved = False
            if exc.status == 404:  # no such mailbox there: has it moved?
                with contextlib.suppress(ClusterStoreError):
                    now_in = await self._directory.fresh(recipient)
                    moved = now_in not in (None, database)
            failure = classify(exc.status, directory_moved=moved)
            if failure is Failure.POISON and len(batch) > 1:
                self._alone.update(d.id for d in batch)  # which one? each alone finds out
                failure = Failure.MOVED
            await self._failed(recipient, batch, failure, f"{database}: {exc}")
            return
        now = self._clock.now().timestamp()
        self._metrics.delivery_seconds.observe(self._clock.monotonic() - started)
        evicted = await self._store.delivered([d.id for d in batch], database, now)
        self._metrics.delivered.labels(database).inc(len(batch))
        self._metrics.dumpster_evicted.labels(database).inc(evicted)
        self.waiting -= len(batch)
        for d in batch:
            self._alone.discard(d.id)
            latency = now - d.queued
            if latency >= 0:
                self._metrics.submit_to_durable_seconds.observe(latency)
        self._streak.pop(recipient, None)
        await self._release(recipient)

    async def _stored(self, batch: list[Delivery], fresh: dict[int, Stored]) -> list[Stored]:
        """`batch`'s messages: those held in memory as they are, the others read from the
        queue (a message in a file, alone: as its file)."""
        rest = [d for d in batch if d.id not in fresh]
        if rest:
            read = await self._store.items(rest, files=len(batch) == 1)
            fresh = fresh | {s.delivery.id: s for s in read}
        return [fresh[d.id] for d in batch]

    async def _write(self, database: str, recipient: str, stored: list[Stored]) -> None:
        """Write a batch's messages: a large message alone as its bytes, as queued (PUT
        …/message, which the node stages as they come, with no JSON to parse or text to
        count again; one kept in a file sent from it a slice at a time, never held whole),
        anything else as JSON items, the batch one transaction."""
        if len(stored) == 1 and stored[0].format.is_message and stored[0].length >= RAW_FROM:
            (one,) = stored
            await self._nodes.put_message(
                database, recipient, item_id_for(one.delivery.message_id), one.message(),
                folder=one.delivery.folder,
            )  # fmt: skip
            return
        items = [s.item() for s in stored]
        await self._nodes.call(
            "POST", database, f"/mailboxes/{recipient}/items", json={"items": items}, ok=(201,)
        )

    async def _failed(
        self, recipient: str, batch: list[Delivery], failure: Failure, error: str
    ) -> None:
        self._metrics.failed.labels(str(failure)).inc()
        self.fresh.drop(batch)
        streak = self._streak.get(recipient, 0) + 1
        self._streak[recipient] = streak
        now = self._clock.now().timestamp()
        again: list[Delivery] = []
        delay = 0.0
        for d in batch:
            counts = failure is Failure.COUNTS
            d = dataclasses.replace(d, tries=d.tries + 1, failures=d.failures + int(counts))
            step = next_try(
                self._policy,
                failure,
                streak=streak,
                failures=d.failures,
                waited=now - d.queued,
                error=error,
            )
            if step.poison is not None:
                await self._store.poison(d.id, step.poison)
                self.waiting -= 1
                self._alone.discard(d.id)
                self._metrics.poison.inc()
                logger.warning("%s for %s: poison: %s", d.message_id, recipient, step.poison)
                continue
            await self._store.failed(d.id, error, counts=counts)
            again.append(d)
            delay = max(delay, step.delay)
        if again and delay > 0:
            logger.info("%s: %s; %d waiting, next try in %.1f s", recipient, error, len(again),
                        delay)  # fmt: skip
        await self._back_off(recipient, again, delay=delay)

    async def _back_off(self, recipient: str, batch: list[Delivery], *, delay: float) -> None:
        """Put `batch` back at the head of the recipient's queue; it is ready again after
        `delay` seconds."""
        self._waiting[recipient].extendleft(reversed(batch))
        if delay <= 0:
            await self._release(recipient)
            return

        async def later() -> None:
            await self._clock.sleep(delay)
            await self._release(recipient)

        timer = asyncio.create_task(later(), name=f"retry {recipient}")
        self._timers.add(timer)
        timer.add_done_callback(self._timers.discard)

    async def _release(self, recipient: str) -> None:
        async with self._wake:
            self._busy.discard(recipient)
            if self._waiting.get(recipient):
                self._make_ready(recipient)
                self._wake.notify()
            else:
                self._waiting.pop(recipient, None)
        self._metrics.queue_length.set(self.waiting)
