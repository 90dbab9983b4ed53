"""The open log E00.log as the log stream's worker thread writes it: appends, rolls, fsyncs.

One batch of requests at a time, in queue order, off the event loop (`write_batch`): the
records are appended, the log is rolled when the next record would not fit (or on demand),
and the batch is made durable once (`_settle`).

The roll: append the CLOSE record (after the DIGEST record, when the active has one) to the
open file and start its writeback; create the next generation's file, its header and CARRIED
record, under a hidden name (`logdir.create_hidden`).  Nothing of a roll is fsync'd or
renamed there: the generations a batch or a run of batches closed form a *span*, settled as a
whole (`_settle`): every file of the span fsync'd, in order, then renamed, in order (E00.log,
the span's first, to its generation's name, each hidden file to its generation's name, the
last, the generation now open, to E00.log; `logdir.install_span` says why each crash state is
safe), then the directory fsync'd once.  Only then does a span's generation exist for anyone:
its blocks go to the copies in block mode, its ClosedGeneration events to the listeners (LLR,
the announcements), its commits are answered, and the stream's public view (`settled`)
moves.

When a span is settled: at the end of every batch that answers something (a commit, a roll
request, an abort, the stream's stop). A batch of nothing but staged parts answers nothing that
needs durability (a staged body counts only once a commit names it, and that commit's batch
settles), so while no small commits flow (`defer_parts`, set by the stream) it leaves its span
open, its blocks and events held, its files' writeback started, up to `SPAN_LIMIT` generations;
while it holds blocks, up to `SPAN_BYTES` of them.
Why: an 8 MiB body crosses nine 1 MiB generations. Made durable one at a time, each costs a
data fsync and a directory fsync, each waiting for a journal commit and a cache flush of its
own, and the log ran at 0.63-0.67 of a raw append in its file steps alone; written with their
writeback started and fsync'd together at the end, 1.20-1.24 (bench/log_fsync_shapes.py,
bench/README.md large_items run 5).

Such a batch (`_deferring`) also goes on from one generation to the next instead of ending
where a part fills one, until the body is written, a request waits (`wanted`, set by the
stream when it queues one: the batch stops at the end of the generation it is writing) or
the span is full; and each generation it closes is fsync'd at once by the syncer
(`span.Span.add`: why, and what it gained) while the writer writes the next, the
settle then only waiting for those fsyncs.  Why it goes on: an 8 MiB item spent another 5 ms
in nine returns to the event loop between batches of one generation each (timed by an ad-hoc
wrapper outside bench/).  Blocks are made only for a batch begun while a copy follows in block
mode (`keep_blocks`, set by the stream; `blocks.py` says why): a batch written while none does
writes its records as their pieces (`files.write_pieces`: a part's chunk from the body's own
buffer) and leaves a gap where the log then stands.

The span, its settle and the fsyncs are `span.py`; every file step goes through `files.py`'s
`LogFiles`, the operating system's unless the stream was given another (a test's disk).

Why nothing at the roll waits for the disk: creating the next E00.log durably there (a temp
file written, fsync'd, renamed, the directory fsync'd) took a third of an 8 MiB item's commit
on the bench's disk (bench/README.md, large_items run 4), which then had a helper thread
prepare the file, fsync'd, beforehand. Now that nothing is fsync'd before its settle, the roll
creates the file itself: a thread started each roll cost more than the creation (a quarter of
the writer thread's samples in a py-spy profile of part 1), and one helper for the writer's
life (tried, not kept) made the log no faster (330-340 MB/s in three runs of part 1, against
400-450 for the roll's own creation in the runs just before: its creations beside the writer's
fsyncs). A crash at any step leaves states recovery knows (`logdir.finish_interrupted_roll`,
`recovery.plan_recovery`): a stray hidden file is removed (nothing in it was acknowledged or
sent to a copy), an E00.log closed but not renamed is renamed once fsync'd.

Spare files (`spares.py`): the roll writes the next generation over a spare, a file of
`log_file_size` zeros written and made durable while the log was idle, when the stream keeps
a pool; a new file when it is empty.  Every closed generation is `log_file_size` bytes (the
roll's PAD record, `logfile.py`), so a generation written over a spare never changes the
file's size or blocks, and the writer's `fdatasync`s have no metadata for the journal to
commit: 8 MiB items at 0.95-1.18 of the raw append (median 1.09), against 0.66-0.91 (0.83)
for the writer before, all in new files, in the same series (bench/README.md large_items run
10).  `fallocate` would not do: its blocks are
"unwritten" until written, and writing them is a metadata change the journal commits.

Times never go backwards: `stamp` raises a commit time to the latest time on the stream, and
a close time is never earlier than the commits it closes.

Staged bodies (`spanning.py`): a stage request writes a body as PART records, across as many
generations as it takes.  It gets the room left in each batch after the batch's commits and
rolls (`stage_budget`: the stream gives it a slice while commits wait and a whole generation
when none do; a part that fills the open generation ends the batch, unless the batch is
deferring and nothing waits), so a small commit queued behind a 36 MiB body waits for one
slice or one generation, not for the body.  The writer keeps what
is pending (`pending`): every new generation is created with its CARRIED record, and a commit
naming a body no longer pending is refused (`StagedBodyLost`).
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dag_common.clock import Clock
from dag_common.model import Lsn, Position, RollCause
from replication_node.errors import LogSequenceError, StagedBodyLost
from replication_node.log import logfile, spanning
from replication_node.log.blocks import FRAME_ROOM, Block
from replication_node.log.events import (
    ClosedGeneration,
    Committed,
    StreamEvent,
    Transaction,
)
from replication_node.log.files import OS_FILES, LogFiles, OpenMode, write_all, write_pieces
from replication_node.log.logdir import (
    create_hidden,
    create_open_log,
    list_closed_generations,
)
from replication_node.log.logfile import (
    DIGEST_RECORD_MAX,
    FRAME_OVERHEAD,
    HEADER_SIZE,
    OPEN_LOG_NAME,
    ContentDigest,
    LogHeader,
    RecordType,
    ScanResult,
    closed_log_name,
    encode_pad,
    encode_record,
    salted,
)
from replication_node.log.requests import UNFINISHED, AbortJob, Pending, StageJob
from replication_node.log.span import Span
from replication_node.log.spanning import BlobId, PendingBlob, encode_abort, encode_carried
from replication_node.log.spares import SparePool

if TYPE_CHECKING:
    from replication_node.metrics import StreamMetrics

# What a roll appends: the PAD record (at its smallest), the DIGEST record (when the active
# has one) and the CLOSE record.
CLOSE_SIZE = len(encode_record(RecordType.CLOSE, datetime.now())) + DIGEST_RECORD_MAX
CLOSE_SIZE += FRAME_OVERHEAD
# Close a generation once less than this is left; a later small record would not fit anyway.
_ROLL_SLACK = 512
# A part smaller than this is not worth its frame: the generation is closed instead.
_MIN_PART = 4096
# The most generations a run of batches of staged parts leaves unsettled: an 8 MiB body (nine
# generations) settles once, at its commit; a 36 MiB one three times.  Bench part 1 (8 MiB
# items): 4 gave the log 357-415 MB/s, 8 gave 388-460, 16 gave 473-553, 40 no more (484-554).
SPAN_LIMIT = 16
# While a copy follows, a span also settles within this many bytes of generations: its blocks
# are held until then, and the feed keeps a publish whole (`blocks.BlockFeed.publish`).
SPAN_BYTES = 8 * 1024 * 1024


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
        files: LogFiles = OS_FILES,
    ) -> None:
        self.log_dir = log_dir
        self._files = files  # every file step the writer takes (`files.py`)
        self.header = header
        # The stream incarnation this writer writes (the active's epoch; 0: not known, a
        # tool's stream): every commit's LSN names it, so its acknowledgement says which
        # stream holds it without anyone patching it in later.
        self.epoch = epoch
        self._fd = fd
        self._path = log_dir / OPEN_LOG_NAME  # where the open generation's file is now
        self._unsynced = False  # written to since its last fsync
        self._fd_closed = False
        self._offset = offset
        self.records = record_count
        # Commits (TRANSACTION records) in the open log: records also count staged parts.
        self.commits = commits
        self._clock = clock
        # The database content digest to write at each roll (the active's, as of its
        # database file's waypoint), if any.
        self.digest_provider: Callable[[], ContentDigest | None] | None = None
        self._metrics: StreamMetrics | None = None
        # Every byte range written in this batch, in order, for block mode (`blocks.py`):
        # taken by the stream once the batch is durable; made while `keep_blocks` (set by
        # the stream before each batch; `_keeping`: the batch's), else a gap.
        self.blocks: list[Block] = []
        self.keep_blocks = self._keeping = True
        # The latest time stamped on the stream (creation, commit or close): the floor of the
        # next one.  Read and written on the event loop (commit) and the writer thread (roll);
        # single assignments under the GIL, and a stale read only stamps a time a little low
        # for a record that lands after the roll, never earlier than the roll's creation time.
        self.last_time = last_time or header.creation_time
        # Staged bodies not yet committed or aborted (`spanning.py`).
        self.pending: dict[BlobId, PendingBlob] = dict(pending or {})
        # How many bytes of staged bodies the next batch may write (set by the stream).
        self.stage_budget = header.log_file_size
        # Whether a batch of nothing but staged parts may leave its span unsettled (set by the
        # stream: while no commits flow).
        self.defer_parts = True
        # The generations closed since the last settled batch (`_settle`), and what batches
        # that left them unsettled wrote: blocks and events, held until they are durable.
        self._span = Span(log_dir=log_dir, files=files, clock=clock)
        self._held_blocks: list[Block] = []
        self._held_events: list[StreamEvent] = []
        # The header of the generation open as the world sees it: E00.log, durable and named.
        self.settled = header
        self.span_limit = SPAN_LIMIT
        # Set by the stream when a request is queued, cleared when it takes a batch: a batch
        # going on with a staged body stops at the end of the generation it is writing.
        self.wanted = False
        # Whether the batch being written may leave its span unsettled (a batch of nothing but
        # parts while no commits flow): it goes on across generations, and each generation it
        # closes is fsync'd early, by the syncer, while the next is written.
        self._deferring = False
        # Files written whole beforehand for the next generations (`spares.py`; set by the
        # stream), and the open generation's salt (`LogHeader.salt`).
        self.spares: SparePool | None = None
        self._salt = header.salt

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
        files: LogFiles = OS_FILES,
    ) -> OpenLogWriter:
        """Open E00.log for writing, creating it for the next generation if needed.

        `open_scan` is the scan of an existing E00.log made by recovery; its torn tail (if
        any) is cut here, at the last valid record.  `next_generation` is the lowest
        generation a new E00.log may have (the database's waypoint + 1): a copy that was
        seeded and never kept a log must not start the stream again at 1.  `pending`: the
        staged bodies recovery found pending at the end of the log (a new E00.log carries
        them; the stream aborts them before it takes writes).  `epoch`: the stream
        incarnation every commit's LSN names.  `files`: the file steps (`files.py`).
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
            fd = files.open(path, OpenMode.EXISTING)
            if open_scan.valid_end < open_scan.file_size and not open_scan.unwritten:
                files.truncate(fd, open_scan.valid_end)  # a torn tail (a spare's zeros stay)
            # Its records are the log from here on, whatever a kill -9 left unsynced.
            files.fsync(fd)
            files.seek(fd, open_scan.valid_end)
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
                files=files,
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
        carried = encode_carried(pending or {}, header.creation_time, salt=header.salt)
        fd = create_open_log(log_dir, header, carried, files)
        return cls(
            log_dir=log_dir,
            header=header,
            fd=fd,
            offset=HEADER_SIZE + len(carried),
            record_count=0,
            clock=clock,
            pending=pending,
            epoch=epoch,
            files=files,
        )

    @property
    def metrics(self) -> StreamMetrics | None:
        """Where fsyncs and rolls are counted (None: nowhere)."""
        return self._metrics

    @metrics.setter
    def metrics(self, metrics: StreamMetrics | None) -> None:
        self._metrics = self._span.metrics = metrics

    @property
    def files(self) -> LogFiles:
        """The file steps this writer takes (`files.py`)."""
        return self._files

    @property
    def fsyncs(self) -> int:
        """How many times a log file was fsync'd."""
        return self._span.fsyncs

    @property
    def offset(self) -> int:
        """The open log's length: where the next record goes."""
        return self._offset

    def _at(self, offset: int) -> Position:
        """`offset` in the open generation."""
        return Position(self.header.generation, offset)

    def stamp(self, commit_time: datetime) -> datetime:
        """`commit_time`, raised to the stream's latest time if the clock went back."""
        self.last_time = max(commit_time, self.last_time)
        return self.last_time

    def fits(self, size: int) -> bool:
        """Whether a record of `size` bytes fits in an empty log file, with its close."""
        return HEADER_SIZE + size + CLOSE_SIZE <= self.header.log_file_size

    def close(self) -> None:
        """Close the files (no roll, nothing settled: the stream settles before it stops);
        once."""
        if not self._fd_closed:
            self._fd_closed = True
            self._span.close()
            with contextlib.suppress(OSError):  # a roll that failed half-way closed it
                self._files.close(self._fd)

    def write_batch(
        self, work: list[Pending], *, stopping: bool = False
    ) -> tuple[list[Any], list[StreamEvent], int]:
        """Runs in a worker thread: write, roll and fsync for one batch of requests.

        Returns the results (`UNFINISHED` for a stage request that goes on in the next
        batch, an exception for a commit refused here), the events, and the highest
        generation that received a commit (0: none).  A batch of nothing but staged parts
        may leave its span unsettled (`span_open`): then it returns no event and leaves no
        block, both held for the batch that settles it; `stopping`: the stream stops after
        this batch, which settles whatever it holds."""
        results: list[Any] = [None] * len(work)
        events: list[StreamEvent] = []
        touched = 0
        buf: list[bytes | memoryview] = []  # the records' pieces, joined once (one copy)
        size = self.header.log_file_size
        self._keeping = self.keep_blocks
        began = self._at(self._offset)

        def flush() -> None:
            if not buf:
                return
            if not self._keeping:
                write_pieces(self._fd, buf, self._files)  # no block: nothing joined
            else:
                room = bytearray(FRAME_ROOM + sum(map(len, buf)))  # joined once, with room
                at, view = FRAME_ROOM, memoryview(room)
                for piece in buf:
                    view[at : at + len(piece)] = piece
                    at += len(piece)
                data = view[FRAME_ROOM:]
                write_all(self._fd, data, self._files)
                self.blocks.append(Block(self._at(self._offset - len(data)), data, room=room))
            self._unsynced = True
            buf.clear()

        def append(record: bytes | list[bytes | memoryview]) -> int:
            """Append one record (whole, or in pieces) to the batch, rolling first if it
            would not fit; its offset."""
            pieces = [record] if isinstance(record, bytes) else record
            length = sum(len(p) for p in pieces)
            if self._offset + length + CLOSE_SIZE > size and self.records:
                flush()
                events.append(self.roll(RollCause.SIZE))
            pieces = salted(pieces, self._salt)  # for the generation it lands in
            offset = self._offset
            buf.extend(pieces)
            self._offset += length
            self.records += 1
            return offset

        staging: list[int] = []
        parts_only = all(isinstance(p.job, StageJob) for p in work)
        self._deferring = bool(work) and parts_only and self.defer_parts and not stopping
        for i, p in enumerate(work):
            if isinstance(p.job, StageJob):
                staging.append(i)
                continue
            if isinstance(p.job, AbortJob):
                for blob in (b for b in p.job.blobs if b in self.pending):
                    append(encode_abort(blob, self.last_time))  # a roll first carries it
                    del self.pending[blob]  # (the open log recovered full)
                continue
            if p.data is None:
                if self.records or p.force:
                    flush()
                    if p.cause in (RollCause.SWITCHOVER, RollCause.DISMOUNT):
                        self._abort_staging(work, staging, results, append)
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
            results[i] = Committed(lsn=lsn, commit_time=p.commit_time)
            events.append(Transaction(lsn.position, p.commit_time, p.ops, p.staged))
        budget = self.stage_budget
        for i in staging:
            job = work[i].job
            assert isinstance(job, StageJob)
            if job.abort_on is not None:
                results[i] = job.abort_on
                continue
            # A body staged as it arrives goes on from its parts so far; one aborted meanwhile
            # (a switchover, its writer's own abort) takes nothing more.
            blob = job.blob.id if job.blob is not None else job.continues
            if blob is not None and blob not in self.pending:
                results[i] = StagedBodyLost(f"staged body {blob} was aborted while it was staged")
                continue
            if job.blob is None and blob is not None:
                job.blob = self.pending[blob]
            budget, done = self._stage(job, budget, append, flush, events)
            results[i] = job.blob.ref() if done and job.blob else UNFINISHED
        flush()
        if self._offset + CLOSE_SIZE + _ROLL_SLACK > size and self.records:
            events.append(self.roll(RollCause.SIZE))
        if not self._keeping:  # no block (its rolls' neither): a gap where the log stands
            at = self._at(self._offset)
            self.blocks = [Block(at, b"", gap=True)] if at != began else []
            if self.blocks and self._held_blocks and self._held_blocks[-1].gap:
                self._held_blocks.pop()  # this one covers it
        self._held_blocks += self.blocks
        self._held_events += events
        self.blocks = []
        if self._deferring and len(self._span) < self._span_limit():
            # Nothing here needs durability yet: writeback started, the rest at the settle.
            self._files.start_writeback(self._fd)
            return results, [], touched
        self._settle()
        self.blocks, self._held_blocks = self._held_blocks, []
        events, self._held_events = self._held_events, []
        return results, events, touched

    def _span_limit(self) -> int:
        """The most generations a span of staged parts leaves unsettled (`SPAN_BYTES`)."""
        if self._keeping or any(not b.gap for b in self._held_blocks):
            return max(1, min(self.span_limit, SPAN_BYTES // self.header.log_file_size))
        return self.span_limit

    @property
    def span_open(self) -> bool:
        """Whether generations closed by rolls are not yet settled (durable and named)."""
        return bool(self._span)

    def _settle(self) -> None:
        """Make everything written durable and named: the open file fsync'd (if written to
        since its last fsync), and when rolls closed generations since the last settle,
        every one of their files fsync'd, then all renamed in order (`logdir.install_span`),
        then the directory fsync'd once."""
        if not self._span:
            if self._unsynced:
                self.fsync()
            return
        self._span.settle(self._fd, self._path)
        self._unsynced = False
        self._path = self.log_dir / OPEN_LOG_NAME
        self.settled = self.header

    def _stage(
        self,
        job: StageJob,
        budget: int,
        append: Callable[[bytes | list[bytes | memoryview]], int],
        flush: Callable[[], None],
        events: list[StreamEvent],
    ) -> tuple[int, bool]:
        """Write parts of `job` up to `budget` bytes; the budget left, and whether it is done."""
        body = job.data
        while body.read_bytes < body.size and budget > 0:
            room = self.header.log_file_size - CLOSE_SIZE - self._offset - spanning.PART_OVERHEAD
            if room < _MIN_PART and self.records:
                flush()
                events.append(self.roll(RollCause.SIZE))
                continue
            take = min(room, budget, body.size - body.read_bytes)
            chunk = body.read(take)
            if job.blob is None:
                blob = self._at(self._offset)
                job.blob = PendingBlob(blob)
            index = job.blob.parts
            append(spanning.part_pieces(job.blob.id, index, chunk, self.last_time))
            job.blob = self.pending[job.blob.id] = job.blob.add(chunk)
            if take < room:
                budget -= take
            elif self._deferring and not self.wanted and len(self._span) + 1 < self._span_limit():
                # The generation is full: on into the next (its roll, and the one that may
                # end the batch, bring the span to its limit at most).
                budget = self.stage_budget
            else:
                # A part that fills the generation ends the batch: going on into the next
                # would keep a request that arrived meanwhile waiting for more than one.
                budget = 0
        return budget, body.read_bytes >= body.size

    def _abort_staging(
        self,
        work: list[Pending],
        staging: list[int],
        results: list[Any],
        append: Callable[[bytes | list[bytes | memoryview]], int],
    ) -> None:
        """Before a roll that ends the stream's writes (switchover, dismount): abort every
        staged body still pending, and fail the stage requests in this batch.  A body staged
        whole whose commit is not written yet is aborted too: the commit will be refused."""
        for i in staging:
            job = work[i].job
            assert isinstance(job, StageJob)
            job.abort_on = StagedBodyLost("the log was closed while the body was staged")
        for blob in sorted(self.pending):
            append(encode_abort(blob, self.last_time))
            del self.pending[blob]  # after its ABORT: a roll that record needs carries it

    def fsync(self) -> None:
        """fsync the open generation's file (worker thread)."""
        self._span.fsync(self._fd)
        self._unsynced = False

    def roll(self, cause: RollCause) -> ClosedGeneration:
        """Close the open generation and open the next one, which carries the staged bodies
        still pending (worker thread).  Nothing is fsync'd or renamed here: the closed
        generation joins the span the batch's end settles (`_settle`)."""
        close_time = self.last_time = max(self._clock.now(), self.last_time)
        digest = self.digest_provider() if self.digest_provider else None
        salt = self._salt
        last = encode_record(RecordType.CLOSE, close_time, salt=salt)
        if digest is not None:
            last = digest.encode(close_time, salt=salt) + last
        room = self.header.log_file_size - self._offset - len(last)
        if self.header.version >= 2 and room >= FRAME_OVERHEAD:
            # CLOSE ends the file at log_file_size (`logfile.py`): a generation written over
            # a spare ends where the file does, with no truncation for the journal to commit.
            # The invariant that leaves this room is CLOSE_SIZE.
            last = encode_pad(room, close_time, salt=salt) + last
        write_all(self._fd, last, self._files)
        self._files.start_writeback(self._fd)
        self.blocks.append(Block(self._at(self._offset), last, closed=True))
        closed = self.header
        self._span.add(closed.generation, self._fd, self._path, early=self._deferring)
        self._fd = -1  # in the span: a roll that fails from here on leaves nothing to close
        self.header = LogHeader(
            generation=closed.generation + 1,
            database_signature=closed.database_signature,
            log_signature=closed.log_signature,
            creation_time=max(close_time, closed.creation_time),
            prev_creation_time=closed.creation_time,
            log_file_size=closed.log_file_size,
        )
        self._salt = self.header.salt
        carried = encode_carried(self.pending, self.header.creation_time, salt=self._salt)
        spare = self.spares.take() if self.spares is not None else None
        self._fd, self._path = create_hidden(self.log_dir, self.header, carried, spare, self._files)
        self._unsynced = True
        self.blocks.append(Block(self._at(0), self.header.encode() + carried))
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
