"""A put's row, as the items table is given it: `put_rows` makes a transaction's rows (the
read side of a replay computes them ahead: `passive/replayer.py`), `write_puts` writes
them, `lifts` says how far each folder's counters go past them (`tables.TableWriter`
holds, counts and flushes them).

Two shapes of row, the same row written: a put of a text item with no flags and no
received time of its own (nearly every put but a message's) is `_PUT_PLAIN`'s eleven
values, the others `_PUT`'s fourteen, the first eleven alike.
"""

from __future__ import annotations

import sqlite3
from itertools import groupby
from operator import countOf, itemgetter
from typing import TYPE_CHECKING, Any, NamedTuple

from dag_common.counted_text import CountedText
from dag_common.mailbox_digest import body_hash, item_term_of_hash, text_terms, utf8_size
from dag_common.rfc822 import BodyFormat
from replication_node.log.operations import PutItem
from replication_node.log.spanning import BodyParts
from replication_node.storage.bodies import APART
from replication_node.storage.body_parts import BODY, SIZE

if TYPE_CHECKING:
    from replication_node.log.events import Transaction

__all__ = ["PutRows", "Shape", "full", "lifts", "put_rows", "shape", "statement", "write_puts"]

_PUT = (
    "INSERT OR REPLACE INTO items (mailbox, item_id, folder, subject, body, size, change_number,"
    " deleted, commit_time, body_hash, uid, modseq, format, flags, received)"
    " VALUES (?, ?, ?, ?, CAST(? AS TEXT), ?, ?, 0, ?, ?, ?, ?, ?, ?, ?)"
)  # the body: its text, or its UTF-8 bytes, stored as text either way (`put_rows`); a
# body of `bodies.APART` bytes or more is written apart (`body_parts.put_apart`)
# A put of a text item with no flags and no INTERNALDATE of its own (nearly every put but a
# message's): its row without them, `_PUT`'s first eleven values.  The same row written:
# its format and flags the columns' defaults ('text', '', in a file from before them too:
# `schema.py`), its received time its commit time (`?8`, bound once).  Three values fewer
# to bind a row, each a text SQLite copies (bench/README.md, issue 51's replay).
_PUT_PLAIN = (
    "INSERT OR REPLACE INTO items (mailbox, item_id, folder, subject, body, size, change_number,"
    " deleted, commit_time, body_hash, uid, modseq, received)"
    " VALUES (?1, ?2, ?3, ?4, CAST(?5 AS TEXT), ?6, ?7, 0, ?8, ?9, ?10, ?11, ?8)"
)
_PLAIN_LEN = 11  # a row for _PUT_PLAIN; one for _PUT has three values more


class Shape(NamedTuple):
    """What `tables.TableWriter` asks of some put rows before it holds them (`shape`): the
    highest change number, whether a row is `_PUT`'s (`full`), whether a body is of
    `bodies.APART` bytes or more or held as its parts (`large`), whether each key comes
    once (`unique`), and how far each folder's counters go (`lifts`)."""

    last_cn: int
    full: bool
    large: bool
    unique: bool
    lifts: dict[tuple[str, str], tuple[int, int]]


def shape(rows: list[tuple[Any, ...]]) -> Shape:
    """The `Shape` of some put rows (at least one): a few C passes over them (the keys
    counted by their item ids when the rows are of one mailbox, nearly always: no tuple
    made and hashed a row)."""
    count = len(rows)
    one_mailbox = countOf(map(_MAILBOX, rows), rows[0][0]) == count
    return Shape(
        max(map(_CN_OF, rows)),
        full(rows),
        max(map(_SIZE_OF, rows)) >= APART or BodyParts in set(map(type, map(_BODY_OF, rows))),
        len(set(map(_ITEM_ID_OF if one_mailbox else _KEY_OF, rows))) == count,
        lifts(rows),
    )


class PutRows(NamedTuple):
    """A transaction's puts as they are written: each one's row (`_PUT`'s or
    `_PUT_PLAIN`'s), and each row's term in the content digest, in two lists (index i of
    both: the transaction's i-th put), and the rows' `shape` (None: no put), found with
    them: a replay finds it on the thread that reads ahead, not on the one that writes
    (bench/README.md, issue 51's replay against the base).
    Not a pair per put: a replay batch holds tens of thousands of puts until it is in, and a
    pair per put was a container the garbage collector tracked and walked in every
    collection (a row of texts and numbers alone it stops tracking at once; a pair it still
    tracked after a full one), and that set off full collections (bench/README.md, issue
    51's replay)."""

    rows: list[tuple[Any, ...]]
    terms: list[int]
    shape: Shape | None = None


