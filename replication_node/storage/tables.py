"""The mailbox tables in SQL: their schema, a transaction's operations applied as rows,
and rows read back as the store's dicts.

The rows are those `ops` defines (the same model the LLR overlay applies), so a generation
replayed into the file and the same generation held in memory read the same.
"""

from __future__ import annotations

import sqlite3
from typing import TYPE_CHECKING, Any

from dag_common.mailbox_digest import body_hash, utf8_size
from replication_node.errors import DatabaseError
from replication_node.storage.ops import (
    CreateFolder,
    CreateMailbox,
    DeleteItem,
    DeleteMailbox,
    MalformedOperation,
    PutItem,
    RecordBackup,
    SetMailbox,
    decode,
    mailbox_row,
    tombstone_row,
)

if TYPE_CHECKING:
    from replication_node.log.events import Transaction

TABLES_SCHEMA = """
CREATE TABLE mailboxes(
  mailbox TEXT PRIMARY KEY, display_name TEXT NOT NULL, locked INTEGER NOT NULL,
  soft_deleted INTEGER NOT NULL, change_number INTEGER NOT NULL
) WITHOUT ROWID;
CREATE TABLE folders(
  mailbox TEXT NOT NULL, folder TEXT NOT NULL, change_number INTEGER NOT NULL,
  PRIMARY KEY (mailbox, folder)
) WITHOUT ROWID;
-- items keep a rowid: their bodies make rows large, and SQLite stores large rows of a
-- WITHOUT ROWID table badly (2.7x slower upserts of 1 KB rows, measured in bench/).
-- body_hash: the body's SHA-256, which the content digest counts (`digest.py`); last, as
-- a file from before it has it added (`digest.migrate_body_hash`).
CREATE TABLE items(
  mailbox TEXT NOT NULL, item_id TEXT NOT NULL, folder TEXT NOT NULL, subject TEXT NOT NULL,
  body TEXT NOT NULL, size INTEGER NOT NULL, change_number INTEGER NOT NULL,
  deleted INTEGER NOT NULL, commit_time TEXT NOT NULL, body_hash TEXT NOT NULL DEFAULT '',
  PRIMARY KEY (mailbox, item_id)
);
CREATE INDEX items_by_change ON items(mailbox, change_number);
"""


def mailbox_dict(row: sqlite3.Row) -> dict[str, Any]:
    """A `mailboxes` row as the store's dict."""
    return {
        "mailbox": row["mailbox"],
        "display_name": row["display_name"],
        "locked": bool(row["locked"]),
        "soft_deleted": bool(row["soft_deleted"]),
        "change_number": row["change_number"],
    }


def item_dict(row: sqlite3.Row) -> dict[str, Any]:
    """An `items` row (an item or a tombstone) as the store's dict."""
    return {
        "mailbox": row["mailbox"],
        "item_id": row["item_id"],
        "folder": row["folder"],
        "subject": row["subject"],
        "body": row["body"],
        "size": row["size"],
        "change_number": row["change_number"],
        "deleted": bool(row["deleted"]),
        "commit_time": row["commit_time"],
    }


_PUT = "INSERT OR REPLACE INTO items VALUES (?, ?, ?, ?, ?, ?, ?, 0, ?, ?)"


def apply_ops(
    conn: sqlite3.Connection, txn: Transaction, stamps: list[RecordBackup] | None = None
) -> int:
    """Apply one transaction's operations (`ops.decode`d: the same model the overlay
    applies, the same rows); return its highest change number.  A backup stamp touches no
    table: it is appended to `stamps`, for the caller to write into the header in the same
    SQLite transaction."""
    when = txn.commit_time.isoformat()
    puts: list[tuple[Any, ...]] = []
    last_cn = 0

    def flush_puts() -> None:
        if puts:
            conn.executemany(_PUT, puts)
            puts.clear()

    for raw in txn.ops:
        try:
            op = decode(raw)
        except MalformedOperation as exc:
            raise DatabaseError(
                f"malformed operation in generation {txn.generation} at offset {txn.offset}: {exc}"
            ) from exc
        if type(op) is RecordBackup:
            if stamps is not None:
                stamps.append(op)
            continue
        last_cn = max(last_cn, op.cn)
        if type(op) is PutItem:  # item_row's columns, without the dict (the hot path)
            size, digest = utf8_size(op.body), body_hash(op.body)
            puts.append(
                (op.mailbox, op.item_id, op.folder, op.subject, op.body, size, op.cn, when, digest)
            )
            continue
        flush_puts()
        match op:
            case CreateMailbox():
                row = mailbox_row(op)
                conn.execute(
                    "INSERT OR REPLACE INTO mailboxes VALUES (?, ?, ?, ?, ?)",
                    tuple(row[c] for c in _MAILBOX_COLUMNS),
                )
                conn.executemany(
                    "INSERT OR IGNORE INTO folders VALUES (?, ?, ?)",
                    [(op.mailbox, f, op.cn) for f in op.folders],
                )
            case SetMailbox():
                # the row as set_mailbox_row leaves it: only the fields the operation names
                sets, args = ["change_number=?"], [op.cn]
                for field in ("locked", "soft_deleted"):
                    if getattr(op, field) is not None:
                        sets.append(f"{field}=?")
                        args.append(int(getattr(op, field)))
                conn.execute(
                    f"UPDATE mailboxes SET {', '.join(sets)} WHERE mailbox=?",
                    (*args, op.mailbox),
                )
            case CreateFolder():
                conn.execute(
                    "INSERT OR IGNORE INTO folders VALUES (?, ?, ?)",
                    (op.mailbox, op.folder, op.cn),
                )
            case DeleteItem():
                tomb = tombstone_row(None, op, when)
                cur = conn.execute(
                    "UPDATE items SET deleted=1, body='', size=0, change_number=?, commit_time=?,"
                    " body_hash='' WHERE mailbox=? AND item_id=?",
                    (op.cn, when, op.mailbox, op.item_id),
                )
                if cur.rowcount == 0:
                    conn.execute(
                        "INSERT INTO items VALUES (?, ?, ?, ?, ?, ?, ?, 1, ?, '')",
                        tuple(tomb[c] for c in _ITEM_COLUMNS),
                    )
            case DeleteMailbox():
                # every row of the mailbox (the digest triggers take each one out)
                for table in ("items", "folders", "mailboxes"):
                    conn.execute(f"DELETE FROM {table} WHERE mailbox=?", (op.mailbox,))
    flush_puts()
    return last_cn


# Column order of the tables, for the rows `ops` defines.
_ITEM_COLUMNS = (
    "mailbox", "item_id", "folder", "subject", "body", "size", "change_number", "commit_time",
)  # fmt: skip
_MAILBOX_COLUMNS = ("mailbox", "display_name", "locked", "soft_deleted", "change_number")
