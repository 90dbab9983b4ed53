"""The open log E00.log as the log stream's worker thread writes it: appends, rolls, fsyncs.

One batch of requests at a time, in queue order, off the event loop (`write_batch`): the
records are appended, the log is rolled when the next record would not fit (or on demand),
and the batch is fsync'd once.

The roll: append the CLOSE record (after the DIGEST record, when the active has one) and
fsync E00.log; fsync the directory if the last roll's renames are not durable yet; then
install the file prepared for the next generation (`logdir.install_prepared`: its header and
CARRIED record written over its prepared header, E00.log renamed to its generation name, the
prepared file renamed E00.log).  Those renames and the new header are made durable before
anything depends on them: before a batch answers a request or hands the copies in block mode
a byte of the new generation, the directory is fsync'd (once, for both renames) and the new
E00.log too.  A batch that ends with the roll while a staged body goes on into the new
generation in the next batch answers nothing of it: its header's block is held back, and the
next batch's fsync, or the next roll's (the CLOSE record's fsync, then the directory's,
which on ext4 finds the renames already committed by the first), makes them durable.  So an
8 MiB body staged across nine generations costs a data fsync and a directory fsync at each.

Why a prepared file: creating the next E00.log durably at the roll (a temp file written,
fsync'd, renamed, the directory fsync'd again, after the closed generation's rename and its
own directory fsync) took a third of an 8 MiB item's commit on the bench's disk, eight rolls
an item at the seeds' 1 MiB generations (bench/README.md, large_items).  Its header's
creation time and CARRIED record are known only at the roll, but the file itself is not: a
helper thread creates it, with a `PreparedHeader` naming the generation and stream it is
for, and fsyncs it while the current generation fills.  A crash at any step leaves states
recovery knows (`logdir.finish_interrupted_roll`, `recovery.plan_recovery`): a stray
prepared file is removed (nothing in it was acknowledged or sent to a copy); an E00.log
still carrying the prepared header held nothing acknowledged and is replaced.
Not done: preallocating the file's blocks (`fallocate`) so that fsyncs could be
`fdatasync`s: the log's files end where their records end (a closed generation proves it
is whole by its CLOSE record at end of file), so every append changes the file's size, which
`fdatasync` must make durable as well.

Times never go backwards: `stamp` raises a commit time to the latest time on the stream, and
a close time is never earlier than the commits it closes.

Staged bodies (`spanning.py`): a stage request writes a body as PART records, across as many
generations as it takes.  It gets the room left in each batch after the batch's commits and
rolls (`stage_budget`: the stream gives it a slice while commits wait and a whole generation
when none do; a part that fills the open generation ends the batch, which its roll makes
durable), so a small commit queued behind a 36 MiB body waits for one slice, not for the
body.  The writer keeps what is pending (`pending`): every new generation is created with
its CARRIED record, and a commit naming a body no longer pending is refused (`StagedBodyLost`).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import threading
import uuid
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dag_common.clock import Clock
from dag_common.durable import fsync_dir
from dag_common.model import Lsn, RollCause
from replication_node.errors import LogSequenceError, StagedBodyLost
from replication_node.log import logfile, spanning
from replication_node.log.blocks import Block
from replication_node.log.events import (
    ClosedGeneration,
    Committed,
    StreamEvent,
    Transaction,
)
from replication_node.log.logdir import (
    create_open_log,
    install_prepared,
    list_closed_generations,
    prepare_open_log,
    write_all,
)
from replication_node.log.logfile import (
    DIGEST_RECORD_MAX,
    HEADER_SIZE,
    OPEN_LOG_NAME,
    ContentDigest,
    LogHeader,
    PreparedHeader,
    RecordType,
    ScanResult,
    closed_log_name,
    encode_record,
)
from replication_node.log.operations import Operation
from replication_node.log.spanning import BlobId, PendingBlob, encode_abort, encode_carried

if TYPE_CHECKING:
    from replication_node.metrics import StreamMetrics

# What a roll appends: the DIGEST record (when the active has one) and the CLOSE record.
CLOSE_SIZE = len(encode_record(RecordType.CLOSE, datetime.now())) + DIGEST_RECORD_MAX
# Close a generation once less than this is left; a later small record would not fit anyway.
_ROLL_SLACK = 512
# A part smaller than this is not worth its frame: the generation is closed instead.
_MIN_PART = 4096


@dataclass(slots=True)
class StageJob:
    """A body being staged: the writer thread's progress through it."""

    data: memoryview
    written: int = 0
    blob: PendingBlob | None = None
    abort_on: BaseException | None = None  # set by a roll that closes the stream's writes


