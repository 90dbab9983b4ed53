"""The staged bodies the LLR overlay holds as their place in the log, read back from the
active's own log files when a reader or the LLR flush needs them (issue 52).

Why: an overlay holding a large item's text held it until `llr_depth` more generations
rolled, beside the next writes' bodies at the edge and the LLR flush's copy for SQLite (a
30 MiB item cost the active about five times itself at the worst moment).  Its bytes are in
the log already, durable before the commit was acknowledged, and kept there as long as the
overlay names them: the commit is past the database file's waypoint, and a part below it is
in Logs Required (`spanning.py`), both of which the truncator keeps for crash recovery.

A body is read one generation file at a time (`spanning.BodyReader`, which checks each
record's CRC32C as the file is scanned, and its parts' size and CRC32C against the
commit's): a closed one by its name, the open one from `E00.log` (read as it stands: the
writer appends after the commit, and a roll may rename it meanwhile, which the next look
finds under its closed name).  A body that cannot be read back is an error (LogRecordError),
never an empty body.

A reader that sends a body on (`GET …/message`, the messages batch read, the items
listing) is given it as a `LogText`, read a part at a time as it is written, as a body in
`items.body_blob` is (`storage/body_reads.py`): the node holds a part of it, where the
body read back whole was the body once more (twice, with its text), on the loop.  Its parts
are checked as they come, and its SHA-256 (counted where it came in, which the overlay's
row keeps) once all are read: the last part is held back until then, so a body that does
not verify is never sent whole (`checked_parts`).  While one is read so, the truncator keeps
its generations (`reading_from`): the LLR flush may write it into its row meanwhile, after
which nothing else keeps them.

A closed generation whose bytes no longer verify (its header or a record's CRC32C) is
remembered with the error (`damaged`, until it reads whole again): the active's status
says so (`damage_note`), as the LLR flush, which must read those bodies too, cannot go past
it; and the active's mend is told (`on_damage`), which takes the generation whole from a
copy (`log_mend.py`) and finds it whole again (`recheck`).
"""

from __future__ import annotations

import collections
import functools
import hashlib
import logging
import threading
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

import msgspec

from dag_common.counted_text import CountedText, known
from dag_common.mailbox_digest import body_hash
from replication_node.errors import LogFormatError, LogRecordError
from replication_node.log import logfile
from replication_node.log.events import Transaction
from replication_node.log.generation_cache import GenerationCache
from replication_node.log.logfile import LogRecord, ScanResult
from replication_node.log.operations import PutItem
from replication_node.log.spanning import BlobId, BlobRef, BodyParts, BodyReader
from replication_node.storage.body_reads import BlobBody, BlobText
from replication_node.storage.file_reads import Held
from replication_node.storage.overlay import LlrOverlay, LoggedBody
from replication_node.storage.reader import ItemRow

logger = logging.getLogger(__name__)

# A roll renames E00.log between a look for the closed name and a look at E00.log: looked
# for again this many times.
_LOOKS = 3


