"""The staged bodies the LLR overlay holds as their place in the log, read back from the
active's own log files when a reader or the LLR flush needs them (issue 52).

Why: an overlay holding a large item's text held it until `llr_depth` more generations
rolled, beside the next writes' bodies at the edge and the LLR flush's copy for SQLite (a
30 MiB item cost the active about five times itself at the worst moment).  Its bytes are in
the log already, durable before the commit was acknowledged, and kept there as long as the
overlay names them: the commit is past the database file's waypoint, and a part below it is
in Logs Required (`spanning.py`), both of which the truncator keeps for crash recovery.

A body is read into one buffer of its size (`spanning.BodyReader`, which checks its parts'
size and CRC32C against the commit's), one generation file at a time: a closed one by its
name, the open one from `E00.log` (read as it stands: the writer appends after the commit,
and a roll may rename it meanwhile, which the next look finds under its closed name).  A
body that cannot be read back is an error (LogRecordError), never an empty body.
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Iterable, Iterator
from pathlib import Path

import msgspec

from dag_common.counted_text import CountedText, known
from dag_common.mailbox_digest import body_hash
from replication_node.errors import LogRecordError
from replication_node.log import logfile
from replication_node.log.events import Transaction
from replication_node.log.logfile import ScanResult
from replication_node.log.operations import PutItem
from replication_node.log.spanning import BlobRef, BodyParts, BodyReader
from replication_node.storage.file_reads import Held, StoredBody
from replication_node.storage.overlay import LlrOverlay, LoggedBody
from replication_node.storage.reader import ItemRow

# A roll renames E00.log between a look for the closed name and a look at E00.log: looked
# for again this many times.
_LOOKS = 3


class LogBodies:
    """Reads staged bodies back from one active copy's log directory (any thread)."""

    def __init__(self, log_dir: Path) -> None:
        self._dir = log_dir

    def _load(self, gen: int) -> ScanResult:
        closed = self._dir / logfile.closed_log_name(gen)
        for _ in range(_LOOKS):
            try:
                return logfile.verify_closed(logfile.read_closed(closed), gen)
            except FileNotFoundError:
                pass
            try:
                result = logfile.scan((self._dir / logfile.OPEN_LOG_NAME).read_bytes())
            except FileNotFoundError:
                continue
            if result.header.generation == gen:
                return result
        raise LogRecordError(f"generation {gen} of a staged body is not in {self._dir}")

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

    def with_bodies(self, txns: Iterable[Transaction]) -> Iterator[Transaction]:
        """The overlay's transactions for the LLR flush, each staged body in its put as its
        UTF-8 bytes alone (`counted_text.known` with no text): a body counted where it came
        in as the parts to read back from the log (`storage.body_parts`: its row is written
        from them a part at a time, no copy of it held here), another read back whole (its
        SHA-256 counted from it; `tables.put_rows` gives SQLite the bytes, cast to the same
        text)."""
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
                    parts = functools.partial(BodyReader(self._load).parts, ref, txn.generation)
                    body = known(
                        "",
                        utf8_size=ref.size,
                        sha256=counts.sha256,
                        utf8=BodyParts(ref.size, parts),  # type: ignore[arg-type]
                    )
                else:
                    raw = self.raw(LoggedBody(ref, txn.generation))
                    sha256 = hashlib.sha256(raw).hexdigest()
                    body = known("", utf8_size=len(raw), sha256=sha256, utf8=raw)
                    del raw
                ops[index] = msgspec.structs.replace(op, body=body)
            yield Transaction(txn.position, txn.commit_time, tuple(ops))


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


class _ReadBack(dict):  # type: ignore[type-arg]
    """What the overlay holds of some items (`file_reads.Held`), the bodies it holds in the
    log read back as each is looked up (in the thread that reads the batch, one at a time)."""

    def __init__(self, held: Held, logged: dict[str, LoggedBody], bodies: LogBodies) -> None:
        super().__init__(held)
        self._logged, self._bodies = logged, bodies

    def __getitem__(self, item: str) -> StoredBody | None:
        stored = super().__getitem__(item)
        logged = self._logged.get(item)
        if stored is None or logged is None:
            return stored
        return self._bodies.text(logged), stored[1], stored[2]


def read_back(held: Held, overlay: LlrOverlay, bodies: LogBodies, mailbox: str) -> Held:
    """`held` (`listing.bodies_apart`) with the bodies the overlay holds in the log read back
    when they are looked up, not here (on the loop) nor all at once."""
    logged = {
        item: where
        for item, stored in held.items()
        if stored is not None and (where := overlay.logged_body(mailbox, item)) is not None
    }
    return _ReadBack(held, logged, bodies) if logged else held


def without_body(row: ItemRow) -> ItemRow:
    """An overlay row as a listing without bodies gives it (`ItemRow`): a row whose body is
    held in the log is so already (its hash, no body)."""
    if row.body_hash and not row.body:
        return row
    return row._replace(body="", body_hash="" if row.deleted else body_hash(row.body))
