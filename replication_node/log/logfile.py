"""The on-disk format of a transaction log file, and nothing else (no I/O policy).

A log file is a 512-byte header followed by records::

    header  magic "DGLOG\\r\\n\\x1a" | version u16 | header size u16 | generation u32
            | database signature 16B | log signature 16B | creation time i64 (µs UTC)
            | previous generation's creation time i64 (µs, 0 for generation 1)
            | log file size u32 | CRC32C u32 of everything before it | zero padding
    record  body length u32 | CRC32C u32 of (length field + body), XOR the header's salt | body
    body    type u8 | commit time i64 (µs UTC) | payload

Record types: TRANSACTION (payload = JSON `{"ops": [...]}`, one committed transaction,
and `"blobs": [...]` when it commits item bodies staged in PART records before it: see
`spanning.py`), PART (one piece of a staged body: blob id, part index, bytes), ABORT (a
staged body no commit will use), CARRIED (JSON: the staged bodies still pending when the
generation was created; its first record, written with its header), DIGEST (payload = JSON
`{"generation": W, "digest": hex}`: the active's database content
digest as of generation W, written just before CLOSE at a roll; copies compare theirs),
PAD (zeros: room no record uses, version 2) and CLOSE (empty payload; written once, as the
last record, when the generation is closed; its time is the generation's close time).  A
closed generation therefore proves its own completeness: it must end with exactly one CLOSE
record at end of file, so a truncated transfer is caught by inspection.  The open log
`E00.log` has the same header (with the generation it will become) and no CLOSE record yet.

A prepared file (`PreparedHeader`, `writer.py`'s roll) is made ahead of a roll to hold the
next generation: a 512-byte header of its own (magic "DGPREP\r\n", the generation and stream it
was prepared for, CRC32C).  The roll writes the generation's real header over it; the writer
names it (E00.log, then its generation's name) only once it is fsync'd.  Earlier versions
named it E00.log first and fsync'd it after, so a power loss could leave an E00.log whose
header is still the prepared one: never fsync'd since, so nothing in it was acknowledged
(recovery replaces it).  It is never a generation: `LogHeader.decode` refuses it by its
magic.

Format version 2 (written since issue 29's reused log files; version 1 is read as before):
- **The salt.** Each record's stored checksum is its CRC32C XOR the generation's salt, the
  CRC32C of its header (`LogHeader.salt`; 0 in version 1).  A generation may be written over
  a file that exists already (a spare, `spares.py`: written whole beforehand, so that a
  roll's fsync need not wait for the journal to commit new blocks and a new size).  Past the
  open log's last record lie the file's old bytes: zeros from a spare (`ScanResult.unwritten`,
  room not written yet, not a torn tail), but whatever they are, a record among them, framed
  as well as any, was salted with another header (another generation, or the same one
  created at another time), so its checksum fails and the scan stops there, as at any torn
  tail.  Without the salt, recovery after a crash could take a record left in a reused file
  for one written since.
- **Every closed generation is `log_file_size` bytes.**  The roll pads the generation with a
  PAD record up to its DIGEST and CLOSE records, so CLOSE ends the file at exactly
  `log_file_size`, as the seeds' logs are always 1 MiB: a generation written over a spare
  never changes the file's size (`fdatasync` then has no metadata to commit), and readers
  keep their rule (CLOSE last, at end of file).  A sealed open log (`seal_open_log`, a copy
  keeping a lost active's E00.log) is not padded: readers take any length.

The LSN of a record is (generation, byte offset of its frame in the file).  The chain of
creation times (each header carries its predecessor's) is what lets inspection and replay
detect a log from the wrong sequence, as the seeds describe.
"""

from __future__ import annotations

import re
import struct
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import IntEnum
from pathlib import Path

import crc32c
import orjson

from dag_common.model import Position
from replication_node.errors import LogHeaderError, LogRecordError
from replication_node.log.sizes import HEADER_SIZE