class LogBodies:
    """Reads staged bodies back from one active copy's log directory (any thread)."""

    def __init__(self, log_dir: Path) -> None:
        self._dir = log_dir
        # closed generations (or bodies) found damaged: generation -> the error (`damaged`)
        self.damaged: dict[int, str] = {}
        # The closed generations the LLR flush read lately (`with_bodies`): a generation
        # holds parts of the bodies of two flushes or more, read from the file once.
        self._flushed = GenerationCache()
        # the first generations of the bodies being sent on (`checked_parts`), how many each
        self._reading: collections.Counter[int] = collections.Counter()
        self._reading_lock = threading.Lock()  # readers in worker threads and on the loop
        # told of each damaged generation found (any thread): the mend (`log_mend.LogMend`)
        self.on_damage: Callable[[int], None] | None = None

    def _load(self, gen: int) -> ScanResult:
        closed = self._dir / logfile.closed_log_name(gen)
        for _ in range(_LOOKS):
            try:
                result = logfile.verify_closed(logfile.read_closed(closed), gen)
            except FileNotFoundError:
                pass
            except LogFormatError as exc:
                raise self._damage(gen, f"generation {gen} of the log is damaged: {exc}") from exc
            else:
                self.damaged.pop(gen, None)  # read whole (again: put back, say)
                return result
            try:
                result = logfile.scan((self._dir / logfile.OPEN_LOG_NAME).read_bytes())
            except FileNotFoundError:
                continue
            if result.header.generation == gen:
                return result
        raise LogRecordError(f"generation {gen} of a staged body is not in {self._dir}")

    def _damage(self, gen: int, error: str) -> LogRecordError:
        """The error for a damaged generation, remembered for the status (`damage_note`)."""
        if gen not in self.damaged:
            logger.error("%s: %s", self._dir, error)
        self.damaged[gen] = error
        if self.on_damage is not None:
            self.on_damage(gen)
        return LogRecordError(error)

    def recheck(self, gen: int) -> bool:
        """Whether damaged generation `gen` reads whole now (mended, or put back), or is no
        longer on disk (truncated: nothing reads it any more); forgotten as damaged then."""
        try:
            logfile.verify_closed(
                logfile.read_closed(self._dir / logfile.closed_log_name(gen)), gen
            )
        except FileNotFoundError:
            pass
        except LogFormatError:
            return False
        self.damaged.pop(gen, None)
        return True

    def damage_note(self) -> str | None:
        """What the status says of damaged generations (None: none found)."""
        if not self.damaged:
            return None
        errors = "; ".join(self.damaged[g] for g in sorted(self.damaged))
        return (
            f"{errors}: bodies the LLR overlay holds there cannot be read (reads of them are "
            "refused), nor written into the database file"
        )

    def checked_parts(
        self, logged: LoggedBody, sha256: str, *, what: str = ""
    ) -> Iterator[bytes | memoryview]:
        """A staged body's bytes a part at a time (`BodyReader.parts`: each record's CRC32C,
        then the parts' order, size and CRC32C), the last held back until the bytes' SHA-256
        is `sha256` (LogRecordError otherwise): a caller sending them as they come never
        sends a body that does not verify whole."""
        h = hashlib.sha256()
        last: bytes | memoryview | None = None
        first = logged.ref.id.generation
        with self._reading_lock:
            self._reading[first] += 1
        try:
            for part in BodyReader(self._load).parts(logged.ref, logged.through):
                if last is not None:
                    yield last
                h.update(part)
                last = part
        finally:
            with self._reading_lock:
                self._reading[first] -= 1
                if not self._reading[first]:
                    del self._reading[first]
        if h.hexdigest() != sha256:
            gen = logged.ref.id.generation
            raise self._damage(
                gen,
                f"body {logged.ref.id}{what} read back from generations {gen}-"
                f"{logged.through} of the log has SHA-256 {h.hexdigest()}, not the "
                f"{sha256} it was written with",
            )
        if last is not None:
            yield last

    def reading_from(self) -> int | None:
        """The lowest generation a body being sent on is read from (None: none): the
        truncator keeps it (`ActiveTruncator.read_hold`), as the LLR flush may write the
        body into its row while a slow client still reads it from the log."""
        with self._reading_lock:
            return min(self._reading, default=None)

    def text_of(self, row: ItemRow, logged: LoggedBody) -> LogText:
        """`row`'s body, held in the log at `logged`, as a `LogText`: read a part at a time,
        checked, when it is written."""
        head = BlobBody(row.mailbox, row.item_id, row.format, row.subject, row.size,
                        row.body_hash)  # fmt: skip
        what = f" (item {row.item_id!r} of {row.mailbox!r})"
        return LogText(head, functools.partial(self.checked_parts, logged, row.body_hash,
                                               what=what))  # fmt: skip

    def raw(self, logged: LoggedBody) -> bytearray:
        """The body's UTF-8 bytes, checked against its commit's size and CRC32C."""
        return BodyReader(self._load).read(logged.ref, logged.through)

    def parts(self, ref: BlobRef, through: int) -> Iterator[bytes | memoryview]:
        """A staged body's bytes a part at a time, committed or not, from generations that
        are settled (`spanning.BodyReader.parts`: checked as they come)."""
        return BodyReader(self._load).parts(ref, through)

    def text(self, logged: LoggedBody) -> str:
        """The body as text (its bytes let go of once decoded)."""
        raw = self.raw(logged)
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise LogRecordError(f"body {logged.ref.id} is not UTF-8 text") from exc

    def _flush_load(self, gen: int) -> ScanResult:
        closed = self._dir / logfile.closed_log_name(gen)
        return self._flushed.get(closed, functools.partial(self._load, gen))

    def _flush_records(self, gen: int, blob: BlobId) -> list[LogRecord]:
        closed = self._dir / logfile.closed_log_name(gen)
        return self._flushed.records(closed, blob, functools.partial(self._load, gen))

    def flushed(self, below: int) -> None:
        """The LLR flush will read no generation below `below` again."""
        self._flushed.forget_below(below)

    def with_bodies(self, txns: Iterable[Transaction]) -> Iterator[Transaction]:
        """The overlay's transactions for the LLR flush, each staged body in its put as its
        UTF-8 bytes alone (`counted_text.known` with no text): a body counted where it came
        in as the parts to read back from the log (`storage.body_parts`: its row is written
        from them a part at a time, no copy of it held here), another read back whole (its
        SHA-256 counted from it; `tables.put_rows` gives SQLite the bytes, cast to the same
        text).  The generations are read through the flush's own `GenerationCache`: each
        closed file read and verified once for the flushes, not once per body."""
        for txn in txns:
            if not txn.staged:
                yield txn
                continue
            ops = list(txn.ops)
            for index, ref in txn.staged:
                op = ops[index]
                assert type(op) is PutItem
                # Its SHA-256 as counted where it came in (the overlay keeps it: the bytes
                # read back are those, checked against the commit's size and CRC32C).
                counts = op.body
                if type(counts) is CountedText and counts.utf8_size == ref.size:
                    # Written into its row a part at a time as they are read (`body_parts`).
                    reader = BodyReader(self._flush_load, records=self._flush_records)
                    parts = functools.partial(reader.parts, ref, txn.generation)
                    body = known(
                        "",
                        utf8_size=ref.size,
                        sha256=counts.sha256,
                        utf8=BodyParts(ref.size, parts),  # type: ignore[arg-type]
                    )
                else:
                    reader = BodyReader(self._flush_load, records=self._flush_records)
                    raw = reader.read(ref, txn.generation)
                    sha256 = hashlib.sha256(raw).hexdigest()
                    body = known("", utf8_size=len(raw), sha256=sha256, utf8=raw)
                    del raw
                ops[index] = msgspec.structs.replace(op, body=body)
            yield Transaction(txn.position, txn.commit_time, tuple(ops))


