"""The active copy's log stream: durable appends with group commit, and generation rolls.

Commit is durable before it is acknowledged: `commit()` enqueues the record; one writer task
takes every record waiting, writes them, fsyncs once, and only then resolves their futures
(group commit: concurrent commits share one fsync).  Rolls happen in the same task, so the
order of records and generations is the order of the queue.

Roll sequence (`writer.py` writes it, `logdir.install_span` says why each step is safe):
append the CLOSE record; write the next generation's header into a new file under a hidden
name.  At the end of a batch that answers anything, every generation closed since the last
such batch is settled: each file fsync'd, then each renamed in order (E00.log to its
generation's name, ..., the open one to E00.log), then the directory fsync'd once.  A batch
of nothing but a large body's staged parts, while no small commits flow, leaves them
unsettled (up to `writer.SPAN_LIMIT` generations), so that the nine generations of an 8 MiB
body are made durable together, not one after another.  Until a
generation is settled nobody hears of it: not the copies (block mode), not the listeners,
not the stream's public view (`generation`, `open_header`).  A crash anywhere leaves E00.log
with a valid header, no E00.log (then the next generation is created on open), a closed
E00.log (its rename is finished on open), and hidden files that recovery removes.

Times never go backwards, whatever the clock does: a commit time is never earlier than the
last commit or close time of the stream, a close time never earlier than the commits it
closes.  A clock jumping back would otherwise stamp a write in the open log earlier than a
log the copies already replayed, and CheckReplicationFlush by commit time would call it
replicated.

The open log at risk (`announcer.py`): before the first commit of each generation is
answered, the writer awaits its announcement to the cluster store.  It runs after the batch
is durable and before the listeners (which make the transactions visible to reads) and
before any future is resolved.  A batch that wrote into several generations (a roll in the
middle) announces the highest of them, which covers the ones below.  A store error stalls
the writer; an answer of False (another copy was activated) fails every waiter with
`Deposed` and stops the stream, because a deposed active must not acknowledge.  Records
recovered in E00.log are announced by `announce_recovered()` before the stream takes writes.

The fence (`set_fence`, the active's lease: `active/lease.py`): after the announcement and
before any listener or answer, the writer awaits it; a failure (the lease lost, or this node
deposed) fails every waiter and stops the stream, whose records are then durable but not
acknowledged (the in-memory state is dropped with it; crash recovery reads them back).  The
owner can also stop the stream from outside with `fail()` (the lease has surely expired).

The open log's file, written in a worker thread, is `writer.py` (its span and settle
`span.py`); the file steps (a new E00.log written durably, whole writes, the closed
generations on disk) are in `logdir.py`, each through `files.py`'s seam; the requests the
stream queues for the writer, and how they are answered, are `requests.py`; synchronous
commit is `synchronous.py`, the spare files' keeper `spare_keeper.py`; the events the stream
emits are in `events.py`.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from dag_common.clock import Clock
from dag_common.model import RollCause
from replication_node.errors import Deposed, LogStreamStopped, TransactionTooLarge
from replication_node.log.announcer import Announcer, OpenLogAnnouncer
from replication_node.log.blocks import BlockFeed
from replication_node.log.body import BodyReader
from replication_node.log.events import Committed, StreamEvent
from replication_node.log.logfile import ContentDigest, LogHeader, encode_transaction
from replication_node.log.operations import Operation, encode_record_ops
from replication_node.log.requests import AbortJob, Pending, StageJob, answer, fail
from replication_node.log.spanning import BlobId, BlobRef
from replication_node.log.spare_keeper import SpareKeeper
from replication_node.log.spares import SparePool
from replication_node.log.synchronous import SynchronousCommit
from replication_node.log.writer import OpenLogWriter

if TYPE_CHECKING:
    from replication_node.metrics import StreamMetrics

logger = logging.getLogger(__name__)


# Awaited before commits are answered: None lets them go, an exception stops the stream.
Fence = Callable[[], Awaitable[BaseException | None]]

# How much of a staged body one group commit writes: a slice while commits wait beside it
# (they are answered after it); a generation's worth when none do.  A batch of nothing but
# parts, while no commits flow, goes on from one generation to the next until a request
# waits (`writer.OpenLogWriter.wanted`) or its span is full (`writer.SPAN_LIMIT`), so a
# request arriving meanwhile waits for one generation at most.
STAGE_SLICE_BUSY = 64 * 1024
STAGE_SLICE_IDLE = 1024 * 1024
# Commits count as flowing for this long after the last one was written (seconds).
BUSY_WINDOW = 0.05
# How long the stream must have written nothing before a spare is made (seconds): the gaps
# between a mover's items (each uploaded before it is staged) are not idle time, and a spare's
# write and fdatasync there would be in the next item's way.
SPARE_IDLE = 0.5


class LogStream:
    """The transaction log stream of one active database copy."""

    def __init__(
        self, *, writer: OpenLogWriter, clock: Clock, announce: Announcer | None = None
    ) -> None:
        self.log_dir = writer.log_dir
        self._file = writer  # touched only by the worker thread while a batch is written
        self._clock = clock
        # (generation, commits) of the open log once every commit in it is answered; read
        # from the event loop while the worker thread may be rolling, so set only there.
        self._acked = (writer.header.generation, writer.commits)
        # Stage requests not finished by the last batch: they go on in the next.
        self._staging: list[Pending] = []
        self._commits_seen = float("-inf")  # monotonic time a batch last held a commit
        self._staged_seen = float("-inf")  # monotonic time a batch last wrote staged parts
        self._queue: asyncio.Queue[Pending] = asyncio.Queue()
        self._listeners: list[Callable[[StreamEvent], None]] = []
        self._task: asyncio.Task[None] | None = None
        self._closed = False
        self._closing = asyncio.Event()
        self._announcer = OpenLogAnnouncer(
            log_dir=self.log_dir,
            clock=clock,
            closing=self._closing,
            stopped=lambda: self._closed,
            announce=announce,
        )
        self._failure: BaseException | None = None
        self._fence: Fence | None = None
        # The open log's bytes as they become durable, for copies in block mode.
        self.feed = BlockFeed(generation=writer.header.generation, durable=writer.offset)
        self._synchronous = SynchronousCommit(feed=self.feed, clock=clock)
        # Set when a failure stops the writer (not by close()): whoever mounted the stream
        # must dismount the database, and never reuse this in-memory state.
        self.failed = asyncio.Event()
        self._metrics: StreamMetrics | None = None
        self._writing = False  # a batch is being written
        self._last_batch = float("-inf")  # monotonic time a batch was last written
        # The spare log files' keeper (`keep_spares`).
        self._spares = SpareKeeper(clock=clock, idle=lambda: self.idle, busy_pause=BUSY_WINDOW)

    # ---- public --------------------------------------------------------------------------

    @property
    def generation(self) -> int:
        """The generation of the open log (E00.log): LastLogGenerated + 1 on the active.
        Generations a large body's parts are written into count once they are settled
        (durable and named, `writer.py`)."""
        return self._file.settled.generation

    @property
    def epoch(self) -> int:
        """The stream incarnation every commit's LSN names (0: not known)."""
        return self._file.epoch

    @property
    def last_closed_generation(self) -> int:
        return self._file.settled.generation - 1

    @property
    def open_header(self) -> LogHeader:
        """The header of the open log E00.log."""
        return self._file.settled

    @property
    def open_record_count(self) -> int:
        return self._file.records

    @property
    def open_commits(self) -> int:
        """Answered (or recovered) commits in the open log; 0 while it holds none."""
        generation, records = self._acked
        return records if generation == self._file.settled.generation else 0

    @property
    def announcements(self) -> int:
        """How many generations were announced (one store write each)."""
        return self._announcer.announcements

    @property
    def log_file_size(self) -> int:
        return self._file.header.log_file_size

    @property
    def fsyncs(self) -> int:
        """How many times the open log was fsync'd."""
        return self._file.fsyncs

    def set_metrics(self, metrics: StreamMetrics | None) -> None:
        """Count group commits, fsyncs and rolls into `metrics` (once per batch, per fsync)."""
        self._metrics = self._file.metrics = metrics

    def set_digest_provider(self, provider: Callable[[], ContentDigest | None]) -> None:
        """Write the database content digest `provider` gives at each roll (the active's, as
        of its database file's waypoint)."""
        self._file.digest_provider = provider

    def set_announcer(self, announce: Announcer) -> None:
        """Announce each generation's first commit through `announce` (before it starts)."""
        self._announcer.announce = announce

    def set_fence(self, fence: Fence) -> None:
        """Await `fence()` before answering any commit: None lets the answers go, an
        exception fails them and stops the stream (the active's lease)."""
        self._fence = fence

    @property
    def commits_flowing(self) -> bool:
        """Whether a batch held a commit (other than a large item's own) within the last
        BUSY_WINDOW: the stream's small commits are flowing.  Read from any thread."""
        return self._clock.monotonic() - self._commits_seen < BUSY_WINDOW

    @property
    def staging(self) -> bool:
        """Whether a large body's parts were written within the last BUSY_WINDOW: a large
        commit is on its way (the gap between one item's commit and the next one's parts
        counts as on the way too).  Read from any thread."""
        return self._clock.monotonic() - self._staged_seen < BUSY_WINDOW

    def set_synchronous(self, copies: int, wait: float) -> None:
        """Answer a commit only once `copies` copies hold it in block mode (waiting up to
        `wait` seconds for them; then the stream stops, the commit unacknowledged)."""
        self._synchronous.set(copies, wait)

    @property
    def synchronous_copies(self) -> int:
        return self._synchronous.copies

    async def await_synchronous_followers(self) -> None:
        """Before a commit is written: SynchronousCopiesMissing (nothing written) unless at
        least `synchronous_copies` copies follow in block mode (`synchronous.py`)."""
        await self._synchronous.followers()

    def fail(self, exc: BaseException) -> None:
        """Stop the stream from outside: every waiter gets `exc`, nothing more is answered,
        and `failed` is set (the owner dismounts)."""
        if self._closed:
            return
        self._fail_all(exc, [])
        # Wake the writer if it waits for work; if it is writing, it sees the failure when
        # the batch is durable and answers nothing.
        self._put(Pending(b"", self._clock.now(), False, self._future()))

    async def announce_recovered(self) -> None:
        """Announce the records recovered in E00.log before the stream takes writes: they may
        have been acknowledged before a crash, and they are about to be visible again.
        Raises `Deposed` if this node is no longer the active."""
        if self._file.commits and self._announcer.due(self.generation):
            failure = await self._announcer.announce_generation(self.generation)
            if failure is not None:
                self._closed = True
                self._failure = failure
                raise failure

    def add_listener(self, listener: Callable[[StreamEvent], None]) -> None:
        """Call `listener` in the event loop, in log order, with every durable transaction
        (before its committer is answered) and every closed generation."""
        self._listeners.append(listener)

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._writer(), name=f"logwriter {self.log_dir}")

    def keep_spares(self, target: int) -> None:
        """Keep up to `target` spare log files for the rolls to write the next generations
        over (`spares.py`), made while the stream is idle; 0: none (new files, as before).
        Once, before the stream takes writes; the stream stops the preparer when it closes."""
        if target <= 0 or self._spares.pool is not None:
            return
        pool = SparePool(self.log_dir, self.log_file_size, target, self._file.files)
        self._file.spares = pool
        self._spares.start(pool)

    @property
    def spares(self) -> SparePool | None:
        """The spare log files' pool, when the stream keeps one."""
        return self._file.spares

    @property
    def idle(self) -> bool:
        """Whether nothing is being written or waits, and nothing was for SPARE_IDLE."""
        quiet = self._clock.monotonic() - self._last_batch >= SPARE_IDLE
        return quiet and not (self._writing or self._staging or not self._queue.empty())

    async def commit(
        self,
        ops: Sequence[Operation],
        commit_time: datetime,
        *,
        staged: Mapping[int, BlobRef] | None = None,
    ) -> Committed:
        """Append one transaction; return once it is on disk (fsync'd).  Its commit time is
        `commit_time`, raised to the stream's latest time if the clock went back.  `staged`:
        the bodies staged for some of its puts, by the put's index (the record names each
        where its body would be; readers of the log get the body back in its place).  The
        operations are encoded into the record here, once; the stream's events carry them
        as given."""
        commit_time = self._file.stamp(commit_time)
        order = sorted(staged) if staged else []
        blobs = tuple(staged[i] for i in order) if staged else ()
        data = encode_transaction(
            encode_record_ops(ops, order), commit_time, [b.encode() for b in blobs]
        )
        if not self._file.fits(len(data)):
            raise TransactionTooLarge(
                f"a commit record of {len(data)} bytes does not fit in a "
                f"{self.log_file_size}-byte log file (staged bodies aside)"
            )
        pending = Pending(
            data,
            commit_time,
            False,
            self._future(),
            tuple(ops),
            self._clock.monotonic(),
            blobs=tuple(b.id for b in blobs),
            staged=tuple(zip(order, blobs, strict=True)),
        )
        return await self._submit(pending)

    async def stage(self, body: BodyReader, *, continues: BlobId | None = None) -> BlobRef:
        """Write `body` into the log as a staged body (PART records, across as many
        generations as it takes, interleaved with other commits); return its reference once
        every part is written.  A text is staged as its UTF-8 bytes, encoded a part at a time
        by the writer (`body.py`).  The parts are durable at the latest with the commit that
        names it (a batch that answers a commit settles everything before it, `writer.py`).
        Nothing of it is visible until a commit names it (`commit(..., blobs=)`); one that
        never will must be aborted (`abort`).  `continues`: `body` goes on with that one,
        pending (a body staged as it arrives, a part at a time: each call's answer is the body
        so far); StagedBodyLost if it was aborted meanwhile."""
        if not body.size:
            raise ValueError("an empty body is written inline, never staged")
        job = StageJob(body, continues=continues)
        pending = Pending(None, self._clock.now(), False, self._future(), job=job)
        return await self._submit(pending)

    async def abort(self, blobs: list[BlobId]) -> None:
        """Write an ABORT record for each staged body of `blobs` still pending."""
        if blobs:
            job = AbortJob(tuple(blobs))
            await self._submit(Pending(None, self._clock.now(), False, self._future(), job=job))

    @property
    def pending_bodies(self) -> list[BlobId]:
        """The staged bodies pending (recovered from the log before the stream starts)."""
        return sorted(self._file.pending)

    async def roll(self, *, force: bool = False, cause: RollCause = RollCause.DEMAND) -> int | None:
        """Close the open log now. Without `force`, only a log holding records is closed.

        Returns the generation closed, or None if there was nothing to close.
        """
        pending = Pending(None, self._clock.now(), force, self._future(), cause=cause)
        return await self._submit(pending)

    async def run_idle_roller(self, interval: float) -> None:
        """Every `interval` seconds, close the open log if it holds records (the seeds' roll)."""
        while not self._closed:
            await self._clock.sleep(interval)
            if self._file.records:
                generation = await self.roll(cause=RollCause.IDLE)
                if generation is not None:
                    logger.info("idle log roll closed generation %d", generation)

    async def close(self) -> None:
        """Stop the writer after the records already queued; close the file (no roll)."""
        if self._closing.is_set():
            return
        self._closing.set()
        stopped = self._closed  # a failure stopped the writer already
        self._closed = True
        await self._spares.close()
        if self._task is not None:
            if not stopped:
                self._put(Pending(b"", self._clock.now(), False, self._future()))
            # A failure was logged and given to every waiter when it happened.
            await asyncio.gather(self._task, return_exceptions=True)
        self._file.close()
        await self.feed.close()

    # ---- the writer task -----------------------------------------------------------------

    def _future(self) -> asyncio.Future[Any]:
        return asyncio.get_running_loop().create_future()

    async def _submit(self, pending: Pending) -> Any:
        if self._closed:
            if isinstance(self._failure, Deposed):
                raise Deposed(str(self._failure))
            why = f": {self._failure}" if self._failure is not None else ""
            raise LogStreamStopped(f"the log stream of {self.log_dir} is closed{why}")
        self.start()
        self._put(pending)
        return await pending.future

    def _put(self, pending: Pending) -> None:
        """Queue a request for the writer, and tell a batch being written that one waits
        (it stops going on with a staged body at the next generation's end): told first, so
        that a request in the queue is never one the writer has not been told of."""
        self._file.wanted = True
        self._queue.put_nowait(pending)

    async def _writer(self) -> None:
        while True:
            batch, self._staging = self._staging, []
            if not batch:
                batch.append(await self._queue.get())
            # Cleared before the queue is taken: a request queued from here on is not in
            # this batch, and sets it again.
            self._file.wanted = False
            while not self._queue.empty():
                batch.append(self._queue.get_nowait())
            try:
                if not await self._write_and_answer(batch):
                    return
            except Exception as exc:  # a bug: the waiters are answered all the same
                logger.critical("log writer failed, stream stopped", exc_info=True)
                self._fail_all(LogStreamStopped(f"the log writer failed: {exc!r}"), batch)
                return
            except BaseException as exc:  # cancelled: stop as well, and say so
                self._fail_all(LogStreamStopped(f"the log writer was cancelled: {exc!r}"), batch)
                raise

    async def _write_and_answer(self, batch: list[Pending]) -> bool:
        """Write one batch and answer its waiters; False once the stream stops.  Whatever
        escapes from here (a listener's bug, a cancellation at any await) still answers
        every waiter of the batch (`_writer`): none is left durable and unanswered."""
        if self._failure is not None:  # fail() stopped the stream
            self._fail_all(self._failure, batch)
            return False
        stop = any(p.data == b"" for p in batch)
        work = [p for p in batch if p.data != b""]
        now = self._clock.monotonic()
        if any(p.is_commit and not p.blobs for p in work):  # a large item's own
            self._commits_seen = now  # commit does not hold the next one back
        staged = any(isinstance(p.job, StageJob) for p in work)
        if staged:
            self._staged_seen = now
        # Busy while commits flow, not only when one is queued at this instant: a steady
        # stream of small commits leaves most batches without one, and a generation's
        # worth of parts in each of those kept the next commit waiting behind its roll.
        busy = now - self._commits_seen < BUSY_WINDOW
        self._file.stage_budget = STAGE_SLICE_BUSY if busy else STAGE_SLICE_IDLE
        # Parts left unsettled only while no commit flows: beside small commits, a batch of
        # parts is made durable at once, as a commit's batch is, and the large writer goes at
        # that pace (unsettled, it took 40% more of the disk, and the small commits' p99
        # beside it went from 2.2-2.6x their p99 alone to 2.5-3.1x: bench/large_items.py,
        # part 2).
        self._file.defer_parts = not busy
        # Blocks only for the copies in block mode (`blocks.py`): none while none follows,
        # nor asks to, unless commits wait for them (synchronous commit counts the blocks
        # they hold).
        self._file.keep_blocks = self.feed.wanted or self._synchronous.copies > 0
        self._writing = True
        try:
            results, events, touched = await asyncio.to_thread(
                self._file.write_batch, work, stopping=stop
            )
        except Exception as exc:
            # The log is in an unknown state (after a failed write or fsync the file's
            # contents cannot be trusted): fail every waiter and stop writing.  The owner
            # sees `failed` and dismounts; only crash recovery from disk starts again.
            logger.critical("log write failed, stream stopped: %s", exc)
            self._fail_all(exc, batch)
            return False
        finally:
            self._writing = False
            self._last_batch = self._clock.monotonic()
        if staged:  # from its end: the batch may have been long
            self._staged_seen = self._clock.monotonic()
        blocks, self._file.blocks = self._file.blocks, []
        await self.feed.publish(blocks)  # durable: the copies in block mode may have it
        if self._metrics is not None and (size := sum(len(b.data) for b in blocks)):
            self._metrics.blocks_published(size)
        if self._failure is not None:  # fail() while the batch was written
            self._fail_all(self._failure, batch)
            return False
        if self._announcer.due(touched):
            # Durable, but neither visible nor answered until the copies can count it.
            failure = await self._announcer.announce_generation(touched)
            if failure is not None:
                logger.critical("%s; log stream stopped", failure)
                self._fail_all(failure, batch)
                return False
        if self._fence is not None and any(p.is_commit for p in work):
            # Durable; answered only while the fence (the active's lease) allows it.
            failure = self._failure or await self._fence()
            if failure is not None:
                logger.critical("%s; log stream stopped", failure)
                self._fail_all(failure, batch)
                return False
        if self._synchronous.copies and blocks and any(p.is_commit for p in work):
            # Not answered unless held by them: durable here, read back by crash recovery.
            failure = await self._synchronous.held(blocks[-1])
            if failure is not None:
                logger.critical("%s; log stream stopped", failure)
                self._fail_all(failure, batch)
                return False
        for event in events:
            for listener in self._listeners:
                listener(event)
        self._staging += answer(batch, work, results)
        if not self._file.span_open:
            self._acked = (self._file.header.generation, self._file.commits)
        if self._metrics is not None:
            commits = [p for p in work if p.is_commit]
            if commits:  # once per group commit, never per record
                wait = self._clock.monotonic() - min(p.queued for p in commits)
                self._metrics.group_commit(len(commits), wait)
        if stop:
            stopped = LogStreamStopped(f"the log stream of {self.log_dir} was closed")
            for p in self._staging:  # bodies half staged: pending in the log, aborted
                p.future.set_exception(stopped)  # by the recovery of whoever mounts it
            self._staging = []
            return False
        return True

    @property
    def failure(self) -> BaseException | None:
        """What stopped the stream, if a failure did."""
        return self._failure

    def _fail_all(self, exc: BaseException, batch: list[Pending]) -> None:
        """Stop the stream: every waiter of `batch` and of the queue gets `exc`."""
        self._closed = True
        self.feed.closed = True  # its followers end at their next look
        self._failure = exc
        self.failed.set()
        waiting = list(batch) + self._staging
        self._staging = []
        while not self._queue.empty():
            waiting.append(self._queue.get_nowait())
        fail(waiting, exc)
