"""Large bodies kept apart from their items' rows, in a table of their own (issue 52), as
PostgreSQL keeps a large value out of line in its TOAST table.

Why: SQLite rewrites a row whole on any UPDATE of it.  With a body of 30 MiB in the row (in
`items.body`, or in the `body_blob` column that came before this table), an IMAP flag
change, a move to another folder, a folder's rename or a delete mark read the whole record
into memory and built the new one: the body held about twice, and its overflow pages
written again, for a change of a few bytes.  Here the item's row keeps its other columns
(`body` left ''), and the body is a row of `bodies`, keyed by the item's key: an UPDATE of
the item never touches its pages.

The rule, the same on every copy: a body of `APART` bytes of UTF-8 or more (the size the log
gives as parts, `spanning.IN_PLACE`) is written into `bodies`, however it is given (its
parts read from the log a part at a time, `body_parts.py`; a text held whole, bound once);
a smaller one stays in `items.body`.  Keyed by (mailbox, item id), the body follows its key:

- a move, a rename, a flag change or any other UPDATE of the item keeps it (the key is the
  same);
- a put over the key replaces it (a large body) or drops it (a small one);
- a copy copies its bytes to the new key, a part at a time (`copy_body`);
- a delete mark drops it (`drop_body`), and a mailbox's removal drops its mailbox's: no
  body is ever left without its live item (tests count them).

Every reader reads through the expressions below, so a body apart reads as the text it
always did: `BODY_TEXT` (the whole text), `MESSAGE_BYTES` (the bytes), `APART_SIZE` (its
size, read from the record's header, not its bytes); `body_reads.py` reads it a part at a
time.  `data` is the row's last column, where SQLite keeps a zeroblob lazy
(`body_parts.py`).  A file from before the table has its bodies moved in on open
(`body_migration.py`).
"""

from __future__ import annotations

import sqlite3

from replication_node.log.spanning import IN_PLACE

APART = IN_PLACE  # a body of this many bytes of UTF-8 or more is kept in `bodies`

BODIES_SCHEMA = """
-- a large body (`bodies.py`): its item's key and its UTF-8 bytes, `data` last (a zeroblob
-- is kept lazy only there).  A rowid table: incremental BLOB I/O names a row by its rowid,
-- and SQLite stores large rows of a WITHOUT ROWID table badly.  Its columns' names are
-- none of `items`': a read joins the two (`ITEMS`) and names the items' columns alone.
CREATE TABLE IF NOT EXISTS bodies(
  of_mailbox TEXT NOT NULL, of_item_id TEXT NOT NULL, data BLOB NOT NULL,
  PRIMARY KEY (of_mailbox, of_item_id)
);
"""

# Inside a statement over `items`: the item's row of `bodies`.
_OF_ITEM = "of_mailbox=items.mailbox AND of_item_id=items.item_id"
# What a read of items with their bodies reads from (`SELECT … FROM {ITEMS}`): each item
# with its row of `bodies`, if it has one.  A join, not a subquery per item: SQLite copies a
# scalar subquery's value into the outer row, a third copy of a body read whole (measured:
# 107 MB over rest for a 30 MiB body, against 77 through the join).
ITEMS = f"items LEFT JOIN bodies ON {_OF_ITEM}"
# An item's body as its text, wherever it is kept (over `ITEMS`): a read of it holds what a
# read of the TEXT did (SQLite's value and Python's str, each the body's size).  Readers of
# a large body read it a part at a time instead (`body_reads.py`).
BODY_TEXT = "ifnull(CAST(data AS TEXT), body)"
# An item's body as its UTF-8 bytes (over `ITEMS`; `file_reads.message_stored`): the text
# as stored, the file's encoding being UTF-8.
MESSAGE_BYTES = "ifnull(data, CAST(body AS BLOB))"
# The size of an item's body kept apart, NULL for one in `body` (over `items` alone):
# `length()` of a BLOB reads its size from the row's header, not its bytes.
APART_SIZE = f"(SELECT length(data) FROM bodies WHERE {_OF_ITEM})"
# Whether an item's body is kept apart (over `items` alone).
IS_APART = f"EXISTS(SELECT 1 FROM bodies WHERE {_OF_ITEM})"

