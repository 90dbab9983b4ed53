"""Log replay of a passive copy: inspected generations into the database copy, in order.

`ready_generations` is the policy (pure): the inspected generations whose ReplayLagTime has
passed, as a contiguous run after the last replayed one.  The lag counts from when this copy
got each generation, on this copy's clock (the seeds: the time the service waits before
replaying logs that have been copied), so a skew between the active's clock and this one's
cannot shorten it.  `read_batch` re-reads and
re-verifies those files (they passed inspection, but a disk can still damage them) and
checks the chain from the last replayed generation.  `Replayer` applies a batch in one
database transaction that also advances the header, so LastLogReplayed moves only after the
data is durable.  The undo phase is skipped: a passive copy only ever holds whole, closed
generations, never the active's open log.

Staged bodies (`log/spanning.py`): a transaction is applied when its commit record is
replayed, its bodies read back from the generations that hold their parts (on disk, kept by
truncation from the database's Logs Required, which each batch advances).

Copies compared, not only checked: the database keeps its content digest current with its
rows (`database.py`), and `apply` reports it as of each generation.  The active writes its
own as of a generation W into the log at each roll (a DIGEST record); once this copy has
replayed the generation holding it, it compares it with its own as of W (remembered for the
last generations replayed): a difference is divergence, CopyFailed naming W.  Every
`content_check_every` generations it also adds its digest up again from its rows: a row
changed inside a page that is otherwise valid (a bit flip no page check sees) stops it too.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING

from dag_common.clock import Clock
from replication_node.errors import CopyFailed, DatabaseError, LogFormatError
from replication_node.log.events import Transaction
from replication_node.log.generation_cache import GenerationCache
from replication_node.log.logfile import (
    DIGEST_VERSION,
    ContentDigest,
    LogHeader,
    LogRecord,
    ScanResult,
    anchor_header,
    chain_problem,
    closed_log_name,
    read_closed,
    verify_closed,
)
from replication_node.log.recovery import transactions_of
from replication_node.log.spanning import BlobId, BodyReader, Pending, required_from, track
from replication_node.passive.markers import Markers
from replication_node.storage.database import Database
from replication_node.storage.stoppable import run_in_thread
from replication_node.storage.tables import PutRows, put_rows

if TYPE_CHECKING:
    from replication_node.metrics import CopyMetrics

logger = logging.getLogger(__name__)


def ready_generations(
    *,
    last_log_replayed: int,
    last_log_inspected: int,
    copied_times: Mapping[int, float],
    now: float,
    replay_lag_time: timedelta,
    limit: int,
) -> tuple[list[int], float | None]:
    """The next generations to replay (at most `limit`), and when the next one that is held
    back by the replay lag becomes ready (None if none is waiting on the lag).  `copied_times`
    and `now` are both this copy's monotonic clock."""
    ready: list[int] = []
    lag = replay_lag_time.total_seconds()
    for gen in range(last_log_replayed + 1, last_log_inspected + 1):
        copied = copied_times.get(gen)
        if copied is None:
            break
        due = copied + lag
        if due > now:
            return ready, due
        ready.append(gen)
        if len(ready) >= limit:
            break
    return ready, None


# How many generations' content digests a copy remembers, for the active's to be compared
# with (the active's trails its open log by the LLR depth and a roll or two).
_KNOWN_DIGESTS = 1024


@dataclass(frozen=True, slots=True)
class ReplayBatch:
    generations: tuple[int, ...]
    transactions: tuple[Transaction, ...]
    last_header: LogHeader
    close_time: datetime
    digests: tuple[ContentDigest, ...] = ()  # the active's, from DIGEST records
    pending: Pending | None = None  # the staged bodies pending after its last generation
    # `put_rows` of each transaction, computed with the read, for `Database.apply`
    puts: tuple[PutRows, ...] = ()


