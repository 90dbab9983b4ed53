"""The mailbox tables in SQL: a transaction's operations applied as rows (their schema and
its migrations: `schema.py`; the rows read back as the store's typed rows: `columns.py`;
large bodies kept apart: `bodies.py`; a put's row: `puts.py`).

The rows are those `ops` defines (the same model the LLR overlay applies), so a generation
replayed into the file and the same generation held in memory read the same.
"""

from __future__ import annotations

import sqlite3
from itertools import filterfalse, repeat
from operator import itemgetter
from typing import TYPE_CHECKING, Any

import orjson

from dag_common.mailbox_digest import (
    folder_term,
    item_term_of_hash,
    mailbox_term,
)
from replication_node.log.operations import (
    AssignUids,
    CopyItems,
    CreateFolder,
    CreateMailbox,
    DeleteFolder,
    DeleteItem,
    DeleteMailbox,
    MoveItems,
    Operation,
    PutItem,
    RecordBackup,
    RenameFolder,
    ReserveLost,
    SetFlags,
    SetFolderCounters,
    SetMailbox,
    last_cn,
)
from replication_node.storage.bodies import (
    APART,
    DROP_MAILBOX,
    IS_APART,
    copy_body,
    drop_body,
)
from replication_node.storage.body_parts import SIZE, joined, put_apart
from replication_node.storage.columns import FOLDER_COLUMNS, MAILBOX_COLUMNS, mailbox_of
from replication_node.storage.moved_out import (
    FORGET_FOLDER,
    RECORD,
)
from replication_node.storage.ops import (
    MODSEQ_CEILING,
    UID_NEXT_CEILING,
    UIDVALIDITY_CEILING,
    created_folders,
    flags_after,
    flags_of,
    flags_text,
    mailbox_row,
    renaming,
)
from replication_node.storage.puts import PutRows, Shape, put_rows, shape, statement, write_puts
from replication_node.storage.reader import FolderRow

if TYPE_CHECKING:
    from replication_node.log.events import Transaction

_TOMBSTONE = (
    "INSERT INTO items (mailbox, item_id, folder, subject, body, size, change_number, deleted,"
    " commit_time, body_hash, format, uid, modseq) VALUES (?, ?, '', '', '', 0, ?, 1, ?, '',"
    " 'text', 0, ?)"
)
_DELETE = (
    "UPDATE items SET deleted=1, body='', size=0, change_number=?, commit_time=?, body_hash='',"
    " format='text', modseq=?, flags='', received=''"
    " WHERE mailbox=? AND item_id=?"
)
# A live item of a folder, as the operations that name items by id act on it.
_LIVE_IN = (
    "SELECT folder, subject, body_hash, format, flags FROM items"
    " WHERE mailbox=? AND item_id=? AND deleted=0 AND folder=?"
)
# The live rows among some items of one mailbox (their ids as one JSON array: one statement
# for a whole transaction's puts, whatever their number), with what their terms count.
_LIVE_ITEMS = (
    "SELECT item_id, folder, subject, body_hash, format FROM items"
    " WHERE mailbox = ? AND deleted = 0 AND item_id IN (SELECT value FROM json_each(?))"
)
# The same, with whether each one's body is kept apart (a put over it drops or replaces it).
_LIVE_PUT_OVER = (
    f"SELECT item_id, folder, subject, body_hash, format, {IS_APART} FROM items"
    " WHERE mailbox = ? AND deleted = 0 AND item_id IN (SELECT value FROM json_each(?))"
)

# Whether the file has a row (live or not) with an id from the second to the third in one
# mailbox: one seek in the primary-key index.  New items' ids come in order (UUIDv7,
# `active/item_ids.py`), above every id the file has, so a transaction's puts nearly always
# replace nothing, and this tells it without `_LIVE_PUT_OVER`'s seek per id.
_ANY_BETWEEN = "SELECT EXISTS(SELECT 1 FROM items WHERE mailbox = ? AND item_id BETWEEN ? AND ?)"