MAGIC = b"DGLOG\r\n\x1a"
PREPARED_MAGIC = b"DGPREP\r\n"
FORMAT_VERSION = 2  # what the writer writes
READABLE_VERSIONS = (1, 2)
OPEN_LOG_NAME = "E00.log"
# Files prepared to become the next E00.log: this prefix and a unique suffix (hidden, and
# no generation's name: nothing that lists generations or globs E0*.log sees them).
PREPARED_PREFIX = ".E00.prepared."
_HEADER = struct.Struct(">8sHHI16s16sqqI")
_PREPARED = struct.Struct(">8sHHI16s16s")
_CRC = struct.Struct(">I")
_FRAME = struct.Struct(">II")
_BODY = struct.Struct(">Bq")
FRAME_OVERHEAD = _FRAME.size + _BODY.size
# A body is never this large: a frame claiming more is corrupt, not a huge record.
MAX_BODY = 64 * 1024 * 1024
_CLOSED_NAME = re.compile(r"^E([0-9A-F]{8})\.log$")


# The content digest's definition the DIGEST records of this code carry (`ContentDigest`).
DIGEST_VERSION = 2


class RecordType(IntEnum):
    TRANSACTION = 1
    CLOSE = 2
    DIGEST = 3
    PART = 4
    ABORT = 5
    CARRIED = 6
    PAD = 7


@dataclass(frozen=True, slots=True)
class ContentDigest:
    """A DIGEST record: the database content digest as of `generation`, by the definition
    `version` names (2: an item's body counted by its hash, `dag_common.mailbox_digest`;
    a record without one is 1, the bodies themselves; copies compare only the current)."""

    generation: int
    digest: str
    version: int = DIGEST_VERSION

    def encode(self, when: datetime, *, salt: int = 0) -> bytes:
        payload = orjson.dumps(
            {"generation": self.generation, "digest": self.digest, "v": self.version}
        )
        return encode_record(RecordType.DIGEST, when, payload, salt=salt)


def closed_log_name(generation: int) -> str:
    """File name of a closed generation: `E` and 8 upper-case hex digits, e.g. E0000000A.log."""
    if not 1 <= generation <= 0xFFFFFFFF:
        raise ValueError(f"generation {generation} out of range")
    return f"E{generation:08X}.log"


def parse_closed_log_name(name: str) -> int | None:
    """The generation a closed-log file name stands for, or None if it is not one."""
    match = _CLOSED_NAME.match(name)
    if not match:
        return None
    generation = int(match.group(1), 16)
    return generation if generation >= 1 else None


def to_micros(moment: datetime) -> int:
    return int(moment.timestamp() * 1_000_000)


def from_micros(value: int) -> datetime:
    return datetime.fromtimestamp(value / 1_000_000, tz=UTC)


@dataclass(frozen=True, slots=True)
class LogHeader:
    """The identity of one generation of one log stream."""

    generation: int
    database_signature: uuid.UUID
    log_signature: uuid.UUID
    creation_time: datetime
    prev_creation_time: datetime | None
    log_file_size: int
    version: int = FORMAT_VERSION

    @property
    def salt(self) -> int:
        """What every record's checksum in this generation is XOR'd with: the header's own
        CRC32C (version 2), 0 in version 1."""
        return crc32c.crc32c(self._fixed()) if self.version >= 2 else 0

    def encode(self) -> bytes:
        """The 512-byte header with its checksum."""
        head = self._fixed()
        head += _CRC.pack(crc32c.crc32c(head))
        return head.ljust(HEADER_SIZE, b"\0")

    def _fixed(self) -> bytes:
        prev = to_micros(self.prev_creation_time) if self.prev_creation_time else 0
        return _HEADER.pack(
            MAGIC,
            self.version,
            HEADER_SIZE,
            self.generation,
            self.database_signature.bytes,
            self.log_signature.bytes,
            to_micros(self.creation_time),
            prev,
            self.log_file_size,
        )

    @classmethod
    def decode(cls, data: bytes) -> LogHeader:
        """Parse and verify a header; LogHeaderError says what is wrong."""
        if len(data) < HEADER_SIZE:
            raise LogHeaderError(f"file too short for a log header ({len(data)} bytes)")
        fixed = data[: _HEADER.size]
        (stored_crc,) = _CRC.unpack_from(data, _HEADER.size)
        magic, version, size, gen, dbsig, logsig, created, prev, lsize = _HEADER.unpack(fixed)
        if magic == PREPARED_MAGIC:
            raise LogHeaderError(
                "a log file prepared ahead of a roll, its header never written (nothing in it "
                "was acknowledged)"
            )
        if magic != MAGIC:
            raise LogHeaderError("not a log file (bad magic)")
        if crc32c.crc32c(fixed) != stored_crc:
            raise LogHeaderError("log header checksum mismatch")
        if any(data[_HEADER.size + _CRC.size : HEADER_SIZE]):
            # The padding is outside the checksum: anything but zeros there is a forgery.
            raise LogHeaderError("log header checksum mismatch (non-zero padding)")
        if version not in READABLE_VERSIONS:
            raise LogHeaderError(f"unsupported log format version {version}")
        if size != HEADER_SIZE:
            raise LogHeaderError(f"unexpected header size {size}")
        if gen < 1:
            raise LogHeaderError("generation 0 in header")
        return cls(
            generation=gen,
            database_signature=uuid.UUID(bytes=dbsig),
            log_signature=uuid.UUID(bytes=logsig),
            creation_time=from_micros(created),
            prev_creation_time=from_micros(prev) if prev else None,
            log_file_size=lsize,
            version=version,
        )


