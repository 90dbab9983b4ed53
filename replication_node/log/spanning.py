"""Transactions larger than a log generation: item bodies staged in PART records, committed
by one ordinary TRANSACTION record after their last part.

Generations stay at `log_file_size` (the seeds' 1 MiB: a small loss window); a body too large
for the room a generation has is *staged* first: written as PART records, as many as it
takes, across as many generations as it takes, interleaved with other transactions.  The
transaction that uses it is then committed as an ordinary TRANSACTION record whose `blobs`
list names each staged body by (first part's generation, offset, size, CRC32C) and whose
operations carry `"body_blob": i` where the body would be.  That record is the transaction's
end: it is acknowledged, replayed, announced and counted as any commit is, and nothing of the
transaction exists for a reader before it.

Why staged bodies and one commit record rather than one record continued across files: the
active hands out change numbers in log order (readers sync by `since_change`, the ceiling
counts on it), and numbers are handed out only once the body is durable, just before the
small commit record; small commits are not held behind a 36 MiB one (its parts interleave
with them, a slice per group commit); and the commit record is whole in one generation, as
every other, so every stage that already reads whole records keeps reading them.

Records (`logfile.py` frames and checksums them like any other):

    PART     blob generation u32 | blob offset u32 | part index u32 | bytes
             A body's id is the LSN of its first part (index 0), which therefore names
             itself; every later part names where its body began.
    ABORT    blob generation u32 | blob offset u32: a staged body no commit will use (a write
             refused after staging, a switchover, recovery after a crash).
    CARRIED  JSON {"pending": [[generation, offset, parts, size, crc32c], ...]}: the bodies
             pending when the generation was created, written with its header (`logdir`).

Rules every stage checks alike (`track`): a first part sits at the LSN its id names and
starts a body not pending; a later part continues a pending body with the next index; a
commit names pending bodies with exactly the size and CRC32C their parts add up to and ends
them; an ABORT ends a pending body; a generation created while bodies were pending begins
with a CARRIED record listing exactly them, as the generation before it left them (checked
whenever that one is known).  So a closed generation still proves it is whole, and a
continuation is checked against its predecessor.

Logs Required: after generation W, the lowest generation holding a part of a body still
pending at W's end (`required_from`; 0 when none).  Recovery, replay, truncation, seeding and
backups keep or fetch the log from there: a later commit reads those parts back from disk
(`BodyReader`), never from memory.
"""

from __future__ import annotations

import codecs
import functools
import hashlib
import struct
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime

import crc32c
import orjson

from dag_common.counted_text import is_utf8, known
from dag_common.model import Position
from replication_node.errors import LogRecordError
from replication_node.log.logfile import (
    FRAME_OVERHEAD,
    HEADER_SIZE,
    LogRecord,
    RecordType,
    ScanResult,
    encode_record,
    record_pieces,
)

_ID = struct.Struct(">II")
_PART = struct.Struct(">III")
# The key a commit names its staged bodies by; a body's text holding it is escaped (`\"`),
# so in a commit record it is only ever the key.
BLOBS_KEY = b'"blobs":'
# What a PART record costs beyond its bytes.
PART_OVERHEAD = FRAME_OVERHEAD + _PART.size


BlobId = Position
"""A staged body: the position of its first part in the stream (`generation:offset` in
messages).  No epoch: a body is named only within the stream its parts are in."""


@dataclass(frozen=True, slots=True)
class BlobRef:
    """A staged body as its commit names it."""

    id: BlobId
    size: int
    crc: int

    def encode(self) -> list[int]:
        return [self.id.generation, self.id.offset, self.size, self.crc]


@dataclass(frozen=True, slots=True)
class PendingBlob:
    """A staged body not yet committed or aborted: its parts so far."""

    id: BlobId
    parts: int = 0
    size: int = 0
    crc: int = 0

    def add(self, chunk: bytes | memoryview) -> PendingBlob:
        return PendingBlob(
            self.id, self.parts + 1, self.size + len(chunk), crc32c.crc32c(chunk, self.crc)
        )

    def ref(self) -> BlobRef:
        return BlobRef(self.id, self.size, self.crc)

    def encode(self) -> list[int]:
        return [self.id.generation, self.id.offset, self.parts, self.size, self.crc]


Pending = Mapping[BlobId, PendingBlob]


def required_from(pending: Pending) -> int:
    """Logs Required: the lowest generation holding a part of a pending body (0: none)."""
    return min((b.generation for b in pending), default=0)


# ---- encoding ------------------------------------------------------------------------------


# The records are encoded unsalted by default: the writer salts each for the generation it
# lands in (`logfile.salted`); `salt` is for a record written straight into a known one.