def read_batch(
    log_dir: Path,
    generations: list[int],
    *,
    prev: LogHeader | None,
    log_signature: uuid.UUID,
    pending: Pending | None = None,
    where: Mapping[int, Path] | None = None,
    cache: GenerationCache | None = None,
) -> ReplayBatch:
    """Read, verify and chain-check `generations` (worker thread); CopyFailed if any fails.
    `pending`: the staged bodies the generation before them left pending, if known;
    `where`: the file of each generation, when not all in `log_dir` (a restore's sets);
    `cache`: the generations verified lately, shared with the batches before and after.
    The rows of the transactions' puts are computed with the read (`tables.put_rows`: the
    items' hashes), so that a read ahead does that work while a COMMIT waits."""
    txns: list[Transaction] = []
    digests: list[ContentDigest] = []
    close_time: datetime | None = None

    paths: dict[int, Path] = {}  # each generation's, made once: looked up for every part

    def path(gen: int) -> Path:
        found = paths.get(gen)
        if found is None:
            found = paths[gen] = (where or {}).get(gen) or log_dir / closed_log_name(gen)
        return found

    # Each generation is read and verified once for the replay: a body's parts are in the
    # generation that commits it and the ones before (this batch's or the last one's), which
    # its check (`BodyReader.bodies`) and then its row's write (`body_parts.put_apart`, in
    # `Database.apply`) read again from the verified bytes kept (`generation_cache`).
    cache = GenerationCache() if cache is None else cache

    def load(gen: int) -> ScanResult:
        return cache.get(path(gen), lambda: verify_closed(read_closed(path(gen)), gen))

    def records(gen: int, blob: BlobId) -> list[LogRecord]:
        return cache.records(path(gen), blob, lambda: verify_closed(read_closed(path(gen)), gen))

    reader = BodyReader(load, as_bytes=True, records=records)  # its bodies go into rows alone
    for gen in generations:
        try:
            result = load(gen)
        except (OSError, LogFormatError) as exc:
            raise CopyFailed(f"inspected generation {gen} cannot be replayed: {exc}") from exc
        problem = chain_problem(prev, result.header, log_signature)
        if problem:
            raise CopyFailed(f"replay stopped before generation {gen}: {problem}")
        prev = result.header
        close_time = result.close_time
        try:
            pending = track(result, pending).pending
            txns.extend(transactions_of(result, reader))
            digests.extend(result.digests)
        except (OSError, LogFormatError) as exc:
            raise CopyFailed(f"replay stopped in generation {gen}: {exc}") from exc
    assert prev is not None and close_time is not None
    puts = tuple(put_rows(txn) for txn in txns)
    return ReplayBatch(
        tuple(generations), tuple(txns), prev, close_time, tuple(digests), pending, puts
    )