class TableWriter:
    """Applies transactions' operations (typed, as the log stream carries them: the same model
    the overlay applies, the same rows) inside the caller's SQLite transaction, and keeps what
    they add to the content digest (`delta`: the terms of the rows they write, less those of
    the rows they replace or remove; `digest.py`).

    Puts, nearly every operation, are held and written together by `flush` (at the next
    other operation, or when the caller is done): sorted by key, so that a batch of random
    item ids goes into the primary-key index in one pass instead of at random pages; the
    same rows in the end, an item put twice in the order it was put.  A put's term and the
    term of the live row it replaces (among the rows held, or in the file: looked up with
    one statement per mailbox and transaction, when the file has a row in the range of its
    ids) are counted when its transaction is applied, so `delta` is exact after each one.
    A backup stamp touches no table: it is appended to `stamps`, for the caller to write
    into the header in the same SQLite transaction."""

    def __init__(self, conn: sqlite3.Connection, stamps: list[RecordBackup] | None = None):
        self._conn = conn
        self._stamps = stamps
        self._puts: list[tuple[Any, ...]] = []  # rows for _PUT(_PLAIN), held, in log order
        self._held: dict[tuple[str, str], int] = {}  # the term each key held has (0: none)
        self._large = False  # a row held has a body of `APART` bytes or more, or its parts
        self._full = False  # a row held is `_PUT`'s (not `_PUT_PLAIN`'s)
        self._apart: set[tuple[str, str]] = set()  # keys held whose file row has a body apart
        self.delta = 0

    def apply(self, txn: Transaction, puts: PutRows | None = None) -> int:
        """Apply one transaction; its highest change number.  `puts`: its `put_rows`, if
        they were computed beforehand."""
        rows, terms, given = put_rows(txn) if puts is None else puts
        ops = txn.ops
        if len(rows) == len(ops):  # puts alone, nearly every transaction: no loop over them
            if given is None:
                return 0
            self._hold(rows, terms, given)
            return given.last_cn
        when = txn.commit_time.isoformat()
        first = end = 0  # the puts since the last other operation: rows[first:end]
        last_cn = 0
        for op in ops:
            if type(op) is RecordBackup:
                if self._stamps is not None:
                    self._stamps.append(op)
                continue
            if type(op) is PutItem:
                last_cn = max(last_cn, op.cn)
                end += 1
                continue
            last_cn = max(last_cn, last_cn_of(op))
            self._hold(rows[first:end], terms[first:end])
            first = end
            self.flush()
            self.delta += _other(self._conn, op, when)
        self._hold(rows[first:end], terms[first:end])
        return last_cn

    def _hold(
        self, rows: list[tuple[Any, ...]], terms: list[int], given: Shape | None = None
    ) -> None:
        """Count put rows (with their `terms`) into `delta`, lift their folders' counters
        past their UIDs and modseqs, and hold the rows for `flush`.  Each step over the rows
        is a C loop (`map`, `filterfalse`, `countOf`, `dict.update`): a transaction's puts
        are hundreds of rows.  `given`: their `shape`, if it was found with them."""
        if not rows:
            return
        rows_shape = shape(rows) if given is None else given
        held = self._held
        keys = list(map(_ID, rows))
        missing = list(filterfalse(held.__contains__, keys))
        replacing = len(missing) < len(keys)  # a key held already, or one the file has
        mailboxes = set(map(_MAILBOX, missing))  # nearly always one
        for mailbox in mailboxes:
            item_ids = (
                list(map(_ITEM_ID, missing))
                if len(mailboxes) == 1
                else [i for m, i in missing if m == mailbox]
            )
            if not self._conn.execute(
                _ANY_BETWEEN, (mailbox, min(item_ids), max(item_ids))
            ).fetchone()[0]:
                continue  # no row of the file has an id in their range: none replaces a row
            replacing = True
            found = self._conn.execute(_LIVE_PUT_OVER, (mailbox, orjson.dumps(item_ids).decode()))
            for item_id, folder, subject, hashed, fmt, apart in found:
                held[mailbox, item_id] = item_term_of_hash(
                    mailbox, item_id, folder, subject, hashed, fmt
                )
                if apart:
                    self._apart.add((mailbox, item_id))
        if rows_shape.unique:  # each key once: what each replaces is held already
            self.delta += sum(terms) - (sum(map(held.get, keys, repeat(0))) if replacing else 0)
            held.update(zip(keys, terms, strict=True))
        else:  # an item put twice: the second replaces the first
            change = 0
            for key, term in zip(keys, terms, strict=True):
                change += term - held.get(key, 0)
                held[key] = term
            self.delta += change
        self._puts += rows
        self._large = self._large or rows_shape.large
        self._full = self._full or rows_shape.full
        counters = rows_shape.lifts
        if counters:
            self._conn.executemany(
                _LIFT,
                [(uid + 1, modseq, m, f) for (m, f), (uid, modseq) in counters.items()],
            )

    def flush(self) -> None:
        """Write the rows held: a body of `APART` bytes or more into `bodies`
        (`body_parts.put_apart`), a smaller one in its row, where it drops the body its key
        had apart."""
        if self._puts:
            self._puts.sort(key=_KEY)  # stable: an item put twice keeps its last row
            if not self._large and not self._apart:
                write_puts(self._conn, self._puts, plain=not self._full)
            else:
                in_row: list[tuple[Any, ...]] = []
                apart = self._apart
                for row in self._puts:  # in order: an item put twice keeps its last row
                    key = row[0], row[1]
                    if row[SIZE] >= APART:
                        write_puts(self._conn, in_row, plain=not self._full)
                        in_row.clear()
                        put_apart(self._conn, statement(row), row)
                        apart.add(key)
                    else:
                        if key in apart:
                            drop_body(self._conn, *key)
                            apart.discard(key)
                        in_row.append(joined(row))
                write_puts(self._conn, in_row, plain=not self._full)
            self._puts.clear()
            self._held.clear()
            self._apart.clear()
            self._large = self._full = False


