"""A file from before `bodies` (issue 52) given the table, its large bodies moved into it on
open, one at a time, none of them held whole.

Which bodies: those of `bodies.APART` bytes or more, wherever the file keeps them: in the
`body_blob` column (every large body written from the log since that column came), or in
`body`'s text (a file from before it: read whole by every reader until now).  Each is moved
in a write transaction of its own: its row of `bodies` inserted as zeros of its size, its
bytes copied over them through incremental BLOB I/O a part at a time (a TEXT value opens as
a BLOB too: its bytes are its UTF-8), then its item's `body` set to '' and `body_blob` to
NULL, an UPDATE that sets the large value and so never reads it.  The content digest is
unchanged (it counts a body by its hash, which the row keeps), and so is every reader's
text.

Crash-safe: a kill in the middle leaves every body either moved, in a committed transaction,
or not moved at all; the file opens and the migration goes on with the bodies not moved
(an item whose body is in `bodies` is never moved again).  Only once every body is moved is
the file's schema version set (`PRAGMA user_version`: `SCHEMA_VERSION`), after which an
open does not look again.  Each copy migrates its own file, to the same rows: the digests of
two copies of one database are equal before and after, and the log is unchanged, so a copy
migrated replays an active's log that is not, and the reverse.

`body_blob` itself stays, NULL in every row, in a file that had it: dropping the column
would rewrite every row of the table (every small body with it) on every copy.
"""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Callable

from replication_node.storage.bodies import APART, BODIES_SCHEMA, IS_APART, ZEROS, copy_blob

logger = logging.getLogger(__name__)

# `PRAGMA user_version` of a file whose large bodies are all in `bodies` (0: a file from
# before, whose bodies may still be in `items`).
SCHEMA_VERSION = 1


def schema_version(conn: sqlite3.Connection) -> int:
    """The file's schema version (`SCHEMA_VERSION`, or 0 for a file from before it)."""
    (version,) = conn.execute("PRAGMA user_version").fetchone()
    return int(version)


def _has_blob_column(conn: sqlite3.Connection) -> bool:
    return "body_blob" in {row[1] for row in conn.execute("PRAGMA table_info(items)")}


def _has_bodies(conn: sqlite3.Connection) -> bool:
    return bool(conn.execute("SELECT 1 FROM sqlite_master WHERE name='bodies'").fetchone())


def waiting(conn: sqlite3.Connection) -> list[int]:
    """The rowids of the live items whose body is to be moved: in `body_blob`, or of
    `APART` bytes or more in `body` (`size`, its UTF-8 bytes, read: not the body), and not
    in `bodies` yet.  `length()` of a BLOB reads its header, not its bytes."""
    in_blob = "length(body_blob) IS NOT NULL OR " if _has_blob_column(conn) else ""
    moved = f" AND NOT {IS_APART}" if _has_bodies(conn) else ""
    rows = conn.execute(
        f"SELECT rowid FROM items WHERE deleted=0 AND ({in_blob}size>=?){moved} ORDER BY rowid",
        (APART,),
    )
    return [int(r[0]) for r in rows]


def move_one(conn: sqlite3.Connection, rowid: int, *, before_commit: Callable[[], None]) -> int:
    """Move the body of item `rowid` into `bodies`, in one write transaction; its size in
    bytes (0: nothing to move, an item gone or moved meanwhile).  `before_commit` is called
    once the body is copied and its item cleared, before the COMMIT."""
    blob = _has_blob_column(conn)
    conn.execute("BEGIN IMMEDIATE")
    try:
        found = conn.execute(
            "SELECT mailbox, item_id, "
            + ("length(body_blob)" if blob else "NULL")
            + f" FROM items WHERE rowid=? AND deleted=0 AND NOT {IS_APART}",
            (rowid,),
        ).fetchone()
        size = 0
        if found is not None:
            mailbox, item_id, blob_size = found
            column = "body_blob" if blob_size is not None else "body"
            with conn.blobopen("items", column, rowid, readonly=True) as source:
                size = len(source)
                if size:
                    target = conn.execute(ZEROS, (mailbox, item_id, size)).lastrowid
                    assert target is not None
                    with conn.blobopen("bodies", "data", target) as into:
                        copied = copy_blob(source, into)
                    if copied != size:
                        raise sqlite3.DataError(f"{item_id!r}: {copied} of {size} bytes moved")
            if size:  # setting the values, never reading them: the UPDATE holds neither
                conn.execute(
                    "UPDATE items SET body=''" + (", body_blob=NULL" if blob else "")
                    + " WHERE rowid=?",
                    (rowid,),
                )  # fmt: skip
            before_commit()
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")
    return size


def move_bodies_apart(
    conn: sqlite3.Connection, *, before_commit: Callable[[], None] = lambda: None
) -> int:
    """Give a file from before `bodies` the table and move its large bodies into it (the
    module says how); how many were moved.  A file at `SCHEMA_VERSION` is left as it is.
    `before_commit`: called in each body's transaction before its COMMIT (a test's kill)."""
    if schema_version(conn) >= SCHEMA_VERSION:
        return 0
    if not conn.execute("SELECT 1 FROM sqlite_master WHERE name='items'").fetchone():
        return 0  # not a file of ours yet: its schema makes the table
    conn.execute(BODIES_SCHEMA)
    moved = total = 0
    for rowid in waiting(conn):
        size = move_one(conn, rowid, before_commit=before_commit)
        moved, total = moved + (size > 0), total + size
    conn.execute("BEGIN IMMEDIATE")
    try:
        conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")
    if moved:
        logger.info("moved %d large bodies (%d bytes) into their own table", moved, total)
    return moved
