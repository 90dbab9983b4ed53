"""Closed generations read and verified once by a stage, kept for the other readers of the
same stage that need them again (any thread), bounded in bytes.

Why (issue 49, the 1 MiB LMTP path): a staged body's parts were read from the log files by
each of the stage's readers, each with its own `spanning.BodyReader`, and each read a whole
closed generation again (a fresh 1 MiB mapping, its page faults, its CRC32C scan): on a
passive, the replay's read, then its check of a large body's UTF-8 and SHA-256, then the
row's write of its parts; on the active, each LLR flush read the generations of its bodies,
and the next flush the generation the two shared.  A generation holds the parts of more than
one body, and a body's parts span generations, so a reader of its own per body read each
generation once for every body with a part in it (below: 16 times and more).

What is kept is what was verified (`logfile.verify_closed`: the header, every record's
CRC32C, CLOSE last), as it was verified: a `ScanResult` over the bytes read, which nothing
can change (`bytes`).  A reader given it reads exactly the bytes that were checked, so no
check is given up: each body's size, CRC32C, SHA-256 and UTF-8 are still checked from them
by the reader.  What a hit does not do is read the file again, so a file damaged on disk
after this stage read it is not noticed by this stage, which writes the right bytes anyway;
the readers that serve bodies to clients (`LogBodies.checked_parts`) and the inspection keep
reading the file each time, and so notice it.

Kept only while the file is the one read: each look compares the file's identity (device,
inode, size, modification time) with the one it had when it was read, and reads it again if
it differs (a generation restored, or a copy reseeded under the same name).  The open log is
never kept (it grows): only results that end with their CLOSE record.

Bounded in bytes (`most`: each generation counts its file's size), the least recently used
let go of first; the stage also lets go of the generations it will not need again
(`forget_below`), so an idle node holds none.  A generation being read by a reader stays in
memory while that reader holds it, as before; the cache adds at most `most` bytes to that.

Where each generation's PART records are (which body, what offset, how long) is noted when
it is verified (`records`), and kept after its bytes are let go of (a few numbers a part):
a reader of a body whose generation is no longer kept reads that body's records alone, each
by its position, and checks each one's frame and CRC32C as a scan does (`record_at`), rather
than the whole generation again (one that fails is read whole again by the stage's loader,
which reports what is wrong with the file its own way: the active's notes the damage and
tells its mend).  This is what bounds the reads where 16 sessions stage 1 MiB bodies at
once: their parts interleave, so a body's parts span as many generations as
bodies are staged beside it (16 or more), and a reader of its own read each of those whole,
16 MiB and more read for a 1 MiB body, once for each of the stage's readers; the bytes kept
could not hold that span within a bound of a few generations.

Weighed and not taken: a reused read buffer (a part handed to a writer is a view of
the bytes read, and the reader holding the last part back, `checked_parts`, would see it
overwritten by the next generation); a mapping of the file (SIGBUS: `logfile.read_closed`);
reading the file again but skipping its CRC32C scan when its inode, size and modification
time are those of a file verified before (unsound: they say the file was not written
through the file system since, not that the disk gives back the bytes it was given, and the
read's cost, a fresh mapping and its page faults, is most of what a read costs here).
"""

from __future__ import annotations

import collections
import os
import struct
import threading
from collections.abc import Callable
from pathlib import Path

import crc32c

from replication_node.errors import LogRecordError
from replication_node.log.logfile import (
    FRAME_OVERHEAD,
    LogRecord,
    RecordType,
    ScanResult,
    from_micros,
)
from replication_node.log.spanning import BlobId, decode_part

# What a stage keeps by default: four generations of the seeds' 1 MiB.
MOST = 4 * 1024 * 1024
# How many generations' part positions a stage keeps at most (a few numbers each).
MOST_NOTED = 4096

_Identity = tuple[int, int, int, int]
_FRAME = struct.Struct(">II")
_BODY = struct.Struct(">Bq")


def _identity(path: Path) -> _Identity | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns


class _Noted:
    """Where one verified generation's PART records are, by body."""

    __slots__ = ("generation", "ident", "parts", "salt")

    def __init__(self, ident: _Identity, result: ScanResult) -> None:
        self.ident = ident
        self.generation = result.header.generation
        self.salt = result.header.salt
        self.parts: dict[BlobId, list[tuple[int, int]]] = {}
        for rec in result.records:
            if rec.type is RecordType.PART:
                blob, _, _ = decode_part(rec)
                self.parts.setdefault(blob, []).append((rec.offset, rec.size))