# In a put's row: its key; in a key: its mailbox, its item id.
_ID = itemgetter(0, 1)
_MAILBOX, _ITEM_ID = itemgetter(0), itemgetter(1)

# A folder's counters past a UID and a modseq given (never lowered).
_LIFT = (
    "UPDATE folders SET uid_next=max(uid_next, ?), highest_modseq=max(highest_modseq, ?)"
    " WHERE mailbox=? AND folder=?"
)
_LIFT_FLOOR = "UPDATE folders SET modseq_floor=max(modseq_floor, ?) WHERE mailbox=? AND folder=?"
last_cn_of = last_cn


# By item id alone (a batch is nearly always one mailbox's): a string compares faster than a
# tuple, and the order within a mailbox is the index's.
_KEY = itemgetter(1)


def _other(conn: sqlite3.Connection, op: Operation, when: str) -> int:
    """Apply one operation other than a put or a backup stamp; what it adds to the digest.
    Each does to the rows what the overlay does (`overlay.py`; `ops.py` defines the rows)."""
    delta = 0
    match op:
        case CreateMailbox():
            current = conn.execute(
                f"SELECT {MAILBOX_COLUMNS} FROM mailboxes WHERE mailbox=?", (op.mailbox,)
            ).fetchone()
            row = mailbox_row(op, mailbox_of(current) if current is not None else None)
            delta -= _mailbox_term(conn, op.mailbox)
            conn.execute(
                f"INSERT OR REPLACE INTO mailboxes ({MAILBOX_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?)",
                row,
            )
            delta += mailbox_term(op.mailbox, op.display_name, False, False)
            for folder in created_folders(op):
                delta += _create_folder(conn, folder)
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
            row = FolderRow(
                op.mailbox, op.folder, op.cn, op.uidvalidity, op.uid_next, op.highest_modseq
            )
            delta += _create_folder(conn, row)
            if op.uidvalidity:
                conn.execute(_LIFT_UIDVALIDITY, (op.uidvalidity + 1, op.mailbox))
        case DeleteItem():
            delta += _delete_item(conn, op.mailbox, op.item_id, op.cn, op.modseq, when, None)
        case DeleteMailbox():
            # every row of the mailbox, each one's term taken out of the digest
            delta -= mailbox_rows_digest(conn, op.mailbox)
            for table in ("items", "folders", "mailboxes", "moved_out"):
                conn.execute(f"DELETE FROM {table} WHERE mailbox=?", (op.mailbox,))
            conn.execute(DROP_MAILBOX, (op.mailbox,))
        case RenameFolder():
            delta += _rename_folder(conn, op)
        case DeleteFolder():
            for i, item_id in enumerate(op.item_ids):
                delta += _delete_item(
                    conn, op.mailbox, item_id, op.cn + i, op.modseq, when, op.folder
                )
            conn.execute(FORGET_FOLDER, (op.mailbox, op.mailbox, op.folder))
            cur = conn.execute(
                "DELETE FROM folders WHERE mailbox=? AND folder=?", (op.mailbox, op.folder)
            )
            if cur.rowcount:
                delta -= folder_term(op.mailbox, op.folder)
        case SetFlags():
            for i, item_id in enumerate(op.item_ids):
                live = conn.execute(_LIVE_IN, (op.mailbox, item_id, op.folder)).fetchone()
                if live is not None:
                    flags = flags_text(flags_after(flags_of(live[4]), op))
                    conn.execute(
                        "UPDATE items SET flags=?, modseq=?, change_number=?, commit_time=?"
                        " WHERE mailbox=? AND item_id=?",
                        (flags, op.modseq, op.cn + i, when, op.mailbox, item_id),
                    )
            conn.execute(_LIFT, (1, op.modseq, op.mailbox, op.folder))
        case MoveItems():
            for i, (item_id, uid) in enumerate(op.items):
                live = conn.execute(_LIVE_IN, (op.mailbox, item_id, op.folder)).fetchone()
                if live is not None:
                    conn.execute(RECORD, (op.modseq, op.mailbox, item_id, op.folder))
                    delta -= item_term_of_hash(op.mailbox, item_id, *live[:4])
                    delta += item_term_of_hash(op.mailbox, item_id, op.to, *live[1:4])
                    conn.execute(
                        "UPDATE items SET folder=?, uid=?, modseq=?, change_number=?,"
                        " commit_time=? WHERE mailbox=? AND item_id=?",
                        (op.to, uid, op.modseq, op.cn + i, when, op.mailbox, item_id),
                    )
            _lift_both(conn, op.mailbox, op.folder, op.to, [u for _, u in op.items], op.modseq)
        case CopyItems():
            for i, (item_id, new_id, uid) in enumerate(op.items):
                live = conn.execute(_LIVE_IN, (op.mailbox, item_id, op.folder)).fetchone()
                if live is None:
                    continue
                old = conn.execute(
                    _LIVE_ITEMS, (op.mailbox, orjson.dumps([new_id]).decode())
                ).fetchone()
                if old is not None:
                    delta -= item_term_of_hash(op.mailbox, *old)
                conn.execute(  # a body apart is '' here, and copied a part at a time
                    "INSERT OR REPLACE INTO items (mailbox, item_id, folder, subject, body, size,"
                    " change_number, deleted, commit_time, body_hash, format, uid, modseq, flags,"
                    " received) SELECT mailbox, ?, ?, subject, body, size, ?, 0, ?,"
                    " body_hash, format, ?, ?, flags, received FROM items"
                    " WHERE mailbox=? AND item_id=?",
                    (new_id, op.to, op.cn + i, when, uid, op.modseq, op.mailbox, item_id),
                )
                copy_body(conn, op.mailbox, item_id, new_id)
                delta += item_term_of_hash(op.mailbox, new_id, op.to, *live[1:4])
            _lift_both(conn, op.mailbox, op.folder, op.to, [u for _, _, u in op.items], op.modseq)
        case SetFolderCounters():
            conn.execute(_LIFT, (op.uid_next, op.highest_modseq, op.mailbox, op.folder))
            if op.modseq_floor:
                conn.execute(_LIFT_FLOOR, (op.modseq_floor, op.mailbox, op.folder))
            conn.execute(_LIFT_UIDVALIDITY, (op.uidvalidity_next, op.mailbox))
        case AssignUids():
            _assign_uids(conn, op)
        case ReserveLost():
            _reserve_lost(conn, op.by)
    return delta


