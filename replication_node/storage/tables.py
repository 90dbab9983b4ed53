"""The mailbox tables in SQL: their schema, a transaction's operations applied as rows,
and rows read back as the store's typed rows.

The rows are those `ops` defines (the same model the LLR overlay applies), so a generation
replayed into the file and the same generation held in memory read the same.
"""

from __future__ import annotations

import sqlite3
from operator import itemgetter
from typing import TYPE_CHECKING, Any

import orjson

from dag_common.mailbox_digest import (
    body_hash,
    folder_term,
    item_term_of_hash,
    mailbox_term,
    utf8_size,
)
from dag_common.rfc822 import BodyFormat
from replication_node.log.operations import (
    CreateFolder,
    CreateMailbox,
    DeleteItem,
    DeleteMailbox,
    Operation,
    PutItem,
    RecordBackup,
    SetMailbox,
)
from replication_node.storage.ops import mailbox_row, tombstone_row
from replication_node.storage.reader import ItemRow, MailboxRow

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
-- body_hash: the body's SHA-256, which the content digest counts (`digest.py`); format:
-- what the body is (`dag_common.rfc822.BodyFormat`).  Both last, as a file from before
-- them has them added (`digest._add_body_hash`, `add_format`): every statement names the
-- columns it writes, so their order in an old file does not matter.
CREATE TABLE items(
  mailbox TEXT NOT NULL, item_id TEXT NOT NULL, folder TEXT NOT NULL, subject TEXT NOT NULL,
  body TEXT NOT NULL, size INTEGER NOT NULL, change_number INTEGER NOT NULL,
  deleted INTEGER NOT NULL, commit_time TEXT NOT NULL, body_hash TEXT NOT NULL DEFAULT '',
  format TEXT NOT NULL DEFAULT 'text',
  PRIMARY KEY (mailbox, item_id)
);
CREATE INDEX items_by_change ON items(mailbox, change_number);
"""


# The columns a read gives back, in the order of the row types (`reader.py`).
MAILBOX_COLUMNS = "mailbox, display_name, locked, soft_deleted, change_number"
ITEM_COLUMNS = (
    "mailbox, item_id, folder, subject, body, size, change_number, deleted, commit_time, '', format"
)
# An item read without its body: the body's hash in its place (`ItemRow`).
ITEM_HEAD_COLUMNS = (
    "mailbox, item_id, folder, subject, '', size, change_number, deleted, commit_time, body_hash,"
    " format"
)


def mailbox_of(row: sqlite3.Row) -> MailboxRow:
    """A `mailboxes` row (read as MAILBOX_COLUMNS) as the store's typed row."""
    return MailboxRow(row[0], row[1], bool(row[2]), bool(row[3]), row[4])


def item_of(row: sqlite3.Row) -> ItemRow:
    """An `items` row (read as ITEM_COLUMNS or ITEM_HEAD_COLUMNS: an item or a tombstone,
    with or without its body) as the store's row."""
    return ItemRow(
        row[0], row[1], row[2], row[3], row[4], row[5], row[6], bool(row[7]), row[8], row[9],
        BodyFormat(row[10]),
    )  # fmt: skip


item_head_of = item_of  # the same columns, the hash or the body left ''


_PUT = (
    "INSERT OR REPLACE INTO items (mailbox, item_id, folder, subject, body, size, change_number,"
    " deleted, commit_time, body_hash, format) VALUES (?, ?, ?, ?, ?, ?, ?, 0, ?, ?, ?)"
)
_TOMBSTONE = (
    "INSERT INTO items (mailbox, item_id, folder, subject, body, size, change_number, deleted,"
    " commit_time, body_hash, format) VALUES (?, ?, ?, ?, ?, ?, ?, 1, ?, '', 'text')"
)
# The live rows among some items of one mailbox (their ids as one JSON array: one statement
# for a whole transaction's puts, whatever their number), with what their terms count.
_LIVE_ITEMS = (
    "SELECT item_id, folder, subject, body_hash, format FROM items"
    " WHERE mailbox = ? AND deleted = 0 AND item_id IN (SELECT value FROM json_each(?))"
)


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


