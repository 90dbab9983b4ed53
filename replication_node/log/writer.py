"""The open log E00.log as the log stream's worker thread writes it: appends, rolls, fsyncs.

One batch of requests at a time, in queue order, off the event loop (`write_batch`): the
records are appended, the log is rolled when the next record would not fit (or on demand),
and the batch is fsync'd once.  Roll sequence (each step durable before the next): append
the CLOSE record (after the DIGEST record, when the active has one) and fsync E00.log;
rename it to its generation name and fsync the directory; write the next E00.log as a temp
file with its header, fsync, rename, fsync the directory (`logdir.create_open_log`).

Times never go backwards: `stamp` raises a commit time to the latest time on the stream, and
a close time is never earlier than the commits it closes.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dag_common.clock import Clock
from dag_common.durable import fsync_dir
from dag_common.model import Lsn
from replication_node.errors import LogSequenceError
from replication_node.log import logfile
from replication_node.log.blocks import Block
from replication_node.log.events import ClosedGeneration, Committed, RollCause, StreamEvent
from replication_node.log.logdir import create_open_log, list_closed_generations, write_all
from replication_node.log.logfile import (
    DIGEST_RECORD_MAX,
    HEADER_SIZE,
    OPEN_LOG_NAME,
    ContentDigest,
    LogHeader,
    RecordType,
    ScanResult,
    closed_log_name,
    encode_record,
)
from replication_node.storage.database import Transaction

if TYPE_CHECKING:
    from replication_node.metrics import StreamMetrics

# What a roll appends: the DIGEST record (when the active has one) and the CLOSE record.
CLOSE_SIZE = len(encode_record(RecordType.CLOSE, datetime.now())) + DIGEST_RECORD_MAX
# Close a generation once less than this is left; a later small record would not fit anyway.
_ROLL_SLACK = 512


@dataclass(slots=True)
class Pending:
    """One request to the writer, answered through its future."""

    data: bytes | None  # None: a roll request; b"": stop the writer
    commit_time: datetime
    force: bool
    future: asyncio.Future[Any]
    ops: list[dict[str, Any]] | None = None
    queued: float = 0.0  # monotonic time the commit was queued (commit latency)
    cause: RollCause = RollCause.DEMAND  # a roll request's cause


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
        last_time: datetime | None = None,
    ) -> None:
        self.log_dir = log_dir
        self.header = header
        self._fd = fd
        self._fd_closed = False
        self._offset = offset
        self.records = record_count
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
    ) -> OpenLogWriter:
        """Open E00.log for writing, creating it for the next generation if needed.

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
            return cls(
                log_dir=log_dir,
                header=header,
                fd=fd,
                offset=open_scan.valid_end,
                record_count=len(open_scan.records),
                clock=clock,
                last_time=max([header.creation_time, *(r.commit_time for r in open_scan.records)]),
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
        fd = create_open_log(log_dir, header)
        return cls(
            log_dir=log_dir, header=header, fd=fd, offset=HEADER_SIZE, record_count=0, clock=clock
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
        """Close the file (no roll); once."""
        if not self._fd_closed:
            self._fd_closed = True
            with contextlib.suppress(OSError):  # a roll that failed half-way closed it
                os.close(self._fd)

    def write_batch(self, work: list[Pending]) -> tuple[list[Any], list[StreamEvent], int]:
        """Runs in a worker thread: write, roll and fsync for one batch of requests.

        Returns the results, the events, and the highest generation that received a record
        (0: none)."""
        results: list[Any] = []
        events: list[StreamEvent] = []
        touched = 0
        buf = bytearray()
        size = self.header.log_file_size

        def flush() -> None:
            if buf:
                data = bytes(buf)
                write_all(self._fd, data)
                self.blocks.append(Block(self.header.generation, self._offset - len(data), data))
                buf.clear()

        for p in work:
            if p.data is None:
                if self.records or p.force:
                    flush()
                    closed = self.roll(p.cause)
                    events.append(closed)
                    results.append(closed.generation)
                else:
                    results.append(None)
                continue
            if self._offset + len(p.data) + CLOSE_SIZE > size and self.records:
                flush()
                events.append(self.roll(RollCause.SIZE))
            lsn = Lsn(generation=self.header.generation, offset=self._offset)
            touched = lsn.generation
            buf += p.data
            self._offset += len(p.data)
            self.records += 1
            results.append(Committed(lsn=lsn, commit_time=p.commit_time))
            events.append(Transaction(lsn.generation, lsn.offset, p.commit_time, p.ops or []))
        flush()
        if self._offset + CLOSE_SIZE + _ROLL_SLACK > size and self.records:
            events.append(self.roll(RollCause.SIZE))
        elif any(p.data is not None for p in work):
            self.fsync()
        return results, events, touched

    def fsync(self) -> None:
        """fsync the open log (worker thread), timed when metrics are on."""
        if self.metrics is None:
            os.fsync(self._fd)
        else:
            start = self._clock.monotonic()
            os.fsync(self._fd)
            self.metrics.fsync.observe(self._clock.monotonic() - start)
        self.fsyncs += 1

    def roll(self, cause: RollCause) -> ClosedGeneration:
        """Close E00.log as its generation and open the next one (worker thread)."""
        close_time = self.last_time = max(self._clock.now(), self.last_time)
        digest = self.digest_provider() if self.digest_provider else None
        closing = encode_record(RecordType.CLOSE, close_time)
        last = digest.encode(close_time) + closing if digest else closing
        write_all(self._fd, last)
        self.fsync()
        self.blocks.append(Block(self.header.generation, self._offset, last, closed=True))
        os.close(self._fd)
        closed = self.header
        os.replace(self.log_dir / OPEN_LOG_NAME, self.log_dir / closed_log_name(closed.generation))
        fsync_dir(self.log_dir)
        self.header = LogHeader(
            generation=closed.generation + 1,
            database_signature=closed.database_signature,
            log_signature=closed.log_signature,
            creation_time=max(close_time, closed.creation_time),
            prev_creation_time=closed.creation_time,
            log_file_size=closed.log_file_size,
        )
        self._fd = create_open_log(self.log_dir, self.header)
        self.blocks.append(Block(self.header.generation, 0, self.header.encode()))
        self._offset = HEADER_SIZE
        self.records = 0
        if self.metrics is not None:
            self.metrics.roll(cause)
        return ClosedGeneration(closed.generation, closed.creation_time, close_time)