@dataclass(frozen=True, slots=True)
class AbortJob:
    """Staged bodies no commit will use: an ABORT record each (those still pending)."""

    blobs: tuple[BlobId, ...]


# Not finished in this batch: the stage request goes on in the next.
UNFINISHED = object()


@dataclass(slots=True)
class Pending:
    """One request to the writer, answered through its future."""

    data: bytes | None  # None: a roll request; b"": stop the writer
    commit_time: datetime
    force: bool
    future: asyncio.Future[Any]
    ops: tuple[Operation, ...] = ()
    queued: float = 0.0  # monotonic time the commit was queued (commit latency)
    cause: RollCause = RollCause.DEMAND  # a roll request's cause
    blobs: tuple[BlobId, ...] = ()  # the staged bodies a commit ends
    job: StageJob | AbortJob | None = None  # a stage or abort request (data is None)

    @property
    def is_commit(self) -> bool:
        return bool(self.data)


class OpenLogWriter:
    """The open log's file and position; written only by the stream's worker thread."""

    def __init__(
        self,
        *,
        log_dir: Path,
        header: LogHeader,
        fd: int,
        offset: int,
        record_count: int,
        clock: Clock,
        commits: int = 0,
        last_time: datetime | None = None,
        pending: dict[BlobId, PendingBlob] | None = None,
        epoch: int = 0,
    ) -> None:
        self.log_dir = log_dir
        self.header = header
        # The stream incarnation this writer writes (the active's epoch; 0: not known, a
        # tool's stream): every commit's LSN names it, so its acknowledgement says which
        # stream holds it without anyone patching it in later.
        self.epoch = epoch
        self._fd = fd
        self._fd_closed = False
        self._offset = offset
        self.records = record_count
        # Commits (TRANSACTION records) in the open log: records also count staged parts.
        self.commits = commits
        self._clock = clock
        # The database content digest to write at each roll (the active's, as of its
        # database file's waypoint), if any.
        self.digest_provider: Callable[[], ContentDigest | None] | None = None
        self.metrics: StreamMetrics | None = None
        self.fsyncs = 0
        # Every byte range written in this batch, in order, for block mode (`blocks.py`):
        # taken by the stream once the batch is durable.
        self.blocks: list[Block] = []
        # The latest time stamped on the stream (creation, commit or close): the floor of the
        # next one.  Read and written on the event loop (commit) and the writer thread (roll);
        # single assignments under the GIL, and a stale read only stamps a time a little low
        # for a record that lands after the roll, never earlier than the roll's creation time.
        self.last_time = last_time or header.creation_time
        # Staged bodies not yet committed or aborted (`spanning.py`).
        self.pending: dict[BlobId, PendingBlob] = dict(pending or {})
        # How many bytes of staged bodies the next batch may write (set by the stream).
        self.stage_budget = header.log_file_size
        # Whether the open log has been fsync'd since the roll that installed it (its header
        # is durable), and its header's block, held back from block mode until it is.
        self._header_durable = True
        self._held: list[Block] = []
        # Whether the last roll's renames wait for a directory fsync.
        self._dir_dirty = False
        # The file prepared for the next generation (`_prepare_next`): its fd and path.
        self._prepared: Future[tuple[int, Path]] | None = None
        self._prepare_next()

    @classmethod
    def open(
        cls,
        *,
        log_dir: Path,
        database_signature: uuid.UUID,
        log_signature: uuid.UUID,
        log_file_size: int,
        clock: Clock,
        open_scan: ScanResult | None = None,
        next_generation: int = 1,
        pending: dict[BlobId, PendingBlob] | None = None,
        epoch: int = 0,
    ) -> OpenLogWriter:
        """Open E00.log for writing, creating it for the next generation if needed.

        `open_scan` is the scan of an existing E00.log made by recovery; its torn tail (if
        any) is cut here, at the last valid record.  `next_generation` is the lowest
        generation a new E00.log may have (the database's waypoint + 1): a copy that was
        seeded and never kept a log must not start the stream again at 1.  `pending`: the
        staged bodies recovery found pending at the end of the log (a new E00.log carries
        them; the stream aborts them before it takes writes).  `epoch`: the stream
        incarnation every commit's LSN names.
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
            return cls(
                log_dir=log_dir,
                header=header,
                fd=fd,
                offset=open_scan.valid_end,
                record_count=len(open_scan.records),
                commits=len(open_scan.transactions),
                clock=clock,
                last_time=max([header.creation_time, *(r.commit_time for r in open_scan.records)]),
                pending=pending,
                epoch=epoch,
            )
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
        carried = encode_carried(pending or {}, header.creation_time)
        fd = create_open_log(log_dir, header, carried)
        return cls(
            log_dir=log_dir,
            header=header,
            fd=fd,
            offset=HEADER_SIZE + len(carried),
            record_count=0,
            clock=clock,
            pending=pending,
            epoch=epoch,
        )

    @property
    def offset(self) -> int:
        """The open log's length: where the next record goes."""
        return self._offset

    def stamp(self, commit_time: datetime) -> datetime:
        """`commit_time`, raised to the stream's latest time if the clock went back."""
        self.last_time = max(commit_time, self.last_time)
        return self.last_time

    def fits(self, size: int) -> bool:
        """Whether a record of `size` bytes fits in an empty log file, with its close."""
        return HEADER_SIZE + size + CLOSE_SIZE <= self.header.log_file_size

    def close(self) -> None:
        """Close the file (no roll); once.  The file prepared for the next generation is
        closed and removed once its helper thread is done with it."""
        if not self._fd_closed:
            self._fd_closed = True
            with contextlib.suppress(OSError):  # a roll that failed half-way closed it
                os.close(self._fd)
            if self._prepared is not None:
                self._prepared.add_done_callback(_discard_prepared)
                self._prepared = None

    def _prepare_next(self) -> None:
        """Start preparing the file for the generation after the open one, in a helper
        thread (its fsync off the commit path; the roll waits for it only if it is slower
        than a whole generation)."""
        prepared = PreparedHeader(
            self.header.generation + 1, self.header.database_signature, self.header.log_signature
        )
        future: Future[tuple[int, Path]] = Future()
        log_dir = self.log_dir

        def run() -> None:
            if not future.set_running_or_notify_cancel():
                return
            try:
                future.set_result(prepare_open_log(log_dir, prepared))
            except BaseException as exc:
                future.set_exception(exc)

        self._prepared = future
        threading.Thread(target=run, name=f"logprep {log_dir}", daemon=True).start()

    def _open_next(self, closed: int, carried: bytes) -> None:
        """The roll's second half, once generation `closed` is durable with its CLOSE
        record: the prepared file becomes E00.log for `self.header` (`install_prepared`),
        and the one after it is begun."""
        fd, path = self._take_prepared()
        try:
            install_prepared(self.log_dir, closed, fd, path, self.header, carried)
        except BaseException:
            os.close(fd)
            raise
        self._fd = fd
        self._header_durable = False
        self._dir_dirty = True
        self._prepare_next()

    def _take_prepared(self) -> tuple[int, Path]:
        """The file prepared for the generation the roll opens: the helper's, once it is
        done; made here if the helper failed (the error, if any, is then the roll's)."""
        future, self._prepared = self._prepared, None
        if future is not None:
            try:
                return future.result()
            except OSError:
                pass  # a disk error there may be passing: try once more, here
        return prepare_open_log(
            self.log_dir,
            PreparedHeader(
                self.header.generation, self.header.database_signature, self.header.log_signature
            ),
        )

    def write_batch(self, work: list[Pending]) -> tuple[list[Any], list[StreamEvent], int]:
        """Runs in a worker thread: write, roll and fsync for one batch of requests.

        Returns the results (`UNFINISHED` for a stage request that goes on in the next
        batch, an exception for a commit refused here), the events, and the highest
        generation that received a commit (0: none)."""
        results: list[Any] = [None] * len(work)
        events: list[StreamEvent] = []
        touched = 0
        wrote = False
        self.blocks[:0], self._held = self._held, []
        buf = bytearray()
        size = self.header.log_file_size

        def flush() -> None:
            if buf:
                data = bytes(buf)
                write_all(self._fd, data)
                self.blocks.append(Block(self.header.generation, self._offset - len(data), data))
                buf.clear()

        def append(record: bytes | list[bytes | memoryview]) -> int:
            """Append one record (whole, or in pieces) to the batch, rolling first if it
            would not fit; its offset."""
            pieces = [record] if isinstance(record, bytes) else record
            length = sum(len(p) for p in pieces)
            if self._offset + length + CLOSE_SIZE > size and self.records:
                flush()
                events.append(self.roll(RollCause.SIZE))
            offset = self._offset
            for piece in pieces:
                buf.extend(piece)
            self._offset += length
            self.records += 1
            return offset

        staging: list[int] = []
        for i, p in enumerate(work):
            if isinstance(p.job, StageJob):
                staging.append(i)
                continue
            if isinstance(p.job, AbortJob):
                for blob in p.job.blobs:
                    if self.pending.pop(blob, None) is not None:
                        append(encode_abort(blob, self.last_time))
                        wrote = True
                continue
            if p.data is None:
                if self.records or p.force:
                    flush()
                    if p.cause in (RollCause.SWITCHOVER, RollCause.DISMOUNT):
                        wrote |= self._abort_staging(work, staging, results, append)
                        flush()
                    closed = self.roll(p.cause)
                    events.append(closed)
                    results[i] = closed.generation
                continue
            lost = [b for b in p.blobs if b not in self.pending]
            if lost:
                results[i] = StagedBodyLost(
                    f"staged bodies {', '.join(map(str, lost))} were aborted before their "
                    "commit: nothing of it was written"
                )
                continue
            offset = append(p.data)
            for blob in p.blobs:
                del self.pending[blob]
            self.commits += 1
            lsn = Lsn(generation=self.header.generation, offset=offset, epoch=self.epoch)
            touched = lsn.generation
            wrote = True
            results[i] = Committed(lsn=lsn, commit_time=p.commit_time)
            events.append(Transaction(lsn.generation, lsn.offset, p.commit_time, p.ops))
        budget = self.stage_budget
        for i in staging:
            job = work[i].job
            assert isinstance(job, StageJob)
            if job.abort_on is not None:
                results[i] = job.abort_on
                continue
            budget, done = self._stage(job, budget, append, flush, events)
            wrote = True
            results[i] = job.blob.ref() if done and job.blob else UNFINISHED
        flush()
        if self._offset + CLOSE_SIZE + _ROLL_SLACK > size and self.records:
            events.append(self.roll(RollCause.SIZE))
        elif wrote:
            self.fsync()
        if not self._header_durable and any(r is UNFINISHED for r in results):
            # The batch ended with a roll, and a staged body goes on into the new generation
            # in the next batch: nothing of the new generation is answered or sent to the
            # copies now (its header's block waits), so its header and its renames are made
            # durable by the next batch's fsyncs, not by two more here.
            header_block = self.blocks.pop()
            assert header_block.generation == self.header.generation
            assert header_block.offset == 0
            self._held = [header_block]
        else:
            if not self._header_durable:
                self.fsync()
            if self._dir_dirty:
                self.fsync_dir()
        return results, events, touched

    def _stage(
        self,
        job: StageJob,
        budget: int,
        append: Callable[[bytes | list[bytes | memoryview]], int],
        flush: Callable[[], None],
        events: list[StreamEvent],
    ) -> tuple[int, bool]:
        """Write parts of `job` up to `budget` bytes; the budget left, and whether it is done."""
        total = len(job.data)
        while job.written < total and budget > 0:
            room = self.header.log_file_size - CLOSE_SIZE - self._offset - spanning.PART_OVERHEAD
            if room < _MIN_PART and self.records:
                flush()
                events.append(self.roll(RollCause.SIZE))
                continue
            take = min(room, budget, total - job.written)
            chunk = job.data[job.written : job.written + take]
            if job.blob is None:
                blob = BlobId(self.header.generation, self._offset)
                job.blob = PendingBlob(blob)
            index = job.blob.parts
            append(spanning.part_pieces(job.blob.id, index, chunk, self.last_time))
            job.blob = self.pending[job.blob.id] = job.blob.add(chunk)
            job.written += take
            # A part that fills the generation ends the batch: its roll is then the batch's
            # fsync.  Going on into the next generation would cost a second fsync there, and
            # keep a commit that arrives meanwhile waiting for more than one generation.
            budget = 0 if take == room else budget - take
        return budget, job.written >= total

    def _abort_staging(
        self,
        work: list[Pending],
        staging: list[int],
        results: list[Any],
        append: Callable[[bytes | list[bytes | memoryview]], int],
    ) -> bool:
        """Before a roll that ends the stream's writes (switchover, dismount): abort every
        staged body still pending, and fail the stage requests in this batch.  A body staged
        whole whose commit is not written yet is aborted too: the commit will be refused."""
        for i in staging:
            job = work[i].job
            assert isinstance(job, StageJob)
            job.abort_on = StagedBodyLost("the log was closed while the body was staged")
        aborted = False
        for blob in sorted(self.pending):
            append(encode_abort(blob, self.last_time))
            aborted = True
        self.pending.clear()
        return aborted

    def fsync(self) -> None:
        """fsync the open log (worker thread), timed when metrics are on."""
        if self.metrics is None:
            os.fsync(self._fd)
        else:
            start = self._clock.monotonic()
            os.fsync(self._fd)
            self.metrics.fsync.observe(self._clock.monotonic() - start)
        self.fsyncs += 1
        self._header_durable = True

    def fsync_dir(self) -> None:
        """fsync the log directory: the last roll's renames are durable (worker thread)."""
        fsync_dir(self.log_dir)
        self._dir_dirty = False

    def roll(self, cause: RollCause) -> ClosedGeneration:
        """Close E00.log as its generation and open the next one, which carries the staged
        bodies still pending (worker thread)."""
        close_time = self.last_time = max(self._clock.now(), self.last_time)
        digest = self.digest_provider() if self.digest_provider else None
        closing = encode_record(RecordType.CLOSE, close_time)
        last = digest.encode(close_time) + closing if digest else closing
        write_all(self._fd, last)
        self.fsync()
        self.blocks.append(Block(self.header.generation, self._offset, last, closed=True))
        os.close(self._fd)
        self._fd = -1  # closed: a roll that fails from here on leaves nothing to close
        if self._dir_dirty:
            # The last roll's renames, before this one's: the generation closed here was
            # installed by them, and its blocks go to the copies with this batch.
            self.fsync_dir()
        closed = self.header
        self.header = LogHeader(
            generation=closed.generation + 1,
            database_signature=closed.database_signature,
            log_signature=closed.log_signature,
            creation_time=max(close_time, closed.creation_time),
            prev_creation_time=closed.creation_time,
            log_file_size=closed.log_file_size,
        )
        carried = encode_carried(self.pending, self.header.creation_time)
        self._open_next(closed.generation, carried)
        self.blocks.append(Block(self.header.generation, 0, self.header.encode() + carried))
        self._offset = HEADER_SIZE + len(carried)
        self.records = self.commits = 0
        if self.metrics is not None:
            self.metrics.roll(cause)
        return ClosedGeneration(
            closed.generation,
            closed.creation_time,
            close_time,
            required_from=spanning.required_from(self.pending),
        )


def _discard_prepared(future: Future[tuple[int, Path]]) -> None:
    """Close and remove a prepared file no roll will use (the writer was closed)."""
    if future.cancelled() or future.exception() is not None:
        return
    fd, path = future.result()
    with contextlib.suppress(OSError):
        os.close(fd)
    with contextlib.suppress(OSError):
        path.unlink()