class LogText(BlobText):
    """A body the LLR overlay holds in the log, for a reader that writes it on: "" as a
    str, with its head (`BlobBody`: its size and SHA-256 as the overlay's row has them) and
    its parts, read from the log and checked when asked for (`LogBodies.checked_parts`)."""

    _parts: Callable[[], Iterator[bytes | memoryview]]

    def __new__(cls, head: BlobBody, parts: Callable[[], Iterator[bytes | memoryview]]) -> LogText:
        text = super().__new__(cls, head, _unread)
        text._parts = parts
        return text

    def parts(self) -> Iterator[bytes]:  # type: ignore[override]
        """The body's UTF-8, a part at a time, read from the log as each is asked for."""
        return self._parts()  # type: ignore[return-value]


def _unread(head: BlobBody, offset: int) -> bytes:
    raise AssertionError("a LogText is read by its parts")


def body_bytes(txns: Iterable[Transaction]) -> int:
    """What the bodies of the overlay's transactions add up to (`Database.apply`'s
    `body_bytes`): a staged one by its reference, another by its length."""
    total = 0
    for txn in txns:
        staged = dict(txn.staged)
        for index, op in enumerate(txn.ops):
            if type(op) is PutItem:
                total += staged[index].size if index in staged else len(op.body)
    return total


def read_back(held: Held, overlay: LlrOverlay, bodies: LogBodies, mailbox: str) -> Held:
    """`held` (`listing.bodies_apart`) with each body the overlay holds in the log given as
    a `LogText`: read a part at a time by the reader that writes it on, none read here."""
    for item, stored in held.items():
        logged = None if stored is None else overlay.logged_body(mailbox, item)
        row = None if logged is None else overlay.item(mailbox, item)
        if stored is not None and logged is not None and row is not None:
            held[item] = (bodies.text_of(row, logged), stored[1], stored[2])
    return held


def without_body(row: ItemRow) -> ItemRow:
    """An overlay row as a listing without bodies gives it (`ItemRow`): a row whose body is
    held in the log is so already (its hash, no body)."""
    if row.body_hash and not row.body:
        return row
    return row._replace(body="", body_hash="" if row.deleted else body_hash(row.body))
