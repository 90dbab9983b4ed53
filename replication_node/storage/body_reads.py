"""A body kept apart in `bodies` (`bodies.py`) read a part at a time (issue 52): the item's
columns without the body, then its bytes through incremental BLOB I/O, `PART` bytes at a
time.

Why: a read of the body as a value (`BODY_TEXT`, or `bodies.data` itself) makes SQLite
materialise it whole and Python build a str or bytes of it, two copies: 60 MB over rest for
a 30 MiB body (docs/concepts/memory.md).  `Connection.blobopen(readonly=True)` reads only the
overflow pages of the range asked for, through SQLite's bounded page cache; Python holds the
part.

Consistency.  A reader that reads all the parts inside one read transaction (the messages
batch read's `_read_part`) sees one snapshot, and the row cannot change under it.  A reader
that writes each part to a client before reading the next (`GET …/message`) must not hold
the worker threads' connection, nor a WAL snapshot, while a slow client reads: each part is
read in a read transaction of its own (`parts_apart`), after the row is found again with the
same body: the same item, live, with the same body hash, format and size.  A row replaced
or expunged meanwhile is not found so (a rowid that the replacement reused is refused by
its hash; two bodies with one SHA-256 are the same bytes): `BodyChanged`, never a mix of
two versions.  `blobopen` on a row whose blob is gone raises `OperationalError`, which is
`BodyChanged` too.

A body in `body` (under 1 MiB, or a row without a hash) is read whole, as before.
"""

from __future__ import annotations

import codecs
import sqlite3
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Protocol

from dag_common.rfc822 import BodyFormat
from replication_node.errors import BodyChanged
from replication_node.storage.bodies import APART, APART_SIZE, IS_APART

PART = 1024 * 1024  # bytes of a body read at a time
# Whether an item's body is read a part at a time (a SQL condition over `items`): kept
# apart, hashed.
IN_BLOB = f"body_hash<>'' AND {IS_APART}"


@dataclass(frozen=True, slots=True)
class BlobBody:
    """A live item whose body is kept apart, without the body: what finds it again."""

    mailbox: str
    item_id: str
    format: BodyFormat
    subject: str
    size: int  # bytes of the body's UTF-8, as `bodies` holds them
    body_hash: str  # their SHA-256 (hex), as the row keeps it


class BlobText(str):
    """A listed row's body (`ItemRow.body`) kept apart and not read: "" as a str,
    with its head and what reads it a part at a time (`parts`).  Only a reader that asks
    for it gets one (`FileReads.items_page(blobs=True)`: the items listing)."""

    head: BlobBody
    _read: Callable[[BlobBody, int], bytes]

    def __new__(cls, head: BlobBody, read: Callable[[BlobBody, int], bytes]) -> BlobText:
        text = super().__new__(cls, "")
        text.head, text._read = head, read
        return text

    def parts(self) -> Iterator[bytes]:
        """The body's UTF-8, a part at a time, each read when asked for (`read_part`)."""
        for offset in range(0, self.head.size, PART):
            yield self._read(self.head, offset)


class ReadsApart(Protocol):
    """What `parts_apart` reads through (`FileReads.reading_apart`)."""

    def reading_apart(self) -> Iterator[sqlite3.Connection]: ...


def blob_head(conn: sqlite3.Connection, mailbox: str, item_id: str) -> BlobBody | None:
    """The live item's head if its body is kept apart (and the row has its hash); None
    otherwise (no such item, a tombstone, a body in `body`).  `length()` of a BLOB reads
    its size from the row's header, not its bytes."""
    row = conn.execute(
        f"SELECT format, subject, {APART_SIZE}, body_hash FROM items"
        f" WHERE mailbox=? AND item_id=? AND deleted=0 AND {IN_BLOB}",
        (mailbox, item_id),
    ).fetchone()
    if row is None:
        return None
    return BlobBody(mailbox, item_id, BodyFormat(row[0]), row[1], row[2], row[3])


