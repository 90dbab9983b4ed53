"""A body's row written in place from the log, a part at a time (the active's LLR flush, a
passive's replay): no copy of a large body is held, only a part of it.

Why (issue 52): the flush and the replay read a staged body back from the log whole and
bound it to its row, and SQLite held two copies more while the row was written (Python's
`sqlite3` binds with `SQLITE_TRANSIENT`, a copy; the statement builds the row's record,
another).  Then the row was inserted with a text of the body's length (`CAST(zeroblob(n) AS
TEXT)`) and the bytes written into it with incremental BLOB I/O: still twice the body for
the moment of the insert, as SQLite makes a zeroblob's zeros (a CAST makes them) and builds
a row's record whole, the zeros inside.

Here the body's UTF-8 bytes go into its row of `bodies` (`bodies.py`: a table of large
bodies apart from the items' other columns, so that no UPDATE of the item ever touches
them), `items.body` left ''.  The body's row is inserted with `zeroblob(n)` as its last
column, and SQLite keeps such a zeroblob lazy: building the record (`OP_MakeRecord`)
leaves a zeroblob's zeros out of it when no column after it stores a byte, and the b-tree
writes them into the row's overflow pages a page at a time, through the page cache.  The
body's bytes (`spanning.BodyParts`) are then written over them through incremental BLOB I/O
(`Connection.blobopen`) as they are read from the log, a part at a time.  The bytes are
those the commit names, checked against its size and CRC32C once all are read; a mismatch
raises inside the caller's SQLite transaction, which then writes nothing.  The log, its
format and the order of its fsyncs are untouched: only where the row keeps its body changed.

A large body given whole (a text the writer holds already) goes into `bodies` too, bound
once, so that where a body is kept depends on its size alone, the same on every copy.

Readers read `bodies.BODY_TEXT`, the body as the TEXT they always read, wherever it is
kept, or read it a part at a time (`body_reads.py`).

Weighed and not taken:
- writing with `sqlite3_blob_write` into a row inserted with a small placeholder, then
  grown: the incremental BLOB API cannot change a value's size, and an UPDATE to a larger
  value builds the whole record again, as the insert did;
- the body in a BLOB column of `items` itself (`body_blob`, its last; what this module did
  first): written and read alike, but every UPDATE of the item read and wrote it whole;
- a smaller page cache on the writing connection: it is SQLite's bounded 16 MiB, not a copy
  of the body, and the replay's batches want it for their index pages (issue 33).
"""

from __future__ import annotations

import sqlite3
from typing import Any

from replication_node.log.spanning import BodyParts
from replication_node.storage.bodies import BODY_TEXT, WHOLE, ZEROS

__all__ = ["BODY", "BODY_TEXT", "SIZE", "joined", "put_apart"]

BODY = 4  # the body's place in a row for `tables._PUT`
SIZE = 5  # its size in UTF-8 bytes


def put_apart(conn: sqlite3.Connection, put: str, row: tuple[Any, ...]) -> None:
    """Write `row` (`tables._PUT`'s, run as `put`; a body of `bodies.APART` bytes or more)
    with its body in `bodies`: from the log (a `BodyParts`), zeros of its size, then its
    bytes over them a part at a time; given whole, bound once."""
    body = row[BODY]
    mailbox, item_id = row[0], row[1]
    conn.execute(put, (*row[:BODY], "", *row[BODY + 1 :]))
    if not isinstance(body, BodyParts):
        conn.execute(WHOLE, (mailbox, item_id, body))
        return
    rowid = conn.execute(ZEROS, (mailbox, item_id, body.size)).lastrowid
    assert rowid is not None
    written = 0
    with conn.blobopen("bodies", "data", rowid) as blob:
        for part in body.parts():
            blob.write(part)
            written += len(part)
    if written != body.size:  # the parts check their size; this is the row's
        raise sqlite3.DataError(f"a body of {body.size} bytes was given {written}")


def joined(row: tuple[Any, ...]) -> tuple[Any, ...]:
    """`row` with a body given as parts under `bodies.APART` bytes (the active's LLR flush
    gives every staged body so) as its bytes, read whole: such a body is kept in its row, on
    every copy, as a passive's replay writes it."""
    body = row[BODY]
    if not isinstance(body, BodyParts):
        return row
    data = b"".join(body.parts())
    if len(data) != body.size:  # the parts check their size; this is the row's
        raise sqlite3.DataError(f"a body of {body.size} bytes was given {len(data)}")
    return (*row[:BODY], data, *row[BODY + 1 :])