class Replayer:
    """Replays what the copier inspected into the database copy; runs until cancelled."""

    def __init__(
        self,
        *,
        db: Database,
        log_dir: Path,
        markers: Markers,
        replay_lag_time: timedelta,
        clock: Clock,
        wakeup: asyncio.Event,
        after_replay: Callable[[], None],
        max_batch: int = 16,
        metrics: CopyMetrics | None = None,
        content_check_every: int | None = None,
    ) -> None:
        self._db = db
        self._log_dir = log_dir
        self._markers = markers
        self._lag = replay_lag_time
        self._clock = clock
        self._wakeup = wakeup
        self._after_replay = after_replay
        self._max_batch = max_batch
        self._metrics = metrics
        # The last replayed generation's header anchors the chain check of the next one;
        # after a seed it is not here, and the log signature check stands alone for one step.
        self._prev = anchor_header(log_dir, markers.last_log_replayed)
        # What the last replayed generation left pending (None after a start: the next
        # generation's CARRIED record says it).
        self._pending: Pending | None = None
        # The generations read for the replay, kept for their bodies' later reads (the read
        # ahead's too): each is read and verified once (`generation_cache`).
        self._cache = GenerationCache()
        self._check_every = content_check_every
        # The next batch, read while the last one commits: its first generation, the read.
        self._ahead: tuple[int, asyncio.Future[ReplayBatch]] | None = None
        # This copy's content digest as of each generation it replayed lately.
        self._known: dict[int, str] = {db.header.waypoint: db.content_digest}
        self.digests_compared = 0

    async def run(self) -> None:
        m = self._markers
        try:
            while True:
                self._wakeup.clear()
                ready, due = self._ready(after=m.last_log_replayed)
                if ready:
                    await self._replay(ready)
                    continue
                await self._wait(due - self._clock.monotonic() if due is not None else None)
        finally:
            self._drop_ahead()

    def _ready(self, *, after: int) -> tuple[list[int], float | None]:
        m = self._markers
        return ready_generations(
            last_log_replayed=after,
            last_log_inspected=m.last_log_inspected,
            copied_times=m.copied_times,
            now=self._clock.monotonic(),
            replay_lag_time=self._lag,
            limit=self._max_batch,
        )

    async def _wait(self, timeout: float | None) -> None:
        waits = {asyncio.ensure_future(self._wakeup.wait())}
        if timeout is not None:
            waits.add(asyncio.ensure_future(self._clock.sleep(max(timeout, 0.01))))
        try:
            await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for w in waits:
                w.cancel()

    async def _replay(self, generations: list[int]) -> None:
        m = self._markers
        started = self._clock.monotonic()
        generations, batch = await self._read(generations)
        # The next batch is read, and its rows and their digest terms computed, while this
        # one's COMMIT waits on the disk (the commit lets go of the GIL; the rows' writes
        # before it do not, between rows, so starting any earlier would only take turns with
        # them): bench/shipping.py, issue 33.
        committing = threading.Event()
        following, _ = self._ready(after=generations[-1])
        if following:
            read = asyncio.to_thread(self._read_after, committing, following, batch)
            self._ahead = (following[0], asyncio.ensure_future(read))
        before, digests = self._db.content_digest, dict[int, str]()
        try:
            header = await asyncio.to_thread(
                self._db.apply,
                batch.transactions,
                waypoint=generations[-1],
                committed=max(m.last_log_generated, generations[-1]),
                last_log_time=batch.close_time,
                digests=digests,
                required_from=required_from(batch.pending or {}),
                committing=committing,
                puts=batch.puts,
            )
        except DatabaseError as exc:
            raise CopyFailed(f"replay of generations {generations} failed: {exc}") from exc
        finally:
            committing.set()
        self._prev = batch.last_header
        self._pending = batch.pending
        # What the next batches read again: the parts of the bodies still pending.
        self._cache.forget_below(required_from(batch.pending or {}) or generations[-1] + 1)
        for generation in generations:
            before = self._known[generation] = digests.get(generation, before)
        self._compare(batch.digests)
        if self._check_every and any(g % self._check_every == 0 for g in generations):
            # A whole file's read: a stop interrupts it (`stoppable.py`).
            stored, rows = await run_in_thread(self._db.recompute_digest)
            if stored != rows:
                raise CopyFailed(
                    f"the database file's rows no longer add up to its content digest after "
                    f"generation {generations[-1]} (stored {stored[:16]}…, rows "
                    f"{rows[:16]}…): a row was changed inside a valid page; reseed the copy"
                )
        m.last_log_replayed = header.waypoint
        m.last_replayed_log_time = batch.close_time
        if self._metrics is not None:
            self._metrics.replayed(len(generations), self._clock.monotonic() - started)
        logger.debug(
            "replayed generations %d-%d (%d transactions)",
            generations[0],
            generations[-1],
            len(batch.transactions),
        )
        self._after_replay()

    async def _read(self, generations: list[int]) -> tuple[list[int], ReplayBatch]:
        """The batch starting at `generations[0]`: the one read ahead if it starts there
        (its generations, which may be fewer than are ready now), else `generations` read
        now.  A read ahead that failed raises here, after the batch before it is in."""
        ahead, self._ahead = self._ahead, None
        if ahead is not None and ahead[0] == generations[0]:
            batch = await ahead[1]
            return list(batch.generations), batch
        if ahead is not None:
            _forget(ahead[1])
        batch = await asyncio.to_thread(self._read_batch, generations, self._prev, self._pending)
        return generations, batch

    def _read_after(
        self, committing: threading.Event, generations: list[int], before: ReplayBatch
    ) -> ReplayBatch:
        """`read_batch` of the generations after `before`, once `committing` is set (worker
        thread)."""
        committing.wait()
        return self._read_batch(generations, before.last_header, before.pending)

    def _read_batch(
        self, generations: list[int], prev: LogHeader | None, pending: Pending | None
    ) -> ReplayBatch:
        """`read_batch` of `generations` from this copy's logs, after `prev` with `pending`
        carried over (worker thread)."""
        return read_batch(
            self._log_dir, generations, prev=prev, log_signature=self._db.header.log_signature,
            pending=pending, cache=self._cache,
        )  # fmt: skip

    def _drop_ahead(self) -> None:
        if self._ahead is not None:
            _forget(self._ahead[1])
            self._ahead = None

    def _compare(self, theirs: tuple[ContentDigest, ...]) -> None:
        """Compare the active's content digests with this copy's as of the same generation
        (one this copy no longer remembers, after a restart, is passed over, and so is one of
        another definition: written before an upgrade)."""
        for digest in theirs:
            mine = self._known.get(digest.generation)
            if mine is None or digest.version != DIGEST_VERSION:
                continue
            self.digests_compared += 1
            if mine != digest.digest:
                raise CopyFailed(
                    f"diverged: as of generation {digest.generation} this copy's content "
                    f"digest is {mine[:16]}…, the active's {digest.digest[:16]}…; reseed the copy"
                )
        while len(self._known) > _KNOWN_DIGESTS:
            del self._known[min(self._known)]


def _forget(read: asyncio.Future[ReplayBatch]) -> None:
    """A read ahead no longer wanted: its result, or its error, goes unread."""
    read.add_done_callback(lambda done: done.cancelled() or done.exception())