@dataclass(frozen=True, slots=True)
class PreparedHeader:
    """The header of a file prepared to hold `generation` of a stream.

    Written before the roll that uses it; that roll writes the generation's `LogHeader` over
    it (the same 512 bytes), and the file is named only once fsync'd.  An E00.log still
    carrying this header after a crash (left by an earlier version, which named the file
    first) was never fsync'd after its roll, so nothing in it was acknowledged: recovery
    replaces it.  Its own checksum keeps a torn or forged one from passing as that.
    """

    generation: int
    database_signature: uuid.UUID
    log_signature: uuid.UUID

    def encode(self) -> bytes:
        head = _PREPARED.pack(
            PREPARED_MAGIC,
            FORMAT_VERSION,
            HEADER_SIZE,
            self.generation,
            self.database_signature.bytes,
            self.log_signature.bytes,
        )
        head += _CRC.pack(crc32c.crc32c(head))
        return head.ljust(HEADER_SIZE, b"\0")

    @classmethod
    def decode(cls, data: bytes) -> PreparedHeader | None:
        """The prepared header `data` begins with; None if it begins with anything else (a
        log header, a torn or foreign file: `LogHeader.decode` says which).  LogHeaderError
        if it has the prepared magic but is not whole."""
        if not data.startswith(PREPARED_MAGIC):
            return None
        if len(data) < HEADER_SIZE:
            raise LogHeaderError(f"prepared log file too short ({len(data)} bytes)")
        (stored,) = _CRC.unpack_from(data, _PREPARED.size)
        if crc32c.crc32c(data[: _PREPARED.size]) != stored or any(
            data[_PREPARED.size + _CRC.size : HEADER_SIZE]
        ):
            raise LogHeaderError("prepared log file: header checksum mismatch")
        _, version, size, gen, dbsig, logsig = _PREPARED.unpack_from(data)
        if version not in READABLE_VERSIONS or size != HEADER_SIZE or gen < 1:
            raise LogHeaderError(f"prepared log file: version {version}, size {size}, gen {gen}")
        return cls(gen, uuid.UUID(bytes=dbsig), uuid.UUID(bytes=logsig))


@dataclass(frozen=True, slots=True)
class LogRecord:
    """One record of a log file, with its position (its LSN).  Read from a file, `payload`
    is a view of the file's bytes where they are (`iter_records`): a copy of each record cost
    inspection nine tenths of its time, the allocator giving the memory of each file's
    records back to the system and faulting it in again for the next (bench/shipping.py,
    issue 33).  `has` looks for bytes in it where it is."""

    type: RecordType
    commit_time: datetime
    payload: bytes | memoryview
    generation: int
    offset: int
    size: int

    @property
    def position(self) -> Position:
        """Where the record is in the stream.  Made when asked, not stored: a scan makes
        one LogRecord per record, and most are never asked."""
        return Position(self.generation, self.offset)

    def has(self, needle: bytes) -> bool:
        """Whether `needle` occurs in the payload (searched in place, without a copy)."""
        return re.search(re.escape(needle), self.payload) is not None

    @property
    def ops(self) -> list[object]:
        """The operations of a TRANSACTION record as its JSON has them (a count, a look at
        the file; what they mean is `operations.decode_record_ops`)."""
        ops: list[object] = orjson.loads(self.payload)["ops"]
        return ops