def read_part(conn: sqlite3.Connection, body: BlobBody, offset: int, n: int = PART) -> bytes:
    """`n` bytes of `body` from `offset`, read through `conn` inside a read transaction;
    `BodyChanged` if the row no longer holds that body."""
    found = conn.execute(
        "SELECT bodies.rowid FROM items JOIN bodies ON of_mailbox=mailbox"
        " AND of_item_id=item_id WHERE mailbox=? AND item_id=?"
        " AND deleted=0 AND body_hash=? AND format=? AND length(data)=?",
        (body.mailbox, body.item_id, body.body_hash, body.format.value, body.size),
    ).fetchone()
    if found is None:
        raise BodyChanged(f"item {body.item_id!r} of {body.mailbox!r} changed while read")
    try:
        with conn.blobopen("bodies", "data", found[0], readonly=True) as blob:
            blob.seek(offset)
            return blob.read(n)
    except sqlite3.OperationalError as exc:  # the row's blob gone under its rowid
        raise BodyChanged(f"item {body.item_id!r} of {body.mailbox!r}: {exc}") from exc


def read_held_part(
    conn: sqlite3.Connection, ids: Sequence[str], body: BlobBody, offset: int
) -> bytes:
    """A part of `body` (an LLR overlay row's head, its body in the file: `overlay.in_file`)
    from `offset`, read from the first of `ids` whose row holds that body (live, the same
    hash, format and size), inside `conn`'s read transaction: kept apart, by `read_part`;
    in `body` (under `APART`), read whole and cut.  `BodyChanged` if none holds it."""
    for item_id in ids:
        held = replace(body, item_id=item_id)
        try:
            return read_part(conn, held, offset)
        except BodyChanged:
            pass
        row = conn.execute(
            "SELECT body FROM items WHERE mailbox=? AND item_id=? AND deleted=0"
            " AND body_hash=? AND format=? AND size=?",
            (body.mailbox, item_id, body.body_hash, body.format.value, body.size),
        ).fetchone()
        if row is not None and body.size < APART:
            return row[0].encode("utf-8", "surrogatepass")[offset : offset + PART]
    raise BodyChanged(f"item {body.item_id!r} of {body.mailbox!r} changed while read")


def parts(conn: sqlite3.Connection, body: BlobBody) -> Iterator[bytes]:
    """`body`'s bytes a part at a time, all through `conn`'s current read transaction."""
    for offset in range(0, body.size, PART):
        yield read_part(conn, body, offset)


def parts_apart(db: ReadsApart, body: BlobBody) -> Iterator[bytes]:
    """`body`'s bytes a part at a time, each part in a read transaction of its own (the
    worker threads' connection held for one part only); `BodyChanged` if the row changes
    in between."""
    for offset in range(0, body.size, PART):
        with db.reading_apart() as conn:
            part = read_part(conn, body, offset)
        yield part


def message_parts(utf8: Iterable[bytes], fmt: BodyFormat) -> Iterator[bytes]:
    """The message's bytes from its body's UTF-8 parts: the parts themselves for a message
    kept as UTF-8; for an 8-bit message (kept as the text its bytes decode to in Latin-1),
    each part decoded (a character cut at a part's edge is completed by the next) and
    encoded in Latin-1 again."""
    if fmt is BodyFormat.MESSAGE:
        yield from utf8
        return
    if fmt is not BodyFormat.MESSAGE_8BIT:
        raise ValueError(f"a {fmt} body is not a message's bytes")
    decoder = codecs.getincrementaldecoder("utf-8")()
    for part in utf8:
        yield decoder.decode(part).encode("latin-1")
    tail = decoder.decode(b"", final=True)
    if tail:
        yield tail.encode("latin-1")


def text_parts(utf8: Iterable[bytes]) -> Iterator[str]:
    """The body's text from its UTF-8 parts, a part at a time (a character cut at a part's
    edge is completed by the next)."""
    decoder = codecs.getincrementaldecoder("utf-8")("surrogatepass")
    for part in utf8:
        text = decoder.decode(part)
        if text:
            yield text
    tail = decoder.decode(b"", final=True)
    if tail:
        yield tail