# A put as it is written: its row for _PUT, and the row's term in the content digest.
PutRow = tuple[tuple[Any, ...], int]


def put_rows(txn: Transaction) -> list[PutRow]:
    """The rows of a transaction's puts, in order, each with its term (pure: the item's
    fields, the body's SHA-256, the term's).  A replay has them computed by the thread that
    reads its next batch while the last one's COMMIT waits on the disk: the two hashes of
    each item are a fifth of replay's time, and `TableWriter.apply` then only writes.
    The columns are taken one by one, not through a dict: this is the hot path."""
    when = txn.commit_time.isoformat()
    rows: list[PutRow] = []
    for op in txn.ops:
        if type(op) is PutItem:
            mailbox, item_id, folder, subject, body, fmt = (
                op.mailbox, op.item_id, op.folder, op.subject, op.body, op.format.value
            )  # fmt: skip
            hashed = body_hash(body)
            rows.append(
                (
                    (mailbox, item_id, folder, subject, body, utf8_size(body), op.cn, when, hashed,
                     fmt),
                    item_term_of_hash(mailbox, item_id, folder, subject, hashed, fmt),
                )
            )  # fmt: skip
    return rows


class TableWriter:
    """Applies transactions' operations (typed, as the log stream carries them: the same model
    the overlay applies, the same rows) inside the caller's SQLite transaction, and keeps what
    they add to the content digest (`delta`: the terms of the rows they write, less those of
    the rows they replace or remove; `digest.py`).

    Puts, nearly every operation, are held and written together by `flush` (at the next
    other operation, or when the caller is done): sorted by key, so that a batch of random
    item ids goes into the primary-key index in one pass instead of at random pages; the
    same rows in the end, an item put twice in the order it was put.  A put's term and the
    term of the live row it replaces (in the file, looked up with one statement per
    mailbox and transaction, or among the rows held) are counted when its transaction is
    applied, so `delta` is exact after each one.  A backup stamp touches no table: it is
    appended to `stamps`, for the caller to write into the header in the same SQLite
    transaction."""

    def __init__(self, conn: sqlite3.Connection, stamps: list[RecordBackup] | None = None):
        self._conn = conn
        self._stamps = stamps
        self._puts: list[tuple[Any, ...]] = []  # rows for _PUT, held, in log order
        self._held: dict[tuple[str, str], int] = {}  # the term each key held has (0: none)
        self.delta = 0

    def apply(self, txn: Transaction, puts: list[PutRow] | None = None) -> int:
        """Apply one transaction; its highest change number.  `puts`: its `put_rows`, if
        they were computed beforehand."""
        when = txn.commit_time.isoformat()
        prepared = iter(put_rows(txn) if puts is None else puts)
        segment: list[PutRow] = []
        last_cn = 0
        for op in txn.ops:
            if type(op) is RecordBackup:
                if self._stamps is not None:
                    self._stamps.append(op)
                continue
            last_cn = max(last_cn, op.cn)
            if type(op) is PutItem:
                segment.append(next(prepared))
                continue
            self._hold(segment)
            segment = []
            self.flush()
            self.delta += _other(self._conn, op, when)
        self._hold(segment)
        return last_cn

    def _hold(self, puts: list[PutRow]) -> None:
        """Count put rows into `delta` and hold them for `flush`."""
        if not puts:
            return
        held = self._held
        ids: dict[str, list[str]] = {}
        for row, _ in puts:
            if (row[0], row[1]) not in held:
                ids.setdefault(row[0], []).append(row[1])
        for mailbox, item_ids in ids.items():
            found = self._conn.execute(_LIVE_ITEMS, (mailbox, orjson.dumps(item_ids).decode()))
            for item_id, *fields in found:
                held[mailbox, item_id] = item_term_of_hash(mailbox, item_id, *fields)
        change = 0
        rows = self._puts
        for row, term in puts:
            key = row[0], row[1]
            change += term - held.get(key, 0)
            held[key] = term
            rows.append(row)
        self.delta += change

    def flush(self) -> None:
        """Write the rows held."""
        if self._puts:
            self._puts.sort(key=_KEY)  # stable: an item put twice keeps its last row
            self._conn.executemany(_PUT, self._puts)
            self._puts.clear()
            self._held.clear()