def reserve_sql(column: str) -> str:
    """`column` advanced by a parameter and held at another (`ops.reserved`), in SQL, with
    no sum that could pass 64 bits: parameters (ceiling - by, ceiling, by)."""
    return f"CASE WHEN {column} > ? THEN max({column}, ?) ELSE {column} + ? END"


def _reserve_lost(conn: sqlite3.Connection, by: int) -> None:
    """Every folder's UIDs and modseqs, every mailbox's UIDVALIDITYs, advanced by `by`; a
    folder's `modseq_floor` lifted to its new `highest_modseq` (`ops.reserved_folder`)."""

    def bounds(ceiling: int) -> tuple[int, int, int]:
        return ceiling - by, ceiling, by

    conn.execute(
        f"UPDATE folders SET uid_next={reserve_sql('uid_next')},"
        f" highest_modseq={reserve_sql('highest_modseq')},"
        f" modseq_floor=max(modseq_floor, {reserve_sql('highest_modseq')})",
        (*bounds(UID_NEXT_CEILING), *bounds(MODSEQ_CEILING), *bounds(MODSEQ_CEILING)),
    )
    conn.execute(
        f"UPDATE mailboxes SET uidvalidity_next={reserve_sql('uidvalidity_next')}",
        bounds(UIDVALIDITY_CEILING),
    )


_LIFT_UIDVALIDITY = "UPDATE mailboxes SET uidvalidity_next=max(uidvalidity_next, ?) WHERE mailbox=?"


def _lift_both(
    conn: sqlite3.Connection, mailbox: str, source: str, to: str, uids: list[int], modseq: int
) -> None:
    """After a move or a copy: the source's modseq, and the target's UIDs and modseq."""
    conn.execute(_LIFT, (1, modseq, mailbox, source))
    conn.execute(_LIFT, (max(uids, default=0) + 1, modseq, mailbox, to))