def encode_part(
    blob: BlobId, index: int, chunk: bytes | memoryview, when: datetime, *, salt: int = 0
) -> bytes:
    return b"".join(part_pieces(blob, index, chunk, when, salt=salt))


def part_pieces(
    blob: BlobId, index: int, chunk: bytes | memoryview, when: datetime, *, salt: int = 0
) -> list[bytes | memoryview]:
    """A PART record as pieces to write one after the other (its chunk not copied)."""
    head = _PART.pack(blob.generation, blob.offset, index)
    return record_pieces(RecordType.PART, when, head, chunk, salt=salt)


def encode_abort(blob: BlobId, when: datetime, *, salt: int = 0) -> bytes:
    payload = _ID.pack(blob.generation, blob.offset)
    return encode_record(RecordType.ABORT, when, payload, salt=salt)


def encode_carried(pending: Pending, when: datetime, *, salt: int = 0) -> bytes:
    """The CARRIED record for `pending` (b"" when nothing is pending: no record)."""
    if not pending:
        return b""
    rows = [pending[b].encode() for b in sorted(pending)]
    return encode_record(RecordType.CARRIED, when, orjson.dumps({"pending": rows}), salt=salt)


def decode_part(rec: LogRecord) -> tuple[BlobId, int, bytes]:
    if len(rec.payload) < _PART.size:
        raise LogRecordError(f"generation {rec.generation} offset {rec.offset}: short PART record")
    gen, off, index = _PART.unpack_from(rec.payload)
    return BlobId(gen, off), index, rec.payload[_PART.size :]


def decode_abort(rec: LogRecord) -> BlobId:
    if len(rec.payload) != _ID.size:
        raise LogRecordError(f"generation {rec.generation} offset {rec.offset}: bad ABORT record")
    return BlobId(*_ID.unpack(rec.payload))


def decode_carried(rec: LogRecord) -> dict[BlobId, PendingBlob]:
    try:
        rows = orjson.loads(rec.payload)["pending"]
        out = {}
        for gen, off, parts, size, crc in rows:
            blob = BlobId(int(gen), int(off))
            out[blob] = PendingBlob(blob, int(parts), int(size), int(crc))
        return out
    except (ValueError, KeyError, TypeError) as exc:
        raise LogRecordError(
            f"generation {rec.generation} offset {rec.offset}: undecodable CARRIED record"
        ) from exc


def decode_transaction(rec: LogRecord) -> tuple[list[object], tuple[BlobRef, ...]]:
    """A TRANSACTION record's operations as its JSON has them (`operations.decode_record_ops`
    types them), and the staged bodies it commits."""
    try:
        fields = orjson.loads(rec.payload)
        ops = fields["ops"]
        refs = tuple(
            BlobRef(BlobId(int(g), int(o)), int(s), int(c))
            for g, o, s, c in fields.get("blobs") or ()
        )
    except (ValueError, KeyError, TypeError) as exc:
        raise LogRecordError(
            f"generation {rec.generation} offset {rec.offset}: undecodable record"
        ) from exc
    if not isinstance(ops, list):
        raise LogRecordError(f"generation {rec.generation} offset {rec.offset}: undecodable record")
    return ops, refs


# ---- the rules -----------------------------------------------------------------------------


@dataclass(frozen=True)
class GenerationSpans:
    """What one generation does to the staged bodies."""

    generation: int
    carried: Pending  # pending when it was created (its CARRIED record)
    pending: Pending  # pending at its end
    begun: tuple[BlobId, ...] = ()
    committed: tuple[BlobRef, ...] = ()
    aborted: tuple[BlobId, ...] = ()
    # TRANSACTION offset -> the bodies it commits
    commits: Mapping[int, tuple[BlobRef, ...]] = field(default_factory=dict)

    @property
    def required_from(self) -> int:
        return required_from(self.pending)


