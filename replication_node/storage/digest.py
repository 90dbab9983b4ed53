"""The content digest inside a database file (`dag_common.mailbox_digest` defines it): the
table that stores it, the triggers that keep it current with every write of the rows, and
adding it up again from the rows.

The triggers call this connection's `dg_*` functions (registered by `install_digest`), so
every write through any path of ours moves the running digest in the same transaction; an
UPDATE is a removal and an addition, and with recursive triggers on, the rows INSERT OR
REPLACE deletes fire the delete trigger too.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable

from dag_common.mailbox_digest import MODULUS, folder_term, item_term, mailbox_term, to_hex

DIGEST_SCHEMA = """
CREATE TABLE IF NOT EXISTS db_digest(id INTEGER PRIMARY KEY CHECK (id = 1), digest TEXT NOT NULL);
CREATE TRIGGER IF NOT EXISTS dg_items_ins AFTER INSERT ON items WHEN NEW.deleted = 0 BEGIN
  SELECT dg_item(1, NEW.mailbox, NEW.item_id, NEW.folder, NEW.subject, NEW.body); END;
CREATE TRIGGER IF NOT EXISTS dg_items_del AFTER DELETE ON items WHEN OLD.deleted = 0 BEGIN
  SELECT dg_item(-1, OLD.mailbox, OLD.item_id, OLD.folder, OLD.subject, OLD.body); END;
CREATE TRIGGER IF NOT EXISTS dg_items_upd AFTER UPDATE ON items BEGIN
  SELECT dg_item(-1, OLD.mailbox, OLD.item_id, OLD.folder, OLD.subject, OLD.body)
    WHERE OLD.deleted = 0;
  SELECT dg_item(1, NEW.mailbox, NEW.item_id, NEW.folder, NEW.subject, NEW.body)
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


def install_digest(conn: sqlite3.Connection, term: Callable[[int, int], None]) -> int:
    """Register the trigger functions (each calls `term(sign, value)`) and return the stored
    digest; on a file from before digests, add the table and triggers and add the digest
    up once from the rows."""
    conn.execute("PRAGMA recursive_triggers = ON")
    conn.create_function("dg_item", 6, lambda s, *f: term(s, item_term(*f)))
    conn.create_function("dg_mailbox", 5, lambda s, *f: term(s, mailbox_term(*f)))
    conn.create_function("dg_folder", 3, lambda s, *f: term(s, folder_term(*f)))
    stored = stored_digest(conn)
    if stored is not None:
        return stored
    try:
        # executescript commits what is pending first: the transaction begins in it
        conn.executescript("BEGIN IMMEDIATE;" + DIGEST_SCHEMA)
        stored = recompute_digest(conn)
        conn.execute("INSERT INTO db_digest VALUES (1, ?)", (to_hex(stored),))
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")
    return stored
