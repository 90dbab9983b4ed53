"""The mailbox tables' schema, and the migrations that give a file from before a column
it: each the same statements on every copy (a schema change, no row rewritten), so the
copies of one database stay alike.  `tables.py` writes and reads the rows; a file's large
bodies are moved into their own table by `body_migration.py`."""

from __future__ import annotations

import sqlite3

from replication_node.storage.bodies import BODIES_SCHEMA
from replication_node.storage.moved_out import MOVED_OUT_SCHEMA, add_moved_out

TABLES_SCHEMA = (
    """
CREATE TABLE mailboxes(
  mailbox TEXT PRIMARY KEY, display_name TEXT NOT NULL, locked INTEGER NOT NULL,
  soft_deleted INTEGER NOT NULL, change_number INTEGER NOT NULL,
  uidvalidity_next INTEGER NOT NULL DEFAULT 0
) WITHOUT ROWID;
-- a folder's IMAP counters (`reader.FolderRow`); last, as a file from before them has them
-- added (`add_imap_columns`).
CREATE TABLE folders(
  mailbox TEXT NOT NULL, folder TEXT NOT NULL, change_number INTEGER NOT NULL,
  uidvalidity INTEGER NOT NULL DEFAULT 0, uid_next INTEGER NOT NULL DEFAULT 1,
  highest_modseq INTEGER NOT NULL DEFAULT 0, modseq_floor INTEGER NOT NULL DEFAULT 0,
  PRIMARY KEY (mailbox, folder)
) WITHOUT ROWID;
-- items keep a rowid: their bodies make rows large, and SQLite stores large rows of a
-- WITHOUT ROWID table badly (2.7x slower upserts of 1 KB rows, measured in bench/).
-- body_hash: the body's SHA-256, which the content digest counts (`digest.py`); format:
-- what the body is (`dag_common.rfc822.BodyFormat`); uid, modseq, flags (space-separated)
-- and received: its IMAP state.  All last, as a file from before them has them added
-- (`digest._add_body_hash`, `add_format`, `add_imap_columns`): every statement names the
-- columns it writes, so their order in an old file does not matter.
-- body: the body's text, or '' for a body of 1 MiB or more, kept apart in `bodies`
-- (`bodies.py`), so that an UPDATE of the item never reads or writes it.  A file from
-- before that table keeps a last column `body_blob`, NULL in every row once its bodies
-- are moved (`body_migration.py`).
CREATE TABLE items(
  mailbox TEXT NOT NULL, item_id TEXT NOT NULL, folder TEXT NOT NULL, subject TEXT NOT NULL,
  body TEXT NOT NULL, size INTEGER NOT NULL, change_number INTEGER NOT NULL,
  deleted INTEGER NOT NULL, commit_time TEXT NOT NULL, body_hash TEXT NOT NULL DEFAULT '',
  format TEXT NOT NULL DEFAULT 'text', uid INTEGER NOT NULL DEFAULT 0,
  modseq INTEGER NOT NULL DEFAULT 0, flags TEXT NOT NULL DEFAULT '',
  received TEXT NOT NULL DEFAULT '',
  PRIMARY KEY (mailbox, item_id)
);
CREATE INDEX items_by_change ON items(mailbox, change_number);
CREATE INDEX items_by_uid ON items(mailbox, folder, uid);
"""
    + MOVED_OUT_SCHEMA
    + BODIES_SCHEMA
)


_IMAP_ADDED = (
    ("mailboxes", "uidvalidity_next", "INTEGER NOT NULL DEFAULT 0"),
    ("folders", "uidvalidity", "INTEGER NOT NULL DEFAULT 0"),
    ("folders", "uid_next", "INTEGER NOT NULL DEFAULT 1"),
    ("folders", "highest_modseq", "INTEGER NOT NULL DEFAULT 0"),
    # the lossy failover's floor (`ops.floored`): 0, none, in a file from before it
    ("folders", "modseq_floor", "INTEGER NOT NULL DEFAULT 0"),
    ("items", "uid", "INTEGER NOT NULL DEFAULT 0"),
    ("items", "modseq", "INTEGER NOT NULL DEFAULT 0"),
    ("items", "flags", "TEXT NOT NULL DEFAULT ''"),
    ("items", "received", "TEXT NOT NULL DEFAULT ''"),
)


def _missing_imap_columns(conn: sqlite3.Connection) -> list[tuple[str, str, str]]:
    have: dict[str, set[str]] = {}
    for table in ("mailboxes", "folders", "items"):
        have[table] = {row[1] for row in conn.execute(f"PRAGMA table_info({table})")}
    return [c for c in _IMAP_ADDED if have[c[0]] and c[1] not in have[c[0]]]


def add_imap_columns(conn: sqlite3.Connection) -> None:
    """Give a file from before IMAP's state (issue 50) its columns and index, at their
    defaults: no UID, no UIDVALIDITY (0), no flags.  The same statements on every copy (a
    schema change, no row rewritten), so copies stay alike; the numbering itself is a log
    operation (`AssignUids`, which the active commits at its first mount), so that every
    copy numbers the same items at the same point of the log."""
    add_moved_out(conn)
    if not _missing_imap_columns(conn):
        return
    conn.execute("BEGIN IMMEDIATE")
    try:
        for table, column, kind in _missing_imap_columns(conn):  # again, inside the write
            conn.execute(f"ALTER TABLE {table} ADD COLUMN {column} {kind}")
        conn.execute("CREATE INDEX IF NOT EXISTS items_by_uid ON items(mailbox, folder, uid)")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")


def add_format(conn: sqlite3.Connection) -> None:
    """Give a file from before items had a format (issue 49) the column: every item it holds
    is text, the column's default.  The same statement on every copy (a schema change, no
    row rewritten), so copies of one database stay alike; its digest is unchanged, as a text
    item's term is."""
    columns = {row[1] for row in conn.execute("PRAGMA table_info(items)")}
    if not columns or "format" in columns:
        return
    conn.execute("BEGIN IMMEDIATE")
    try:
        columns = {row[1] for row in conn.execute("PRAGMA table_info(items)")}
        if "format" not in columns:  # checked again inside the write transaction
            conn.execute("ALTER TABLE items ADD COLUMN format TEXT NOT NULL DEFAULT 'text'")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")
