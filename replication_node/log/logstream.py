"""The active copy's log writer: durable appends with group commit, and generation rolls.

Commit is durable before it is acknowledged: `commit()` enqueues the record; one writer task
takes every record waiting, writes them, fsyncs once, and only then resolves their futures
(group commit: concurrent commits share one fsync).  Rolls happen in the same task, so the
order of records and generations is the order of the queue.

Roll sequence (each step durable before the next): append the CLOSE record and fsync E00.log;
rename it to its generation name and fsync the directory; write the next E00.log as a temp
file with its header, fsync, rename, fsync the directory.  A crash anywhere leaves either
E00.log with a valid header or no E00.log (then the next generation is created on open).

Times never go backwards, whatever the clock does: a commit time is never earlier than the
last commit or close time of the stream, a close time never earlier than the commits it
closes.  A clock jumping back would otherwise stamp a write in the open log earlier than a
log the copies already replayed, and CheckReplicationFlush by commit time would call it
replicated.

The open log at risk: once a generation holds a commit, the commit is lost with the active
unless the copies can count it.  So before the first commit of each generation is answered,
the writer awaits the injected `announce(generation)` (the cluster store's
`publish_open_generation`): one store write per generation, never one per commit.  It runs
after the batch is durable and before the listeners (which make the transactions visible to
reads) and before any future is resolved.  A batch that wrote into several generations (a
roll in the middle) announces the highest of them, which covers the ones below.  A store
error stalls the writer (commits wait, nothing is visible or acknowledged) and retries with
backoff while the stream is open; closing the stream then fails the batch.  An answer of
False means another copy was activated: every waiter fails with `Deposed` and the stream
stops, because a deposed active must not acknowledge.  Records recovered in E00.log are
announced by `announce_recovered()` before the stream takes writes.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import os
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dag_common.clock import Clock
from dag_common.durable import fsync_dir
from dag_common.model import Lsn
from replication_node.errors import (
    Deposed,
    LogSequenceError,
    LogStreamStopped,
    TransactionTooLarge,
)
from replication_node.log import logfile
from replication_node.log.logfile import (
    DIGEST_RECORD_MAX,
    HEADER_SIZE,
    OPEN_LOG_NAME,
    ContentDigest,
    LogHeader,
    LogRecord,
    RecordType,
    ScanResult,
    closed_log_name,
    encode_record,
    encode_transaction,
)
from replication_node.storage.database import Transaction

if TYPE_CHECKING:
    from replication_node.metrics import StreamMetrics

logger = logging.getLogger(__name__)

# What a roll appends: the DIGEST record (when the active has one) and the CLOSE record.
_CLOSE_SIZE = len(encode_record(RecordType.CLOSE, datetime.now())) + DIGEST_RECORD_MAX
# Close a generation once less than this is left; a later small record would not fit anyway.
_ROLL_SLACK = 512


@dataclass(frozen=True, slots=True)
class ClosedGeneration:
    """Event: a generation was closed and renamed; it can now be shipped."""

    generation: int
    creation_time: datetime
    close_time: datetime


@dataclass(frozen=True, slots=True)
class Committed:
    """The acknowledgement of one durable transaction."""

    lsn: Lsn
    commit_time: datetime


class RollCause(StrEnum):
    """Why a generation was closed (the log roll metric's `cause`)."""

    SIZE = "size"  # the open log reached log_file_size
    DEMAND = "demand"  # roll-log (the mover's final sync, an operator)
    IDLE = "idle"  # the idle roller: records waiting longer than 15 min / llr_depth
    SWITCHOVER = "switchover"  # the active quiesced for a switchover
    DISMOUNT = "dismount"  # a clean dismount


@dataclass(slots=True)
class _Pending:
    data: bytes | None  # None: a roll request; b"": stop the writer
    commit_time: datetime
    force: bool
    future: asyncio.Future[Any]
    ops: list[dict[str, Any]] | None = None
    queued: float = 0.0  # monotonic time the commit was queued (commit latency)
    cause: RollCause = RollCause.DEMAND  # a roll request's cause


StreamEvent = Transaction | ClosedGeneration
# Announce that an open generation holds a commit; False: this node is not the active any more.
Announcer = Callable[[int], Awaitable[bool]]
_ANNOUNCE_RETRY_FIRST = 0.05
_ANNOUNCE_RETRY_MAX = 5.0


def list_closed_generations(log_dir: Path) -> list[int]:
    """The generations of the closed log files in `log_dir`, ascending."""
    gens = []
    for entry in os.scandir(log_dir):
        gen = logfile.parse_closed_log_name(entry.name)
        if gen is not None and entry.is_file():
            gens.append(gen)
    return sorted(gens)


class LogStream:
    """The transaction log stream of one active database copy."""

    def __init__(
        self,
        *,
        log_dir: Path,
        header: LogHeader,
        fd: int,
        offset: int,
        record_count: int,
        clock: Clock,
        announce: Announcer | None = None,
    ) -> None:
        self.log_dir = log_dir
        self._header = header
        self._fd = fd
        self._offset = offset
        self._records = record_count
        self._clock = clock
        self._announce = announce
        self._announced = 0  # the highest generation announced to hold a commit
        # (generation, records) of the open log once every record in it is answered; read
        # from the event loop while the worker thread may be rolling, so set only there.
        self._acked = (header.generation, record_count)
        self._queue: asyncio.Queue[_Pending] = asyncio.Queue()
        self._listeners: list[Callable[[StreamEvent], None]] = []
        self._task: asyncio.Task[None] | None = None
        self._closed = False
        self._closing = asyncio.Event()
        self._fd_closed = False
        self._failure: BaseException | None = None
        # The database content digest to write at each roll (the active's, as of its
        # database file's waypoint), if any.
        self.digest_provider: Callable[[], ContentDigest | None] | None = None
        # Set when a failure stops the writer (not by close()): whoever mounted the stream
        # must dismount the database, and never reuse this in-memory state.
        self.failed = asyncio.Event()
        self.fsyncs = 0
        # The latest time stamped on the stream (creation, commit or close): the floor of the
        # next one.  Read and written on the event loop (commit) and the writer thread (roll);
        # single assignments under the GIL, and a stale read only stamps a time a little low
        # for a record that lands after the roll, never earlier than the roll's creation time.
        self._last_time = header.creation_time
        self.announcements = 0
        self._metrics: StreamMetrics | None = None

    # ---- opening -------------------------------------------------------------------------

    @classmethod
    def create_or_open(
        cls,
        *,
        log_dir: Path,
        database_signature: uuid.UUID,
        log_signature: uuid.UUID,
        log_file_size: int,
        clock: Clock,
        open_scan: ScanResult | None = None,
        next_generation: int = 1,
    ) -> LogStream:
        """Open the stream for writing, creating E00.log for the next generation if needed.

        `open_scan` is the scan of an existing E00.log made by recovery; its torn tail (if
        any) is cut here, at the last valid record.  `next_generation` is the lowest
        generation a new E00.log may have (the database's waypoint + 1): a copy that was
        seeded and never kept a log must not start the stream again at 1.
        """
        log_dir.mkdir(parents=True, exist_ok=True)
        path = log_dir / OPEN_LOG_NAME
        closed = list_closed_generations(log_dir)
        if open_scan is not None:
            header = open_scan.header
            if closed and header.generation != closed[-1] + 1:
                raise LogSequenceError(
                    f"E00.log is generation {header.generation} but the last closed "
                    f"generation is {closed[-1]}"
                )
            fd = os.open(path, os.O_WRONLY)
            if open_scan.valid_end < open_scan.file_size:
                os.ftruncate(fd, open_scan.valid_end)
                os.fsync(fd)
            os.lseek(fd, open_scan.valid_end, os.SEEK_SET)
            stream = cls(
                log_dir=log_dir,
                header=header,
                fd=fd,
                offset=open_scan.valid_end,
                record_count=len(open_scan.records),
                clock=clock,
            )
            stream._last_time = max(
                [header.creation_time, *(r.commit_time for r in open_scan.records)]
            )
            return stream
        prev: LogHeader | None = None
        if closed:
            prev = logfile.read_header(log_dir / closed_log_name(closed[-1]))
        header = LogHeader(
            generation=max((closed[-1] + 1) if closed else 1, next_generation),
            database_signature=database_signature,
            log_signature=log_signature,
            creation_time=clock.now(),
            prev_creation_time=prev.creation_time if prev else None,
            log_file_size=log_file_size,
        )
        fd = _create_open_log(log_dir, header)
        return cls(
            log_dir=log_dir, header=header, fd=fd, offset=HEADER_SIZE, record_count=0, clock=clock
        )

    # ---- public --------------------------------------------------------------------------

    @property
    def generation(self) -> int:
        """The generation of the open log (E00.log): LastLogGenerated + 1 on the active."""
        return self._header.generation

    @property
    def last_closed_generation(self) -> int:
        return self._header.generation - 1

    @property
    def open_record_count(self) -> int:
        return self._records

    @property
    def open_commits(self) -> int:
        """Answered (or recovered) commits in the open log; 0 while it holds none."""
        generation, records = self._acked
        return records if generation == self._header.generation else 0

    @property
    def announced_generation(self) -> int:
        """The highest generation announced to hold a commit (0: none yet)."""
        return self._announced

    @property
    def log_file_size(self) -> int:
        return self._header.log_file_size

    def set_metrics(self, metrics: StreamMetrics | None) -> None:
        """Count group commits, fsyncs and rolls into `metrics` (once per batch, per fsync)."""
        self._metrics = metrics

    def set_announcer(self, announce: Announcer) -> None:
        """Announce each generation's first commit through `announce` (before it starts)."""
        self._announce = announce

    async def announce_recovered(self) -> None:
        """Announce the records recovered in E00.log before the stream takes writes: they may
        have been acknowledged before a crash, and they are about to be visible again.
        Raises `Deposed` if this node is no longer the active."""
        if self._records and self._announce is not None and self.generation > self._announced:
            failure = await self._announce_generation(self.generation)
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

    async def commit(self, ops: list[dict[str, Any]], commit_time: datetime) -> Committed:
        """Append one transaction; return once it is on disk (fsync'd).  Its commit time is
        `commit_time`, raised to the stream's latest time if the clock went back."""
        commit_time = self._last_time = max(commit_time, self._last_time)
        data = encode_transaction(ops, commit_time)
        if HEADER_SIZE + len(data) + _CLOSE_SIZE > self._header.log_file_size:
            raise TransactionTooLarge(
                f"transaction of {len(data)} bytes does not fit in a "
                f"{self._header.log_file_size}-byte log file"
            )
        pending = _Pending(data, commit_time, False, self._future(), ops, self._clock.monotonic())
        return await self._submit(pending)

    async def roll(self, *, force: bool = False, cause: RollCause = RollCause.DEMAND) -> int | None:
        """Close the open log now. Without `force`, only a log holding records is closed.

        Returns the generation closed, or None if there was nothing to close.
        """
        pending = _Pending(None, self._clock.now(), force, self._future(), cause=cause)
        return await self._submit(pending)

    async def run_idle_roller(self, interval: float) -> None:
        """Every `interval` seconds, close the open log if it holds records (the seeds' roll)."""
        while not self._closed:
            await self._clock.sleep(interval)
            if self._records:
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
        if self._task is not None:
            if not stopped:
                self._queue.put_nowait(_Pending(b"", self._clock.now(), False, self._future()))
            # A failure was logged and given to every waiter when it happened.
            await asyncio.gather(self._task, return_exceptions=True)
        if not self._fd_closed:
            self._fd_closed = True
            with contextlib.suppress(OSError):  # a roll that failed half-way closed it
                os.close(self._fd)

    # ---- the writer task -----------------------------------------------------------------

    def _future(self) -> asyncio.Future[Any]:
        return asyncio.get_running_loop().create_future()

    async def _submit(self, pending: _Pending) -> Any:
        if self._closed:
            if isinstance(self._failure, Deposed):
                raise Deposed(str(self._failure))
            why = f": {self._failure}" if self._failure is not None else ""
            raise LogStreamStopped(f"the log stream of {self.log_dir} is closed{why}")
        self.start()
        self._queue.put_nowait(pending)
        return await pending.future

    async def _writer(self) -> None:
        while True:
            batch = [await self._queue.get()]
            while not self._queue.empty():
                batch.append(self._queue.get_nowait())
            stop = any(p.data == b"" for p in batch)
            work = [p for p in batch if p.data != b""]
            try:
                results, events, touched = await asyncio.to_thread(self._write_batch, work)
            except Exception as exc:
                # The log is in an unknown state (after a failed write or fsync the file's
                # contents cannot be trusted): fail every waiter and stop writing.  The owner
                # sees `failed` and dismounts; only crash recovery from disk starts again.
                logger.critical("log write failed, stream stopped: %s", exc)
                self._fail_all(exc, batch)
                return
            except BaseException as exc:  # cancelled: stop as well, and say so
                self._fail_all(LogStreamStopped(f"the log writer was cancelled: {exc!r}"), batch)
                raise
            if self._announce is not None and touched > self._announced:
                # Durable, but neither visible nor answered until the copies can count it.
                failure = await self._announce_generation(touched)
                if failure is not None:
                    logger.critical("%s; log stream stopped", failure)
                    self._fail_all(failure, batch)
                    return
            for event in events:
                for listener in self._listeners:
                    listener(event)
            for p, result in zip(work, results, strict=True):
                if not p.future.done():
                    p.future.set_result(result)
            for p in batch:
                if p.data == b"" and not p.future.done():
                    p.future.set_result(None)
            self._acked = (self._header.generation, self._records)
            if self._metrics is not None:
                commits = [p for p in work if p.data is not None]
                if commits:  # once per group commit, never per record
                    wait = self._clock.monotonic() - min(p.queued for p in commits)
                    self._metrics.group_commit(len(commits), wait)
            if stop:
                return

    async def _announce_generation(self, generation: int) -> BaseException | None:
        """Announce that `generation` holds a commit; retry store errors with backoff while
        the stream is open.  None once announced, else the error to fail the waiters with."""
        assert self._announce is not None
        delay, failures = _ANNOUNCE_RETRY_FIRST, 0
        while True:
            try:
                accepted = await self._announce(generation)
            except Exception as exc:
                failures += 1
                if self._closed:
                    return LogStreamStopped(
                        f"generation {generation} could not be announced to the cluster store "
                        f"before the stream closed ({exc}); its commits were not acknowledged"
                    )
                if failures == 1 or failures % 10 == 0:
                    logger.warning(
                        "%s: commits wait: cannot announce open generation %d to the cluster "
                        "store (%d attempt(s)): %s",
                        self.log_dir,
                        generation,
                        failures,
                        exc,
                    )
                await self._pause(delay)
                delay = min(delay * 2, _ANNOUNCE_RETRY_MAX)
                continue
            if not accepted:
                return Deposed(
                    f"the cluster store no longer names this node the active copy (open "
                    f"generation {generation} of {self.log_dir} refused): another copy was "
                    "activated; the commit was not acknowledged"
                )
            self._announced = max(self._announced, generation)
            self.announcements += 1
            if failures:
                logger.warning(
                    "%s: open generation %d announced after %d failed attempt(s); commits go on",
                    self.log_dir,
                    generation,
                    failures,
                )
            return None

    async def _pause(self, seconds: float) -> None:
        """Sleep `seconds` on the clock, or less if the stream starts closing."""
        sleeper = asyncio.ensure_future(self._clock.sleep(seconds))
        closing = asyncio.ensure_future(self._closing.wait())
        try:
            await asyncio.wait({sleeper, closing}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            sleeper.cancel()
            closing.cancel()

    @property
    def failure(self) -> BaseException | None:
        """What stopped the stream, if a failure did."""
        return self._failure

    def _fail_all(self, exc: BaseException, batch: list[_Pending]) -> None:
        """Stop the stream: every waiter of `batch` and of the queue gets `exc`."""
        self._closed = True
        self._failure = exc
        self.failed.set()
        waiting = list(batch)
        while not self._queue.empty():
            waiting.append(self._queue.get_nowait())
        for p in waiting:
            if p.future.done():
                continue
            if p.data == b"":
                p.future.set_result(None)  # close() asked to stop: it is stopped
            else:
                p.future.set_exception(exc)

    def _write_batch(self, work: list[_Pending]) -> tuple[list[Any], list[StreamEvent], int]:
        """Runs in a worker thread: write, roll and fsync for one batch of requests.

        Returns the results, the events, and the highest generation that received a record
        (0: none)."""
        results: list[Any] = []
        events: list[StreamEvent] = []
        touched = 0
        buf = bytearray()
        size = self._header.log_file_size

        def flush() -> None:
            if buf:
                write_all(self._fd, bytes(buf))
                buf.clear()

        for p in work:
            if p.data is None:
                if self._records or p.force:
                    flush()
                    closed = self._roll(p.cause)
                    events.append(closed)
                    results.append(closed.generation)
                else:
                    results.append(None)
                continue
            if self._offset + len(p.data) + _CLOSE_SIZE > size and self._records:
                flush()
                events.append(self._roll(RollCause.SIZE))
            lsn = Lsn(generation=self._header.generation, offset=self._offset)
            touched = lsn.generation
            buf += p.data
            self._offset += len(p.data)
            self._records += 1
            results.append(Committed(lsn=lsn, commit_time=p.commit_time))
            events.append(Transaction(lsn.generation, lsn.offset, p.commit_time, p.ops or []))
        flush()
        if self._offset + _CLOSE_SIZE + _ROLL_SLACK > size and self._records:
            events.append(self._roll(RollCause.SIZE))
        elif any(p.data is not None for p in work):
            self._fsync()
        return results, events, touched

    def _fsync(self) -> None:
        """fsync the open log (worker thread), timed when metrics are on."""
        if self._metrics is None:
            os.fsync(self._fd)
        else:
            start = self._clock.monotonic()
            os.fsync(self._fd)
            self._metrics.fsync.observe(self._clock.monotonic() - start)
        self.fsyncs += 1

    def _roll(self, cause: RollCause) -> ClosedGeneration:
        """Close E00.log as its generation and open the next one (worker thread)."""
        close_time = self._last_time = max(self._clock.now(), self._last_time)
        digest = self.digest_provider() if self.digest_provider else None
        closing = encode_record(RecordType.CLOSE, close_time)
        write_all(self._fd, digest.encode(close_time) + closing if digest else closing)
        self._fsync()
        os.close(self._fd)
        closed = self._header
        os.replace(self.log_dir / OPEN_LOG_NAME, self.log_dir / closed_log_name(closed.generation))
        fsync_dir(self.log_dir)
        self._header = LogHeader(
            generation=closed.generation + 1,
            database_signature=closed.database_signature,
            log_signature=closed.log_signature,
            creation_time=max(close_time, closed.creation_time),
            prev_creation_time=closed.creation_time,
            log_file_size=closed.log_file_size,
        )
        self._fd = _create_open_log(self.log_dir, self._header)
        self._offset = HEADER_SIZE
        self._records = 0
        if self._metrics is not None:
            self._metrics.roll(cause)
        return ClosedGeneration(closed.generation, closed.creation_time, close_time)


def write_all(fd: int, data: bytes) -> None:
    """Write every byte of `data` or raise.  `os.write` may write less than asked without
    an error (a nearly full filesystem does): the rest is written again, and a disk that
    takes nothing more raises ENOSPC then.  Ignoring a short write once acknowledged a record
    that was only partly on disk, and crash recovery cut it as a torn tail."""
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        if written <= 0:
            raise OSError(errno.ENOSPC, f"write of {len(view)} bytes made no progress")
        view = view[written:]


def finish_interrupted_roll(log_dir: Path) -> int | None:
    """Complete a roll that a crash cut between its CLOSE record and the rename.

    An E00.log that ends with a whole CLOSE record was closed durably: rename it to its
    generation's name (durably) so recovery sees a closed generation.  Returns that
    generation, or None if there was nothing to finish.
    """
    path = log_dir / OPEN_LOG_NAME
    if not path.exists():
        return None
    result = logfile.scan(path.read_bytes())
    if not result.closed or result.tail_error:
        return None
    target = log_dir / closed_log_name(result.header.generation)
    if target.exists():
        return None  # never overwrite a closed generation; recovery will report the conflict
    os.replace(path, target)
    fsync_dir(log_dir)
    logger.warning(
        "E00.log held closed generation %d (a crash cut its roll); renamed",
        result.header.generation,
    )
    return result.header.generation


def _create_open_log(log_dir: Path, header: LogHeader) -> int:
    """Write a new E00.log holding only `header`, durably; return a write fd at its end."""
    tmp = log_dir / f".{OPEN_LOG_NAME}.tmp"
    with open(tmp, "wb") as f:
        f.write(header.encode())
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, log_dir / OPEN_LOG_NAME)
    fsync_dir(log_dir)
    fd = os.open(log_dir / OPEN_LOG_NAME, os.O_WRONLY)
    os.lseek(fd, HEADER_SIZE, os.SEEK_SET)
    return fd


def read_records(path: Path) -> list[LogRecord]:
    """All records of a closed generation, verified whole (raises on any defect)."""
    data = path.read_bytes()
    return list(logfile.verify_closed(data, logfile.parse_closed_log_name(path.name)).records)