# By item id alone (a batch is nearly always one mailbox's): a string compares faster than a
# tuple, and the order within a mailbox is the index's.
_KEY = itemgetter(1)


def _other(conn: sqlite3.Connection, op: Operation, when: str) -> int:
    """Apply one operation other than a put or a backup stamp; what it adds to the digest."""
    delta = 0
    match op:
        case CreateMailbox():
            row = mailbox_row(op)
            delta -= _mailbox_term(conn, op.mailbox)
            conn.execute("INSERT OR REPLACE INTO mailboxes VALUES (?, ?, ?, ?, ?)", row)
            delta += mailbox_term(op.mailbox, op.display_name, False, False)
            for folder in op.folders:
                delta += _create_folder(conn, op.mailbox, folder, op.cn)
        case SetMailbox():
            # the row as set_mailbox_row leaves it: only the fields the operation names
            sets, args = ["change_number=?"], [op.cn]
            for field in ("locked", "soft_deleted"):
                if getattr(op, field) is not None:
                    sets.append(f"{field}=?")
                    args.append(int(getattr(op, field)))
            delta -= _mailbox_term(conn, op.mailbox)
            conn.execute(
                f"UPDATE mailboxes SET {', '.join(sets)} WHERE mailbox=?", (*args, op.mailbox)
            )
            delta += _mailbox_term(conn, op.mailbox)
        case CreateFolder():
            delta += _create_folder(conn, op.mailbox, op.folder, op.cn)
        case DeleteItem():
            tomb = tombstone_row(None, op, when)
            live = conn.execute(
                _LIVE_ITEMS, (op.mailbox, orjson.dumps([op.item_id]).decode())
            ).fetchone()
            if live is not None:
                delta -= item_term_of_hash(op.mailbox, *live)
            cur = conn.execute(
                "UPDATE items SET deleted=1, body='', size=0, change_number=?, commit_time=?,"
                " body_hash='', format='text' WHERE mailbox=? AND item_id=?",
                (op.cn, when, op.mailbox, op.item_id),
            )
            if cur.rowcount == 0:
                conn.execute(_TOMBSTONE, (*tomb[:7], tomb.commit_time))
        case DeleteMailbox():
            # every row of the mailbox, each one's term taken out of the digest
            delta -= mailbox_rows_digest(conn, op.mailbox)
            for table in ("items", "folders", "mailboxes"):
                conn.execute(f"DELETE FROM {table} WHERE mailbox=?", (op.mailbox,))
    return delta


def _mailbox_term(conn: sqlite3.Connection, mailbox: str) -> int:
    """The term of a mailbox's row in the file (0: it has none)."""
    row = conn.execute(
        "SELECT display_name, locked, soft_deleted FROM mailboxes WHERE mailbox=?", (mailbox,)
    ).fetchone()
    return mailbox_term(mailbox, *row) if row is not None else 0


def _create_folder(conn: sqlite3.Connection, mailbox: str, folder: str, cn: int) -> int:
    """Create a folder unless the mailbox has it; its term if it was created, else 0."""
    cur = conn.execute("INSERT OR IGNORE INTO folders VALUES (?, ?, ?)", (mailbox, folder, cn))
    return folder_term(mailbox, folder) if cur.rowcount == 1 else 0


def mailbox_rows_digest(conn: sqlite3.Connection, mailbox: str) -> int:
    """The sum of the terms of every row of a mailbox: its live items, its folders and its
    own row (not reduced)."""
    total = _mailbox_term(conn, mailbox)
    for row in conn.execute(
        "SELECT item_id, folder, subject, body_hash, format FROM items"
        " WHERE mailbox=? AND deleted=0",
        (mailbox,),
    ):
        total += item_term_of_hash(mailbox, *row)
    for (folder,) in conn.execute("SELECT folder FROM folders WHERE mailbox=?", (mailbox,)):
        total += folder_term(mailbox, folder)
    return total
