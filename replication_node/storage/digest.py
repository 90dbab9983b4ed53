"""The content digest inside a database file (`dag_common.mailbox_digest` defines it): the
table that stores it, the triggers that keep it current with every write of the rows, and
adding it up again from the rows.

The triggers call this connection's `dg_*` functions (registered by `install_digest`), so
every write through any path of ours moves the running digest in the same transaction; an
UPDATE is a removal and an addition, and with recursive triggers on, the rows INSERT OR
REPLACE deletes fire the delete trigger too.  An item's trigger passes its `body_hash`, not
its body: a large body never leaves SQLite for the digest.  Adding the digest up again from
the rows (`recompute_digest`) hashes the bodies themselves, so a body changed behind
SQLite's back shows, and so does a hash changed with it.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable

from dag_common.mailbox_digest import (
    MODULUS,
    body_hash,
    folder_term,
    item_term,
    item_term_of_hash,
    mailbox_term,
    to_hex,
)

DIGEST_SCHEMA = """
CREATE TABLE IF NOT EXISTS db_digest(id INTEGER PRIMARY KEY CHECK (id = 1), digest TEXT NOT NULL);
CREATE TRIGGER IF NOT EXISTS dg_items_ins2 AFTER INSERT ON items WHEN NEW.deleted = 0 BEGIN
  SELECT dg_item(1, NEW.mailbox, NEW.item_id, NEW.folder, NEW.subject, NEW.body_hash); END;
CREATE TRIGGER IF NOT EXISTS dg_items_del2 AFTER DELETE ON items WHEN OLD.deleted = 0 BEGIN
  SELECT dg_item(-1, OLD.mailbox, OLD.item_id, OLD.folder, OLD.subject, OLD.body_hash); END;
CREATE TRIGGER IF NOT EXISTS dg_items_upd2 AFTER UPDATE ON items BEGIN
  SELECT dg_item(-1, OLD.mailbox, OLD.item_id, OLD.folder, OLD.subject, OLD.body_hash)
    WHERE OLD.deleted = 0;
  SELECT dg_item(1, NEW.mailbox, NEW.item_id, NEW.folder, NEW.subject, NEW.body_hash)
    WHERE NEW.deleted = 0; END;
CREATE TRIGGER IF NOT EXISTS dg_mbx_ins AFTER INSERT ON mailboxes BEGIN
  SELECT dg_mailbox(1, NEW.mailbox, NEW.display_name, NEW.locked, NEW.soft_deleted); END;
CREATE TRIGGER IF NOT EXISTS dg_mbx_del AFTER DELETE ON mailboxes BEGIN
  SELECT dg_mailbox(-1, OLD.mailbox, OLD.display_name, OLD.locked, OLD.soft_deleted); END;
CREATE TRIGGER IF NOT EXISTS dg_mbx_upd AFTER UPDATE ON mailboxes BEGIN
  SELECT dg_mailbox(-1, OLD.mailbox, OLD.display_name, OLD.locked, OLD.soft_deleted);
  SELECT dg_mailbox(1, NEW.mailbox, NEW.display_name, NEW.locked, NEW.soft_deleted); END;
CREATE TRIGGER IF NOT EXISTS dg_fld_ins AFTER INSERT ON folders BEGIN
  SELECT dg_folder(1, NEW.mailbox, NEW.folder); END;
CREATE TRIGGER IF NOT EXISTS dg_fld_del AFTER DELETE ON folders BEGIN
  SELECT dg_folder(-1, OLD.mailbox, OLD.folder); END;
"""


def recompute_digest(conn: sqlite3.Connection) -> int:
    """The content digest added up from the rows themselves (no trigger involved)."""
    total = 0
    for row in conn.execute(
        "SELECT mailbox, item_id, folder, subject, body FROM items WHERE deleted = 0"
    ):
        total += item_term(*row)
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
    bodies the old way, and its triggers pass them)."""
    columns = {row[1] for row in conn.execute("PRAGMA table_info(items)")}
    return bool(columns) and "body_hash" not in columns


def _add_body_hash(conn: sqlite3.Connection) -> None:
    """Give a file from before `body_hash` the column, filled, and the triggers that use it
    (inside the caller's transaction); its digest is then added up again."""
    conn.execute("ALTER TABLE items ADD COLUMN body_hash TEXT NOT NULL DEFAULT ''")
    for name in ("dg_items_ins", "dg_items_del", "dg_items_upd"):
        conn.execute(f"DROP TRIGGER IF EXISTS {name}")
    rows = conn.execute("SELECT rowid, body FROM items WHERE deleted = 0").fetchall()
    conn.executemany(
        "UPDATE items SET body_hash = ? WHERE rowid = ?",
        [(body_hash(body), rowid) for rowid, body in rows],
    )


def _statements(script: str) -> list[str]:
    """The statements of `script` (a trigger's body holds semicolons of its own)."""
    out, buf = [], ""
    for line in script.splitlines(keepends=True):
        buf += line
        if sqlite3.complete_statement(buf):
            out.append(buf)
            buf = ""
    return out


def install_digest(conn: sqlite3.Connection, term: Callable[[int, int], None]) -> int:
    """Register the trigger functions (each calls `term(sign, value)`) and return the stored
    digest; on a file from before digests (or before `body_hash`), add the table, column and
    triggers and add the digest up once from the rows."""
    conn.execute("PRAGMA recursive_triggers = ON")
    conn.create_function("dg_item", 6, lambda s, *f: term(s, item_term_of_hash(*f)))
    conn.create_function("dg_mailbox", 5, lambda s, *f: term(s, mailbox_term(*f)))
    conn.create_function("dg_folder", 3, lambda s, *f: term(s, folder_term(*f)))
    stored = stored_digest(conn)
    if stored is not None and not _without_body_hash(conn):
        return stored
    try:
        conn.execute("BEGIN IMMEDIATE")
        if _without_body_hash(conn):  # checked again inside the write transaction
            _add_body_hash(conn)
        for statement in _statements(DIGEST_SCHEMA):
            conn.execute(statement)
        stored = recompute_digest(conn)
        conn.execute("DELETE FROM db_digest")
        conn.execute("INSERT INTO db_digest VALUES (1, ?)", (to_hex(stored),))
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")
    return stored
