"""A body's row written in place from the log, a part at a time (the active's LLR flush, a
passive's replay).

Why (issue 52): the flush and the replay read a staged body back from the log whole and
bound it to its row, and SQLite held two copies more while the row was written (Python's
`sqlite3` binds with `SQLITE_TRANSIENT`, a copy; the statement builds the row's record,
another): three times a large body at once, beside the next writes.  Here the row is
inserted with a text of the body's length (`CAST(zeroblob(n) AS TEXT)`: the same TEXT every
reader reads, zeros for now, which SQLite makes and copies into the record once, then lets
go), and the body's bytes (`spanning.BodyParts`) are written into it through incremental
BLOB I/O (`Connection.blobopen`, which writes a TEXT value in place as it does a BLOB's) as
they are read from the log, a part at a time: twice the body for the moment of the insert,
then no copy of it but a part.  The bytes are those the commit names, checked against its
size and CRC32C once all are read; a mismatch raises inside the caller's SQLite
transaction, which then writes nothing.
"""

from __future__ import annotations

import sqlite3
from typing import Any

from replication_node.log.spanning import BodyParts

BODY = 4  # the body's place in a row for `tables._PUT`


def put_in_place(conn: sqlite3.Connection, sized_put: str, row: tuple[Any, ...]) -> None:
    """Write `row` (`tables._PUT`'s, its body a `BodyParts`) with `sized_put`, which makes
    the body a text of its size, then its bytes into it a part at a time."""
    body = row[BODY]
    assert isinstance(body, BodyParts)
    cursor = conn.execute(sized_put, (*row[:BODY], body.size, *row[BODY + 1 :]))
    written = 0
    with conn.blobopen("items", "body", cursor.lastrowid) as blob:
        for part in body.parts():
            blob.write(part)
            written += len(part)
    if written != body.size:  # the parts check their size; this is the row's
        raise sqlite3.DataError(f"a body of {body.size} bytes was given {written}")
