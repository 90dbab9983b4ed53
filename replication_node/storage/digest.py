"""The content digest inside a database file (`dag_common.mailbox_digest` defines it): the
table that stores it, and adding it up again from the rows.

The database keeps it current itself: `tables.TableWriter`, the one path that writes the rows,
adds the terms of the rows it writes and takes out those of the rows it replaces or removes,
in the same SQLite transaction (`database.py`).  Each term is hashed in Python from values
the write has in hand (an item's from its operation, its body by its `body_hash`), in one
pass over a transaction's rows.  Until issue 33, triggers on the three tables called a
Python function per row for it (the same terms, the same sum): that cost replay more than
the hashing did, and a file that has them gets them dropped when it is opened, as their
functions are no longer registered.  Adding the digest up again from the rows
(`recompute_digest`) hashes the bodies themselves, so a body changed behind SQLite's back
shows, and so does a hash changed with it.
"""

from __future__ import annotations

import hashlib
import sqlite3

from dag_common.mailbox_digest import (
    MODULUS,
    body_hash,
    folder_term,
    item_term,
    item_term_of_hash,
    mailbox_term,
    to_hex,
)
from replication_node.storage.bodies import ITEMS, PART, body_text_sql, migrated

DIGEST_SCHEMA = """
CREATE TABLE IF NOT EXISTS db_digest(id INTEGER PRIMARY KEY CHECK (id = 1), digest TEXT NOT NULL);
"""
# The triggers files kept their digest with before issue 33 (dropped on open).
_OLD_TRIGGERS = (
    "dg_items_ins", "dg_items_del", "dg_items_upd", "dg_items_ins2", "dg_items_del2",
    "dg_items_upd2", "dg_mbx_ins", "dg_mbx_del", "dg_mbx_upd", "dg_fld_ins", "dg_fld_del",
)  # fmt: skip


def recompute_digest(conn: sqlite3.Connection) -> int:
    """The content digest added up from the rows themselves (the bodies hashed again).

    A body kept apart (`bodies.py`) is hashed from its bytes a part at a time, through
    incremental BLOB I/O: read as a value, SQLite and Python would each hold it whole, 60 MB
    for a 30 MiB body, in the node itself when a passive checks its file before replay
    (`scrub.check_in_thread`)."""
    if not migrated(conn):
        # a file from before `bodies` (or with `body_blob`): added up before its bodies are
        # moved (`body_migration.py`), and a scrub reads any file
        body, items = body_text_sql(conn)
        rows = conn.execute(
            f"SELECT mailbox, item_id, folder, subject, {body}, format FROM {items} "
            "WHERE deleted = 0"
        )
        return (sum(item_term(*row) for row in rows) + _other_terms(conn)) % MODULUS
    total = 0
    for mailbox, item_id, folder, subject, small, fmt, apart in conn.execute(
        "SELECT mailbox, item_id, folder, subject, CASE WHEN bodies.rowid IS NULL THEN body "
        f"END, format, bodies.rowid FROM {ITEMS} WHERE deleted = 0"
    ):
        digest = body_hash(small) if apart is None else _blob_hash(conn, apart)
        total += item_term_of_hash(mailbox, item_id, folder, subject, digest, fmt)
    return (total + _other_terms(conn)) % MODULUS


def _blob_hash(conn: sqlite3.Connection, rowid: int) -> str:
    """SHA-256 (hex) of the bytes of the body apart at `rowid`, read `PART` at a time: the
    hash `body_hash` gives its text (the file's text is its UTF-8)."""
    h = hashlib.sha256()
    with conn.blobopen("bodies", "data", rowid, readonly=True) as blob:
        while part := blob.read(PART):
            h.update(part)
    return h.hexdigest()


def _other_terms(conn: sqlite3.Connection) -> int:
    """The mailboxes' and the folders' terms."""
    total = 0
    for row in conn.execute("SELECT mailbox, display_name, locked, soft_deleted FROM mailboxes"):
        total += mailbox_term(*row)
    for row in conn.execute("SELECT mailbox, folder FROM folders"):
        total += folder_term(*row)
    return total % MODULUS


def stored_digest(conn: sqlite3.Connection) -> int | None:
    """The content digest the file stores (None: a file from before digests)."""
    try:
        row = conn.execute("SELECT digest FROM db_digest WHERE id = 1").fetchone()
    except sqlite3.OperationalError:
        return None
    return int(row[0], 16) if row else None


def _without_body_hash(conn: sqlite3.Connection) -> bool:
    """Whether the file is from before items kept their body's hash (its digest then counts
    bodies the old way)."""
    columns = {row[1] for row in conn.execute("PRAGMA table_info(items)")}
    return bool(columns) and "body_hash" not in columns


def _add_body_hash(conn: sqlite3.Connection) -> None:
    """Give a file from before `body_hash` the column, filled (inside the caller's
    transaction); its digest is then added up again."""
    conn.execute("ALTER TABLE items ADD COLUMN body_hash TEXT NOT NULL DEFAULT ''")
    rows = conn.execute("SELECT rowid, body FROM items WHERE deleted = 0").fetchall()
    conn.executemany(
        "UPDATE items SET body_hash = ? WHERE rowid = ?",
        [(body_hash(body), rowid) for rowid, body in rows],
    )


def _old_triggers(conn: sqlite3.Connection) -> list[str]:
    """The digest triggers of a file from before issue 33 that it still has."""
    names = ", ".join("?" * len(_OLD_TRIGGERS))
    return [
        name
        for (name,) in conn.execute(
            f"SELECT name FROM sqlite_master WHERE type = 'trigger' AND name IN ({names})",
            _OLD_TRIGGERS,
        )
    ]


def install_digest(conn: sqlite3.Connection) -> int:
    """The stored digest; on a file from before digests (or before `body_hash`), add the
    table and column and add the digest up once from the rows; on a file from before
    issue 33, drop the triggers that kept it (the digest stays: they kept the same sum)."""
    stored = stored_digest(conn)
    if stored is not None and not _without_body_hash(conn) and not _old_triggers(conn):
        return stored
    try:
        conn.execute("BEGIN IMMEDIATE")
        for name in _old_triggers(conn):  # checked again inside the write transaction
            conn.execute(f"DROP TRIGGER {name}")
        stored = stored_digest(conn)
        if stored is None or _without_body_hash(conn):
            if _without_body_hash(conn):
                _add_body_hash(conn)
            conn.execute(DIGEST_SCHEMA)
            stored = recompute_digest(conn)
            conn.execute("DELETE FROM db_digest")
            conn.execute("INSERT INTO db_digest VALUES (1, ?)", (to_hex(stored),))
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")
    return stored