def encode_record(
    rtype: RecordType, commit_time: datetime, payload: bytes = b"", *, salt: int = 0
) -> bytes:
    """One framed record: length, CRC32C over length and body (XOR `salt`: the header's of
    the generation it goes into, `LogHeader.salt`), body."""
    return b"".join(record_pieces(rtype, commit_time, payload, salt=salt))


def record_pieces(
    rtype: RecordType, commit_time: datetime, *payload: bytes | memoryview, salt: int = 0
) -> list[bytes | memoryview]:
    """`encode_record` as the pieces to write one after the other, its payload given in
    pieces too: a staged body's part is framed without being copied first.  The pieces are
    the length field, the checksum field, the body's head and the payload's pieces."""
    head = _BODY.pack(int(rtype), to_micros(commit_time))
    length = _CRC.pack(len(head) + sum(len(p) for p in payload))
    crc = crc32c.crc32c(head, crc32c.crc32c(length))
    for piece in payload:
        crc = crc32c.crc32c(piece, crc)
    return [length, _CRC.pack(crc ^ salt), head, *payload]


def salted(pieces: list[bytes | memoryview], salt: int) -> list[bytes | memoryview]:
    """A record encoded without a salt (whole, or as `record_pieces` gives it), salted for
    the generation it is written into: its checksum field XOR `salt`.  The writer salts each
    record where it places it, since a commit's record is encoded before anyone knows which
    generation it lands in (a roll may come first)."""
    if not salt:
        return pieces
    first = pieces[0]
    if len(first) == _CRC.size:  # record_pieces: the length field, then the checksum
        (crc,) = _CRC.unpack(pieces[1])
        return [first, _CRC.pack(crc ^ salt), *pieces[2:]]
    (crc,) = _CRC.unpack_from(first, _CRC.size)
    whole = bytes(first)
    return [whole[:4] + _CRC.pack(crc ^ salt) + whole[8:], *pieces[1:]]


def encode_pad(size: int, commit_time: datetime, *, salt: int = 0) -> bytes:
    """A PAD record of exactly `size` bytes, frame included (at least FRAME_OVERHEAD)."""
    if size < FRAME_OVERHEAD:
        raise ValueError(f"a PAD record takes at least {FRAME_OVERHEAD} bytes, not {size}")
    return encode_record(RecordType.PAD, commit_time, bytes(size - FRAME_OVERHEAD), salt=salt)


def encode_transaction(
    ops: Sequence[object],
    commit_time: datetime,
    blobs: list[list[int]] | None = None,
    *,
    salt: int = 0,
) -> bytes:
    """A TRANSACTION record carrying `ops`, the JSON objects of its operations
    (`operations.encode_record_ops`), and the staged bodies it commits (`spanning.py`)."""
    payload = orjson.dumps({"ops": ops, "blobs": blobs} if blobs else {"ops": ops})
    return encode_record(RecordType.TRANSACTION, commit_time, payload, salt=salt)


# The most a DIGEST record takes (a generation of 10 digits, 64 hex digits).
DIGEST_RECORD_MAX = len(ContentDigest(2**32, "0" * 64).encode(datetime.now(UTC)))