class GenerationCache:
    """Verified closed generations by their file's path, and where their parts are
    (thread-safe)."""

    def __init__(self, most: int = MOST) -> None:
        self._most = most
        self._kept: collections.OrderedDict[Path, tuple[_Identity, ScanResult]] = (
            collections.OrderedDict()
        )
        self._noted: collections.OrderedDict[Path, _Noted] = collections.OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()
        self.loads = 0  # generations read whole (not found kept), for tests and benches
        self.records_read = 0  # records read alone by their position

    def get(self, path: Path, load: Callable[[], ScanResult]) -> ScanResult:
        """The verified generation at `path`: the one kept if the file is still the one it
        was read from, else `load()`'s (kept if it is closed).  `load` raises as it would."""
        ident = _identity(path)
        with self._lock:
            kept = self._kept.get(path)
            if kept is not None and kept[0] == ident:
                self._kept.move_to_end(path)
                return kept[1]
        return self._load(path, ident, load)

    def _load(self, path: Path, ident: _Identity | None, load: Callable[[], ScanResult]):
        # Read outside the lock: another thread's look need not wait on this read.
        result = load()
        # `ident` was taken before the read: a file changed since is read again next time.
        noted = _Noted(ident, result) if ident is not None and result.closed else None
        with self._lock:
            self.loads += 1
            if noted is None:
                return result
            self._noted.pop(path, None)
            self._noted[path] = noted
            while len(self._noted) > MOST_NOTED:
                self._noted.popitem(last=False)
            if result.file_size <= self._most:
                self._drop(path)
                self._kept[path] = (noted.ident, result)
                self._bytes += result.file_size
                while self._bytes > self._most:
                    self._drop(next(iter(self._kept)))
        return result

    def records(self, path: Path, blob: BlobId, load: Callable[[], ScanResult]) -> list[LogRecord]:
        """The PART records of body `blob` in the verified generation at `path`: from its
        bytes if they are kept, else each read alone by the position noted when it was
        verified (checked: `record_at`), else from `load()`, verified whole and noted."""
        ident = _identity(path)
        with self._lock:
            kept = self._kept.get(path)
            noted = self._noted.get(path)
            if kept is not None and kept[0] == ident:
                self._kept.move_to_end(path)
                result: ScanResult | None = kept[1]
            else:
                result = None
        if result is None and noted is not None and noted.ident == ident:
            try:
                return self._read_alone(path, noted, blob)
            except (OSError, LogRecordError):
                # Read whole again and verified by the stage's own loader, which says what
                # is wrong with the file its way (the active's: damage noted, its mend told).
                with self._lock:
                    if self._noted.get(path) is noted:
                        del self._noted[path]
        if result is None:
            result = self._load(path, ident, load)
        return [r for r in result.records if r.type is RecordType.PART and _of(r) == blob]

    def _read_alone(self, path: Path, noted: _Noted, blob: BlobId) -> list[LogRecord]:
        where = noted.parts.get(blob, [])
        out = []
        if where:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)  # no file object: preads only
            try:
                for offset, size in where:
                    data = os.pread(fd, size, offset)
                    out.append(record_at(data, noted.generation, offset, noted.salt))
            finally:
                os.close(fd)
            with self._lock:
                self.records_read += len(out)
        return out

    def forget_below(self, generation: int) -> None:
        """Let go of the generations below `generation` (the stage will not read them)."""
        with self._lock:
            for path in [p for p, (_, r) in self._kept.items() if r.header.generation < generation]:
                self._drop(path)
            for path in [p for p, n in self._noted.items() if n.generation < generation]:
                del self._noted[path]

    def _drop(self, path: Path) -> None:
        kept = self._kept.pop(path, None)
        if kept is not None:
            self._bytes -= kept[1].file_size

    def __len__(self) -> int:
        """How many generations' bytes are kept."""
        with self._lock:
            return len(self._kept)


def _of(rec: LogRecord) -> BlobId:
    return decode_part(rec)[0]


def record_at(data: bytes, generation: int, offset: int, salt: int) -> LogRecord:
    """The one record `data` holds whole, read from `offset` of generation `generation`
    (whose header's salt is `salt`), checked as a scan checks each record: its length, its
    CRC32C, its type.  LogRecordError if it is not that record whole."""
    where = f"generation {generation} offset {offset}"
    if len(data) < FRAME_OVERHEAD:
        raise LogRecordError(f"{where}: record cut short ({len(data)} bytes)")
    length, stored = _FRAME.unpack_from(data)
    if length != len(data) - _FRAME.size:
        raise LogRecordError(f"{where}: bad record length {length}")
    view = memoryview(data)
    if crc32c.crc32c(view[_FRAME.size :], crc32c.crc32c(view[:4])) ^ salt != stored:
        raise LogRecordError(f"{where}: record checksum mismatch")
    rtype, micros = _BODY.unpack_from(data, _FRAME.size)
    if rtype != RecordType.PART:
        raise LogRecordError(f"{where}: not a PART record")
    return LogRecord(
        RecordType.PART, from_micros(micros), view[FRAME_OVERHEAD:], generation, offset, len(data)
    )
