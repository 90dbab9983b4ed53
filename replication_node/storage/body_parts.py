"""A body's row written in place from the log, a part at a time (the active's LLR flush, a
passive's replay): no copy of a large body is held, only a part of it.

Why (issue 52): the flush and the replay read a staged body back from the log whole and
bound it to its row, and SQLite held two copies more while the row was written (Python's
`sqlite3` binds with `SQLITE_TRANSIENT`, a copy; the statement builds the row's record,
another).  Then the row was inserted with a text of the body's length (`CAST(zeroblob(n) AS
TEXT)`) and the bytes written into it with incremental BLOB I/O: still twice the body for
the moment of the insert, as SQLite makes a zeroblob's zeros (a CAST makes them) and builds
a row's record whole, the zeros inside.

Here the body's UTF-8 bytes go into `items.body_blob`, a BLOB that is the row's last column
(`schema.py`), `body` left ''.  The row is inserted with `zeroblob(n)` there, and SQLite
keeps such a zeroblob lazy: building the record (`OP_MakeRecord`) leaves a zeroblob's zeros
out of it when no column after it stores a byte, and the b-tree writes them into the row's
overflow pages a page at a time, through the page cache.  The body's bytes
(`spanning.BodyParts`) are then written over them through incremental BLOB I/O
(`Connection.blobopen`) as they are read from the log, a part at a time.  The bytes are
those the commit names, checked against its size and CRC32C once all are read; a mismatch
raises inside the caller's SQLite transaction, which then writes nothing.  The log, its
format and the order of its fsyncs are untouched: only where the row keeps its body changed.

Readers read `BODY_TEXT`, the body as the TEXT they always read, whichever column holds it;
a body in `body` (a file from before, a body under `spanning.IN_PLACE`, one the overlay
held whole) is read as before.

Weighed and not taken:
- writing with `sqlite3_blob_write` into a row inserted with a small placeholder, then
  grown: the incremental BLOB API cannot change a value's size, and an UPDATE to a larger
  value builds the whole record again, as the insert did;
- moving `body` itself to the end: a rebuild of the table, every row of every file
  rewritten at its next open, on every copy, for what a new column gives without it;
- a table of bodies of its own: a second row to keep in step with the item's on every put,
  delete, copy and rename, and a join on every read, for the same lazy zeros;
- a smaller page cache on the writing connection: it is SQLite's bounded 16 MiB, not a copy
  of the body, and the replay's batches want it for their index pages (issue 33).
"""

from __future__ import annotations

import sqlite3
from typing import Any

from replication_node.log.spanning import BodyParts

BODY = 4  # the body's place in a row for `tables._PUT`

# An item's body as its text, wherever the row keeps it (a SQL expression): a read of it
# holds what a read of the TEXT did (SQLite's value and Python's str, each the body's size:
# measured in a fresh process, 60 MB over rest for a 30 MiB body either way, page cache
# aside), and inserting it in place holds none (0.1 MB, against 60 MB for the CAST text).
BODY_TEXT = "ifnull(CAST(body_blob AS TEXT), body)"

# `tables._PUT`'s row with its body in `body_blob` as zeros of its size (`put_in_place`).
PUT_IN_PLACE = (
    "INSERT OR REPLACE INTO items (mailbox, item_id, folder, subject, body, size, change_number,"
    " deleted, commit_time, body_hash, format, uid, modseq, flags, received, body_blob)"
    " VALUES (?, ?, ?, ?, '', ?, ?, 0, ?, ?, ?, ?, ?, ?, ?, zeroblob(?))"
)


def put_in_place(conn: sqlite3.Connection, row: tuple[Any, ...]) -> None:
    """Write `row` (`tables._PUT`'s, its body a `BodyParts`) with its body in `body_blob`:
    zeros of its size, then its bytes over them a part at a time."""
    body = row[BODY]
    assert isinstance(body, BodyParts)
    cursor = conn.execute(PUT_IN_PLACE, (*row[:BODY], *row[BODY + 1 :], body.size))
    written = 0
    with conn.blobopen("items", "body_blob", cursor.lastrowid) as blob:
        for part in body.parts():
            blob.write(part)
            written += len(part)
    if written != body.size:  # the parts check their size; this is the row's
        raise sqlite3.DataError(f"a body of {body.size} bytes was given {written}")