_DROP = "DELETE FROM bodies WHERE of_mailbox=? AND of_item_id=?"
DROP_MAILBOX = "DELETE FROM bodies WHERE of_mailbox=?"
# A body's row, its bytes zeros to be written over (`body_parts.put_apart`, `copy_body`).
ZEROS = "INSERT OR REPLACE INTO bodies (of_mailbox, of_item_id, data) VALUES (?, ?, zeroblob(?))"
# A body's row, its bytes bound whole (a text held whole already: cast to its UTF-8).
WHOLE = (
    "INSERT OR REPLACE INTO bodies (of_mailbox, of_item_id, data) VALUES (?, ?, CAST(? AS BLOB))"
)
PART = 1024 * 1024  # bytes of a body copied at a time


def drop_body(conn: sqlite3.Connection, mailbox: str, item_id: str) -> None:
    """The item's body apart, if it has one, gone (its item deleted or given a small body)."""
    conn.execute(_DROP, (mailbox, item_id))


def copy_blob(source: sqlite3.Blob, target: sqlite3.Blob) -> int:
    """`source`'s bytes written over `target`'s from their start, a part at a time; how
    many."""
    copied = 0
    while part := source.read(PART):
        target.write(part)
        copied += len(part)
    return copied


def copy_body(conn: sqlite3.Connection, mailbox: str, item_id: str, new_id: str) -> None:
    """The body of `item_id` given to `new_id` as well (a copy of an item), a part at a
    time: an `INSERT … SELECT` of it would read it whole and build its record whole, twice
    the body.  `new_id`'s own body apart, if any, is dropped; none is made if `item_id`'s
    body is not apart.  An item copied onto its own id keeps its body."""
    if new_id == item_id:
        return
    drop_body(conn, mailbox, new_id)
    found = conn.execute(
        "SELECT rowid, length(data) FROM bodies WHERE of_mailbox=? AND of_item_id=?",
        (mailbox, item_id),
    ).fetchone()
    if found is None:
        return
    source, size = found
    target = conn.execute(ZEROS, (mailbox, new_id, size)).lastrowid
    assert target is not None
    with (
        conn.blobopen("bodies", "data", source, readonly=True) as src,
        conn.blobopen("bodies", "data", target) as dst,
    ):
        copy_blob(src, dst)


def body_text_sql(conn: sqlite3.Connection) -> tuple[str, str]:
    """`BODY_TEXT` and `ITEMS` for the file `conn` reads as it is now: before
    `body_migration` has run (the digest is added up before it, and a scrub reads any file)
    a file may have no `bodies` yet, and bodies in a `body_blob` column."""
    have_bodies, body_blob = _layout(conn)
    terms = ["CAST(data AS TEXT)"] if have_bodies else []
    if body_blob:
        terms.append("CAST(body_blob AS TEXT)")
    text = f"coalesce({', '.join([*terms, 'body'])})" if terms else "body"
    return text, ITEMS if have_bodies else "items"


def migrated(conn: sqlite3.Connection) -> bool:
    """Whether the file `conn` reads keeps its bodies as this module says (`bodies`, no
    `body_blob` column): `body_text_sql` reads any other."""
    have_bodies, body_blob = _layout(conn)
    return have_bodies and not body_blob


def _layout(conn: sqlite3.Connection) -> tuple[bool, bool]:
    """Whether the file has `bodies`, and whether its items have `body_blob`."""
    have_bodies = conn.execute(
        "SELECT 1 FROM sqlite_master WHERE type='table' AND name='bodies'"
    ).fetchone()
    columns = {row[1] for row in conn.execute("PRAGMA table_info(items)")}
    return have_bodies is not None, "body_blob" in columns
