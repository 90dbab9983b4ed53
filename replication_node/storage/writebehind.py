"""Paced write-behind: a file's dirty pages written a chunk at a time, then fdatasync'd.

Why: an LLR write of a large body is one SQLite transaction, and SQLite's commit writes all
of it (8 MiB for an 8 MiB item) and fsyncs it at once; its checkpoint then copies it into the
database file and fsyncs that at once.  On a disk whose requests are up to 4 MiB
(`max_sectors_kb`) and dispatched as soon as they are queued, a small commit's log fsync then
waits behind megabytes of the database file's writes (bench/large_items.py, part 2: the tail
of small commits beside large ones).  Written here a chunk at a time instead
(`sync_file_range`: start the chunk's writeback, wait for it), the device never holds more than
one chunk of them, and the log's writes queue behind at most that.

Durability is only ever the final `fdatasync`: the chunks shape the I/O, they prove nothing,
so a chunk missed (a page dirtied outside the ranges given) is still made durable by it.
Where `sync_file_range` does not exist (not Linux), only the `fdatasync` is done.

Which ranges (`WalFrames`): a paced commit's own, the WAL's frames since the last paced
commit's and the database file's pages its checkpoint copied, not every frame the WAL file
holds.  While readers hold snapshots SQLite does not restart the WAL, which grew to 34-42 MiB
on the active in a 1 MiB LMTP phase: each 1 MiB flush then read ~1,300 frame headers and
looked up 40 MiB of clean pages, a chunk and a `pace` call at a time (issue 49).  The frames
since are told by their salts (a frame's are its WAL's, changed each time SQLite restarts
it, so the stale frames of an earlier WAL the file still holds past the last are not
counted); a WAL not seen before is taken whole (`wal_page_ranges`, every frame).
"""

from __future__ import annotations

import os
import struct
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from dag_common.durable import (
    SYNC_FILE_RANGE_WAIT_AFTER,
    SYNC_FILE_RANGE_WAIT_BEFORE,
    SYNC_FILE_RANGE_WRITE,
    sync_file_range,
)

_WRITE_AND_WAIT = SYNC_FILE_RANGE_WAIT_BEFORE | SYNC_FILE_RANGE_WRITE | SYNC_FILE_RANGE_WAIT_AFTER

# One request of the bench's disk at most is 4 MiB; 1 MiB of writes is 1-2 ms on it.
CHUNK = 1 << 20


def write_chunk(fd: int, offset: int, length: int) -> None:
    """Write a range's dirty pages and wait for them (no device cache flush, no metadata)."""
    sync_file_range(fd, offset, length, _WRITE_AND_WAIT)


def write_behind(
    path: Path,
    ranges: Iterable[tuple[int, int]] | None = None,
    *,
    chunk: int | None = None,
    pace: Callable[[], int | None] | None = None,
    fd: int | None = None,
) -> int:
    """Write `path`'s dirty pages in `ranges` ((offset, length); None: the whole file) a
    `chunk` (default CHUNK) at a time, then fdatasync the file.  `pace` is called before each
    chunk: it waits as it likes, and may name that chunk's size (None: `chunk`).  Returns the
    number of chunks written.

    `fd`: a descriptor of `path` to write through, left open; without it the file is opened
    and closed here, which must never be done to a database file SQLite has open in this
    process (closing it drops SQLite's locks: `file_handles.py`)."""
    chunk = chunk or CHUNK
    own = fd is None
    if fd is None:
        fd = os.open(path, os.O_RDONLY)
    try:
        if ranges is None:
            ranges = [(0, os.fstat(fd).st_size)]
        chunks = 0
        for offset, length in ranges:
            end = offset + length
            while offset < end:
                size = pace() if pace is not None else None
                step = min(size or chunk, end - offset)
                write_chunk(fd, offset, step)
                offset += step
                chunks += 1
        os.fdatasync(fd)
        return chunks
    finally:
        if own:
            os.close(fd)