@dataclass(frozen=True, slots=True)
class ScanResult:
    """What a scan of a log file found: its records and where the valid data ends."""

    header: LogHeader
    records: tuple[LogRecord, ...]
    valid_end: int
    file_size: int
    tail_error: str | None  # None too when all past `valid_end` is zeros (`unwritten`)

    @property
    def unwritten(self) -> int:
        """Bytes of zeros past the last record that no record claims: room of a file written
        over a spare (`spares.py`) not written yet; not a torn tail."""
        return self.file_size - self.valid_end if self.tail_error is None else 0

    @property
    def closed(self) -> bool:
        """Whether the file ends with its CLOSE record."""
        return bool(self.records) and self.records[-1].type is RecordType.CLOSE

    @property
    def close_time(self) -> datetime | None:
        return self.records[-1].commit_time if self.closed else None

    @property
    def transactions(self) -> list[LogRecord]:
        return [r for r in self.records if r.type is RecordType.TRANSACTION]

    @property
    def digests(self) -> list[ContentDigest]:
        """The DIGEST records (LogRecordError if one cannot be decoded)."""
        out = []
        for r in self.records:
            if r.type is RecordType.DIGEST:
                try:
                    fields = orjson.loads(r.payload)
                    out.append(
                        ContentDigest(
                            int(fields["generation"]),
                            str(fields["digest"]),
                            int(fields.get("v", 1)),
                        )
                    )
                except (ValueError, KeyError, TypeError) as exc:
                    raise LogRecordError(
                        f"generation {r.generation} offset {r.offset}: undecodable digest"
                    ) from exc
        return out


def iter_records(data: bytes, generation: int, salt: int = 0) -> Iterator[LogRecord | str]:
    """Yield the valid records after the header; a final string says why scanning stopped.
    `salt`: the header's (`LogHeader.salt`)."""
    pos = HEADER_SIZE
    end = len(data)
    view = memoryview(data)  # the checksums read the bytes where they are, without a copy
    closed = False
    while pos < end:
        if closed:
            yield f"data after the CLOSE record at offset {pos}"
            return
        if end - pos < _FRAME.size:
            yield f"torn record frame at offset {pos}"
            return
        length, stored = _FRAME.unpack_from(data, pos)
        if length < _BODY.size or length > MAX_BODY:
            yield f"bad record length {length} at offset {pos}"
            return
        body_end = pos + _FRAME.size + length
        if body_end > end:
            yield f"record at offset {pos} cut short ({end - pos} of {body_end - pos} bytes)"
            return
        computed = crc32c.crc32c(view[pos : pos + 4])
        computed = crc32c.crc32c(view[pos + _FRAME.size : body_end], computed)
        if computed ^ salt != stored:
            yield f"record checksum mismatch at offset {pos}"
            return
        rtype_raw, micros = _BODY.unpack_from(data, pos + _FRAME.size)
        try:
            rtype = RecordType(rtype_raw)
        except ValueError:
            yield f"unknown record type {rtype_raw} at offset {pos}"
            return
        closed = rtype is RecordType.CLOSE
        yield LogRecord(
            type=rtype,
            commit_time=from_micros(micros),
            payload=view[pos + _FRAME.size + _BODY.size : body_end],
            generation=generation,
            offset=pos,
            size=body_end - pos,
        )
        pos = body_end


def scan(data: bytes) -> ScanResult:
    """Parse a whole log file, stopping at the first invalid record (header must be valid)."""
    header = LogHeader.decode(data)
    records: list[LogRecord] = []
    tail_error = None
    valid_end = HEADER_SIZE
    for item in iter_records(data, header.generation, header.salt):
        if isinstance(item, str):
            tail_error = item
            break
        records.append(item)
        valid_end = item.offset + item.size
    closed = bool(records) and records[-1].type is RecordType.CLOSE
    if tail_error is not None and not closed and not bytes(data[valid_end:]).strip(b"\0"):
        tail_error = None  # zeros: a spare's room not written yet, nothing torn
    return ScanResult(header, tuple(records), valid_end, len(data), tail_error)


def chain_problem(prev: LogHeader | None, header: LogHeader, log_signature: object) -> str | None:
    """Why `header` cannot follow `prev` in the stream `log_signature`, or None if it can.

    The seeds' sequence checks: same log signature, next generation, and the header's
    previous creation time equal to the predecessor's creation time.
    """
    if header.log_signature != log_signature:
        return (
            f"generation {header.generation} belongs to log stream {header.log_signature}, "
            f"not {log_signature}"
        )
    if prev is None:
        return None
    if header.generation != prev.generation + 1:
        return f"generation {header.generation} does not follow generation {prev.generation}"
    if header.prev_creation_time != prev.creation_time:
        return (
            f"generation {header.generation} does not chain to generation {prev.generation} "
            "(previous creation time differs)"
        )
    return None