def put_rows(txn: Transaction) -> PutRows:
    """The rows of a transaction's puts, in order, with their terms (pure: the item's
    fields, the body's SHA-256, the term's).  A replay has them computed by the thread that
    reads its next batch while the last one's COMMIT waits on the disk: the two hashes of
    each item are a fifth of replay's time, and `TableWriter.apply` then only writes.
    The columns are taken one by one, not through a dict: this is the hot path (a text
    item's format is the one enum member compared by identity, held in a module global:
    not read through the enum's `value` property, a tenth of this function's time, nor
    looked up on the enum class, 0.15 us, as long as a dict step).  A text item with no
    flags and no received time of its own gets the short row (`_PUT_PLAIN`).
    A body counted where it was read (`counted_text`: a staged body replayed) is not
    counted or hashed again, and if it still holds its UTF-8 bytes (a body that is not
    ASCII) they are what its row is given, taken from it: `_PUT` casts them to the same
    text, where binding the text would have SQLite encode it once more."""
    when = txn.commit_time.isoformat()
    rows: list[tuple[Any, ...]] = []
    terms: list[int] = []
    term_of, in_mailbox, in_folder = None, "", ""  # the text terms of the last folder put into
    for op in txn.ops:
        if type(op) is PutItem:
            mailbox, item_id, folder, subject, body, fmt, flags, received = (
                op.mailbox, op.item_id, op.folder, op.subject, op.body, op.format, op.flags,
                op.received,
            )  # fmt: skip
            if type(body) is CountedText:
                hashed, size, utf8 = body.sha256, body.utf8_size, body.take_utf8()
                value = body if utf8 is None else utf8
            else:
                hashed, size, value = body_hash(body), utf8_size(body), body
            if fmt is _TEXT and not flags and not received:
                rows.append(
                    (mailbox, item_id, folder, subject, value, size, op.cn, when, hashed,
                     op.uid, op.modseq)
                )  # fmt: skip
                if term_of is None or folder != in_folder or mailbox != in_mailbox:
                    term_of, in_mailbox, in_folder = text_terms(mailbox, folder), mailbox, folder
                terms.append(term_of(item_id, subject, hashed))
                continue
            fmt = _TEXT_VALUE if fmt is _TEXT else fmt.value
            rows.append(
                (mailbox, item_id, folder, subject, value, size, op.cn, when, hashed,
                 op.uid, op.modseq, fmt, " ".join(flags), received or when)
            )  # fmt: skip
            terms.append(item_term_of_hash(mailbox, item_id, folder, subject, hashed, fmt))
    return PutRows(rows, terms, shape(rows) if rows else None)


_TEXT = BodyFormat.TEXT
_TEXT_VALUE = _TEXT.value


def statement(row: tuple[Any, ...]) -> str:
    """The statement that writes `row` (`_PUT_PLAIN`'s or `_PUT`'s)."""
    return _PUT_PLAIN if len(row) == _PLAIN_LEN else _PUT


def full(rows: list[tuple[Any, ...]]) -> bool:
    """Whether a row of `rows` is `_PUT`'s (one of `_PUT_PLAIN`'s is shorter)."""
    return max(map(len, rows)) > _PLAIN_LEN


def write_puts(conn: sqlite3.Connection, rows: list[tuple[Any, ...]], *, plain: bool) -> None:
    """Put rows in order (an item put twice keeps its last row).  `plain`: every row is
    `_PUT_PLAIN`'s (none is `full`): one statement for them all; else one a run of rows of
    one length."""
    if plain:
        conn.executemany(_PUT_PLAIN, rows)
        return
    for length, run in groupby(rows, len):
        conn.executemany(_PUT_PLAIN if length == _PLAIN_LEN else _PUT, run)


def lifts(rows: list[tuple[Any, ...]]) -> dict[tuple[str, str], tuple[int, int]]:
    """The highest UID and modseq each folder of `rows` is given (its rows with a UID).
    Nearly always one folder, every row numbered: then a few C passes over the rows,
    without a key made per row."""
    first = rows[0]
    mailbox, folder, count = first[0], first[2], len(rows)
    if (
        countOf(map(_FOLDER, rows), folder) == count
        and countOf(map(_MAILBOX, rows), mailbox) == count
        and min(map(_UID_OF, rows))
    ):
        return {(mailbox, folder): (max(map(_UID_OF, rows)), max(map(_MODSEQ_OF, rows)))}
    counters: dict[tuple[str, str], tuple[int, int]] = {}
    for where, group in groupby(rows, _WHERE):  # a folder's puts come together
        numbered = [row for row in group if row[_UID]]  # a UID: its folder goes past it
        if numbered:
            uid, modseq = counters.get(where, (0, 0))
            counters[where] = (
                max(uid, max(map(_UID_OF, numbered))),
                max(modseq, max(map(_MODSEQ_OF, numbered))),
            )
    return counters


# In a put's row (`_PUT`'s columns, `_PUT_PLAIN`'s the first eleven): its mailbox, its
# folder, its folder's key; its key, item id, body, size and change number; its UID, its
# modseq.
_MAILBOX, _FOLDER, _WHERE = itemgetter(0), itemgetter(2), itemgetter(0, 2)
_KEY_OF, _ITEM_ID_OF, _BODY_OF, _SIZE_OF, _CN_OF = (
    itemgetter(0, 1),
    itemgetter(1),
    itemgetter(BODY),
    itemgetter(SIZE),
    itemgetter(6),
)
_UID = 9
_UID_OF, _MODSEQ_OF = itemgetter(_UID), itemgetter(_UID + 1)