def track(result: ScanResult, before: Pending | None) -> GenerationSpans:
    """Check the staged bodies of one generation against the rules (LogRecordError naming the
    first broken one) and say what it leaves pending.  `before`: what the generation before
    it left pending, or None when that is not known here (then its CARRIED record is taken
    as it stands)."""
    gen = result.header.generation
    records = result.records
    carried: dict[BlobId, PendingBlob] = {}
    if records and records[0].type is RecordType.CARRIED:
        carried = decode_carried(records[0])
    if before is not None and dict(before) != carried:
        raise LogRecordError(
            f"generation {gen} carries staged bodies {_names(carried)} but generation "
            f"{gen - 1} left {_names(before)} pending"
        )
    pending = dict(carried)
    begun: list[BlobId] = []
    committed: list[BlobRef] = []
    aborted: list[BlobId] = []
    commits: dict[int, tuple[BlobRef, ...]] = {}
    for index, rec in enumerate(records):
        where = f"generation {gen} offset {rec.offset}"
        if rec.type is RecordType.CARRIED:
            if index != 0 or rec.offset != HEADER_SIZE:
                raise LogRecordError(f"{where}: a CARRIED record that is not the first record")
        elif rec.type is RecordType.PART:
            blob, part, chunk = decode_part(rec)
            if part == 0:
                if blob != BlobId(gen, rec.offset):
                    raise LogRecordError(f"{where}: a first part naming body {blob}, not itself")
                if blob in pending:
                    raise LogRecordError(f"{where}: body {blob} begun twice")
                begun.append(blob)
                pending[blob] = PendingBlob(blob).add(chunk)
                continue
            state = pending.get(blob)
            if state is None:
                raise LogRecordError(
                    f"{where}: part {part} continues body {blob}, which is not pending"
                )
            if part != state.parts:
                raise LogRecordError(
                    f"{where}: part {part} of body {blob} follows part {state.parts - 1}"
                )
            pending[blob] = state.add(chunk)
        elif rec.type is RecordType.ABORT:
            blob = decode_abort(rec)
            if pending.pop(blob, None) is None:
                raise LogRecordError(f"{where}: ABORT of body {blob}, which is not pending")
            aborted.append(blob)
        elif rec.type is RecordType.TRANSACTION:
            if not rec.has(BLOBS_KEY):  # most commits stage nothing: no JSON parse
                continue
            _, refs = decode_transaction(rec)
            for ref in refs:
                state = pending.pop(ref.id, None)
                if state is None:
                    raise LogRecordError(f"{where}: commits body {ref.id}, which is not pending")
                if state.ref() != ref:
                    raise LogRecordError(
                        f"{where}: commits body {ref.id} of {ref.size} bytes (CRC32C "
                        f"{ref.crc:08x}); its parts hold {state.size} bytes (CRC32C "
                        f"{state.crc:08x})"
                    )
                committed.append(ref)
            if refs:
                commits[rec.offset] = refs
    return GenerationSpans(
        gen, carried, pending, tuple(begun), tuple(committed), tuple(aborted), commits
    )


def _names(pending: Pending) -> str:
    return "{" + ", ".join(str(b) for b in sorted(pending)) + "}"


# ---- reading bodies back -------------------------------------------------------------------

# Loads one generation's records (a closed generation, or the open log): LogRecordError or
# OSError if it cannot.
Loader = Callable[[int], ScanResult]
# One body's PART records in one generation, each checked (`generation_cache.records`).
PartRecords = Callable[[int, BlobId], Iterable[LogRecord]]
# A UTF-8 check's slice (`counted_text`'s): under the allocator's mmap threshold.
_CHECK_SLICE = 64 * 1024

# A body this large or larger is given to a reader `as_bytes` as its parts, to be read again
# as its row is written (`BodyParts`), not whole.
IN_PLACE = 1 << 20


@dataclass(frozen=True)
class BodyParts:
    """A staged body's `size` UTF-8 bytes, given a part at a time by `parts()` (read from
    the log as its row is written: `storage/body_parts.py`)."""

    size: int
    parts: Callable[[], Iterable[bytes | memoryview]]