_WAL_HEADER = 32
_WAL_SALT = 16  # where the WAL header's two salts are (8 bytes)
_FRAME_HEADER = 24
_PAGE = struct.Struct(">I")  # a frame's page number, the first field of its header
# A frame header's first 16 bytes: its page, the database's size after a commit frame, salts
_FRAME_START = struct.Struct(">II8s")


def wal_page_ranges(wal: Path, page_size: int) -> list[tuple[int, int]]:
    """The byte ranges of the database file that a checkpoint of `wal` writes: the pages its
    frames name (every frame in the file, stale ones too: a range with nothing dirty costs a
    look-up, not a write), merged into runs, in file order."""
    frame = _FRAME_HEADER + page_size
    pages: set[int] = set()
    # Each frame's page number read alone (`pread` of 4 bytes): a buffered file read a whole
    # buffer after each seek, 8 KiB copied a frame: for the 600 frames of a replay batch's
    # commit (12,800 items) 2.0-2.5 ms of CPU against 0.5, 10-13 ms at load 9 against 2
    # (bench/README.md, issue 51's replay against the base).
    fd = os.open(wal, os.O_RDONLY)
    try:
        end = os.fstat(fd).st_size - frame
        for offset in range(_WAL_HEADER, end + 1, frame):
            header = os.pread(fd, 4, offset)
            if len(header) < 4:
                break
            (page,) = _PAGE.unpack(header)
            if page:
                pages.add(page)
    finally:
        os.close(fd)
    return page_ranges(pages, page_size)


def page_ranges(pages: Iterable[int], page_size: int) -> list[tuple[int, int]]:
    """The byte ranges of the database file's `pages` (numbered from 1), merged into runs, in
    file order."""
    ranges: list[tuple[int, int]] = []
    for page in sorted(set(pages)):
        start = (page - 1) * page_size
        if ranges and ranges[-1][0] + ranges[-1][1] == start:
            ranges[-1] = (ranges[-1][0], ranges[-1][1] + page_size)
        else:
            ranges.append((start, page_size))
    return ranges


@dataclass(frozen=True, slots=True)
class WalMark:
    """How far a WAL was seen by the last paced commit: its salts (its header's: they change
    each time SQLite restarts it), the frames it held then, and the frames checkpointed."""

    salt: bytes
    frames: int
    backfilled: int


class WalFrames:
    """The frames of one WAL (its file open here) since `mark` (None, or a mark of an earlier
    WAL than this one: all of them), while their salts are its header's: the frames SQLite
    wrote since, not the stale ones of an earlier WAL the file still holds past them (a
    frame's salts are its WAL's).  `since`: the mark they are counted from."""

    def __init__(self, fd: int, page_size: int, mark: WalMark | None) -> None:
        self.salt = os.pread(fd, 8, _WAL_SALT)
        if mark is None or mark.salt != self.salt:
            mark = WalMark(self.salt, 0, 0)
        self.since = mark
        first = self.first = min(mark.frames, mark.backfilled)
        self.page_size = page_size
        self.pages: list[int] = []  # frame `first + i` writes page `pages[i]`
        frame = _FRAME_HEADER + page_size
        offset = _WAL_HEADER + first * frame
        while len(header := os.pread(fd, 16, offset)) == 16:
            page, _, salt = _FRAME_START.unpack(header)
            if salt != self.salt:
                break
            self.pages.append(page)
            offset += frame

    @property
    def end(self) -> int:
        """The frames the WAL holds (the last one with its salts, plus one)."""
        return self.first + len(self.pages)

    def byte_range(self, start: int) -> tuple[int, int]:
        """(offset, length) of the WAL's frames from the `start`th on."""
        frame = _FRAME_HEADER + self.page_size
        return _WAL_HEADER + start * frame, max(0, self.end - start) * frame

    def pages_of(self, start: int, stop: int) -> list[int]:
        """The pages frames `start` up to `stop` write (`start` no less than `first`)."""
        return self.pages[start - self.first : stop - self.first]