def _delete_item(
    conn: sqlite3.Connection,
    mailbox: str,
    item_id: str,
    cn: int,
    modseq: int,
    when: str,
    folder: str | None,
) -> int:
    """Leave a tombstone of an item (`ops.tombstone_row`); only of a live one in `folder`
    when given (a DeleteFolder's).  What it takes out of the digest."""
    live = conn.execute(_LIVE_ITEMS, (mailbox, orjson.dumps([item_id]).decode())).fetchone()
    if folder is not None and (live is None or live[1] != folder):
        return 0
    cur = conn.execute(_DELETE, (cn, when, modseq, mailbox, item_id))
    drop_body(conn, mailbox, item_id)
    if cur.rowcount == 0:
        conn.execute(_TOMBSTONE, (mailbox, item_id, cn, when, modseq))
    elif live is not None:
        conn.execute(_LIFT, (1, modseq, mailbox, live[1]))
    return -item_term_of_hash(mailbox, *live) if live is not None else 0


def _rename_folder(conn: sqlite3.Connection, op: RenameFolder) -> int:
    """Rename a folder, its children and their items (`ops.renaming`); what it changes in
    the digest: each folder's term, and each live item's, read by its body's hash (one pass
    over the folders' items)."""
    names = [
        r[0] for r in conn.execute("SELECT folder FROM folders WHERE mailbox=?", (op.mailbox,))
    ]
    plan = renaming(names, op)
    if plan is None:
        return 0
    delta = 0
    for old, new in plan.items():
        delta += folder_term(op.mailbox, new) - folder_term(op.mailbox, old)
        for item_id, subject, hashed, fmt in conn.execute(
            "SELECT item_id, subject, body_hash, format FROM items"
            " WHERE mailbox=? AND folder=? AND deleted=0",
            (op.mailbox, old),
        ).fetchall():
            delta -= item_term_of_hash(op.mailbox, item_id, old, subject, hashed, fmt)
            delta += item_term_of_hash(op.mailbox, item_id, new, subject, hashed, fmt)
        conn.execute(
            "UPDATE items SET folder=? WHERE mailbox=? AND folder=?", (new, op.mailbox, old)
        )
        conn.execute(
            "UPDATE folders SET folder=?, change_number=? WHERE mailbox=? AND folder=?",
            (new, op.cn, op.mailbox, old),
        )
    return delta


def _assign_uids(conn: sqlite3.Connection, op: AssignUids) -> None:
    """Number what a file from before UIDs holds (`AssignUids`)."""
    conn.execute("UPDATE folders SET uidvalidity=? WHERE uidvalidity=0", (op.uidvalidity,))
    conn.execute(
        "UPDATE mailboxes SET uidvalidity_next=max(uidvalidity_next, ?)", (op.uidvalidity + 1,)
    )
    folders = {
        (r[0], r[1]): [r[4], r[5] + 1]
        for r in conn.execute(f"SELECT {FOLDER_COLUMNS} FROM folders")
    }
    numbered: list[tuple[int, int, str, str]] = []
    touched: set[tuple[str, str]] = set()
    for mailbox, folder, item_id in conn.execute(
        "SELECT mailbox, folder, item_id FROM items WHERE deleted=0 AND uid=0"
        " ORDER BY mailbox, folder, item_id"
    ).fetchall():
        counters = folders.get((mailbox, folder))
        if counters is None:
            continue  # an item of no folder: none to number it in
        numbered.append((counters[0], counters[1], mailbox, item_id))
        counters[0] += 1
        touched.add((mailbox, folder))
    conn.executemany("UPDATE items SET uid=?, modseq=? WHERE mailbox=? AND item_id=?", numbered)
    conn.executemany(
        "UPDATE folders SET uid_next=?, highest_modseq=? WHERE mailbox=? AND folder=?",
        [(folders[k][0], folders[k][1], *k) for k in touched],
    )


def _mailbox_term(conn: sqlite3.Connection, mailbox: str) -> int:
    """The term of a mailbox's row in the file (0: it has none)."""
    row = conn.execute(
        "SELECT display_name, locked, soft_deleted FROM mailboxes WHERE mailbox=?", (mailbox,)
    ).fetchone()
    return mailbox_term(mailbox, *row) if row is not None else 0


def _create_folder(conn: sqlite3.Connection, row: FolderRow) -> int:
    """Create a folder unless the mailbox has it; its term if it was created, else 0."""
    cur = conn.execute(
        f"INSERT OR IGNORE INTO folders ({FOLDER_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?)", row
    )
    return folder_term(row.mailbox, row.folder) if cur.rowcount == 1 else 0


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