class BodyReader:
    """Reads staged bodies back from the log files, one generation at a time: only the body
    being read, never the log, is held in memory."""

    def __init__(
        self, load: Loader, *, as_bytes: bool = False, records: PartRecords | None = None
    ) -> None:
        """`as_bytes`: `bodies` gives each body as its UTF-8 bytes alone, no text (for a
        reader whose every body goes into a row and nowhere else: a passive's replay).
        `records`: a body's PART records in a generation, read without the generation's
        other records (`generation_cache`); without it, from the whole generation `load`s."""
        self._load = load
        self._as_bytes = as_bytes
        self._records = records
        self._cached: tuple[int, ScanResult] | None = None

    def _generation(self, gen: int) -> ScanResult:
        if self._cached is None or self._cached[0] != gen:
            self._cached = (gen, self._load(gen))
        return self._cached[1]

    def _part_records(self, gen: int, blob: BlobId) -> Iterable[LogRecord]:
        """The records of generation `gen` holding `blob`'s parts, among others or not."""
        if self._records is not None:
            return self._records(gen, blob)
        return self._generation(gen).records

    def read(self, ref: BlobRef, through: int) -> bytearray:
        """The bytes of `ref`, from its first part up to generation `through` at most;
        LogRecordError if they are not all there or do not add up to its size and CRC32C.
        Read into one buffer of its size: a body costs its size once, not once per step."""
        out = bytearray(ref.size)
        view = memoryview(out)
        size = 0
        for chunk in self.parts(ref, through):
            view[size : size + len(chunk)] = chunk
            size += len(chunk)
        view.release()
        return out

    def parts(self, ref: BlobRef, through: int) -> Iterator[bytes | memoryview]:
        """The bytes of `ref` a part at a time (each part's, of the generation read last), from
        its first part up to generation `through` at most.  LogRecordError as soon as a part
        is out of order or past its size, and after the last if they do not add up to its
        size and CRC32C: a caller writing them as they come undoes what it wrote then."""
        size = crc = parts = 0
        for gen in range(ref.id.generation, through + 1):
            for rec in self._part_records(gen, ref.id):
                if rec.type is not RecordType.PART:
                    continue
                blob, part, chunk = decode_part(rec)
                if blob != ref.id:
                    continue
                if part != parts or size + len(chunk) > ref.size:
                    raise LogRecordError(
                        f"body {ref.id}: part {part} where {parts} was due, or past its "
                        f"{ref.size} bytes"
                    )
                parts += 1
                size += len(chunk)
                crc = crc32c.crc32c(chunk, crc)
                yield chunk
            if size >= ref.size:
                break
        if size != ref.size or crc != ref.crc:
            raise LogRecordError(
                f"body {ref.id}: its parts through generation {through} hold {size} bytes "
                f"(CRC32C {crc:08x}), its commit names {ref.size} (CRC32C {ref.crc:08x})"
            )

    def _in_place(self, ref: BlobRef, through: int) -> str:
        """A large body read `as_bytes` as its parts (`BodyParts`): hashed and checked as
        UTF-8 a part at a time here, and read again from the log as its row is written, so
        that a replay holds a part of it, not the whole beside SQLite's copies (issue 52).
        The parts are read again by a reader of their own (this one's cached generation
        is the reading thread's), from the generations its loader keeps: a replay's are
        read from their files once, for both reads (`generation_cache`)."""
        h = hashlib.sha256()
        decoder = codecs.getincrementaldecoder("utf-8")()
        try:
            for part in self.parts(ref, through):
                h.update(part)
                for start in range(0, len(part), _CHECK_SLICE):
                    decoder.decode(part[start : start + _CHECK_SLICE])
            decoder.decode(b"", final=True)
        except UnicodeDecodeError as exc:
            raise LogRecordError(f"body {ref.id} is not UTF-8 text") from exc
        parts = functools.partial(BodyReader(self._load, records=self._records).parts, ref, through)
        return known(
            "",
            utf8_size=ref.size,
            sha256=h.hexdigest(),
            utf8=BodyParts(ref.size, parts),  # type: ignore[arg-type]
        )

    def bodies(self, refs: tuple[BlobRef, ...], through: int) -> list[str]:
        """The staged bodies a TRANSACTION record commits (`decode_transaction`'s refs), read
        back whole, as text, in the order it names them: each counted and hashed from the
        bytes read (`counted_text`), which the row's size, the digest and the body's hash
        then take as they are instead of encoding the text again; a body that is not ASCII
        keeps them too, for its row to be written from (`tables.put_rows`: SQLite would
        otherwise encode the text once more, and keep that copy as long as the text).
        An ASCII body's bytes are let go of before the counted text is made (a copy of the
        text: a str's subclass cannot share its characters), so that it is held at most
        twice at once, as a plain decode holds it.

        A reader made `as_bytes` gives each as its bytes alone (`counted_text.known` with no
        text, as the active's LLR flush does: `tables.put_rows` binds the bytes, cast to the
        same text): checked as UTF-8 a slice at a time, no text made of it, nor its copy;
        one of `IN_PLACE` or more as its parts, not read whole (`_in_place`)."""
        out: list[str] = []
        for ref in refs:
            if self._as_bytes and ref.size >= IN_PLACE:
                out.append(self._in_place(ref, through))
                continue
            raw = self.read(ref, through)
            size, sha256 = len(raw), hashlib.sha256(raw).hexdigest()
            if self._as_bytes:
                if not is_utf8(raw):
                    raise LogRecordError(f"body {ref.id} is not UTF-8 text")
                out.append(known("", utf8_size=size, sha256=sha256, utf8=raw))
                del raw
                continue
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise LogRecordError(f"body {ref.id} is not UTF-8 text") from exc
            # An ASCII text is its own UTF-8: SQLite binds it as it is.
            utf8 = None if text.isascii() else raw
            del raw
            out.append(known(text, utf8_size=size, sha256=sha256, utf8=utf8))
            del text, utf8
        return out