def read_closed(path: Path) -> bytes:
    """A closed generation's bytes to scan, read whole.  Not mapped (`mmap`), although that
    saves a copy and its page faults: a mapped file that is cut short under the mapping (a
    disk's read error, a file an operator or a fault truncated in place) kills the process
    with SIGBUS where a read raises an error the replay and the flush report and handle."""
    return path.read_bytes()


def read_header(path: Path) -> LogHeader:
    """The verified header of the log file at `path`."""
    with open(path, "rb") as f:
        return LogHeader.decode(f.read(HEADER_SIZE))


def close_time_of(path: Path) -> datetime | None:
    """The close time of a closed generation, from its final CLOSE record alone (no scan of
    the records before it); None if the file does not end with a valid CLOSE record."""
    size = _FRAME.size + _BODY.size
    with open(path, "rb") as f:
        try:
            salt = LogHeader.decode(f.read(HEADER_SIZE)).salt
        except LogHeaderError:
            return None
        f.seek(0, 2)
        if f.tell() < HEADER_SIZE + size:
            return None
        f.seek(-size, 2)
        tail = f.read(size)
    length, stored = _FRAME.unpack_from(tail)
    if length != _BODY.size or crc32c.crc32c(tail[:4] + tail[_FRAME.size :]) ^ salt != stored:
        return None
    rtype, micros = _BODY.unpack_from(tail, _FRAME.size)
    return from_micros(micros) if rtype == RecordType.CLOSE else None


def anchor_header(log_dir: Path, generation: int) -> LogHeader | None:
    """The header of closed generation `generation` in `log_dir`, if it is there: the anchor
    against which the next generation's place in the sequence is checked."""
    path = log_dir / closed_log_name(generation) if generation >= 1 else None
    return read_header(path) if path is not None and path.exists() else None


def verify_closed(data: bytes, expected_generation: int | None = None) -> ScanResult:
    """Parse a closed generation and insist that it is whole: every record valid, CLOSE last.

    Raises LogHeaderError or LogRecordError; never returns a partial result.
    """
    result = scan(data)
    if expected_generation is not None and result.header.generation != expected_generation:
        raise LogHeaderError(
            f"header says generation {result.header.generation}, "
            f"file name says {expected_generation}"
        )
    if result.tail_error:
        raise LogRecordError(f"generation {result.header.generation}: {result.tail_error}")
    if not result.closed:
        raise LogRecordError(
            f"generation {result.header.generation} has no CLOSE record (truncated?)"
        )
    return result


def seal_open_log(data: bytes) -> tuple[bytes, ScanResult] | None:
    """The closed generation an open log E00.log stands for: its header and every valid
    record, then a CLOSE record at the last record's commit time.  None if it holds no
    transaction (a header alone: nothing to keep).

    This is how a copy taking over keeps a lost active's open log (Attempt Copy Last Logs):
    the records past the first invalid one are a torn tail the active never acknowledged
    (it acknowledges only after the fsync), so they are left out.  The result is exactly
    the open log's valid bytes plus one record, so the old active's own E00.log is a prefix
    of it, which is what lets that node rejoin as a passive copy without a reseed.  An
    E00.log that is still a prepared file (a crash cut the roll that opened it, before its
    header reached the disk) holds nothing acknowledged: None as well."""
    if PreparedHeader.decode(data) is not None:
        return None
    result = scan(data)
    if not result.transactions:
        return None
    if result.closed:  # a roll cut by a crash after its CLOSE record: closed already
        return bytes(data[: result.valid_end]), result
    close_time = result.records[-1].commit_time
    closing = encode_record(RecordType.CLOSE, close_time, salt=result.header.salt)
    sealed = bytes(data[: result.valid_end]) + closing
    return sealed, result
