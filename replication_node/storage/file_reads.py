"""The reads of a database copy's file: mailboxes, folders, items, listings and pages.

Each read goes through a connection of its own (`Database` opens them): in WAL mode it sees
the last commit and never waits for a write in progress; a worker thread's large reads
(`folder_items_apart`, `reading_apart`) through a third, so the loop's small reads never
wait on them."""

from __future__ import annotations

import contextlib
import sqlite3
import threading
from collections.abc import Callable, Iterator, Sequence

from dag_common.items_query import ItemsQuery
from dag_common.mailbox_digest import DigestRow
from dag_common.rfc822 import BodyFormat
from dag_common.store_api import FolderStatus
from replication_node.storage.bodies import BODY_TEXT, ITEMS, MESSAGE_BYTES
from replication_node.storage.body_reads import BlobBody, BlobText, read_held_part, read_part
from replication_node.storage.columns import (
    FOLDER_COLUMNS,
    ITEM_BLOB_COLUMNS,
    ITEM_COLUMNS,
    ITEM_HEAD_COLUMNS,
    MAILBOX_COLUMNS,
    folder_of,
    item_head_of,
    item_of,
    mailbox_of,
)
from replication_node.storage.ops import floored
from replication_node.storage.reader import (
    FolderRow,
    ItemRow,
    ItemsPage,
    MailboxRow,
)


class FileReads:
    """The reads `Database` offers, through the connections it opens for them."""

    _reads: sqlite3.Connection  # the loop's reads, one at a time under `_read_lock`
    _read_lock: threading.Lock
    _apart: sqlite3.Connection  # a worker thread's large reads, under `_apart_lock`
    _apart_lock: threading.Lock

    def mailboxes(self) -> list[MailboxRow]:
        with self._read_lock:
            rows = self._reads.execute(
                f"SELECT {MAILBOX_COLUMNS} FROM mailboxes ORDER BY mailbox"
            ).fetchall()
        return [mailbox_of(r) for r in rows]

    def mailbox(self, name: str) -> MailboxRow | None:
        with self._read_lock:
            row = self._reads.execute(
                f"SELECT {MAILBOX_COLUMNS} FROM mailboxes WHERE mailbox=?", (name,)
            ).fetchone()
        return mailbox_of(row) if row else None

    def folders(self, mailbox: str) -> list[str]:
        with self._read_lock:
            rows = self._reads.execute(
                "SELECT folder FROM folders WHERE mailbox=? ORDER BY folder", (mailbox,)
            ).fetchall()
        return [r[0] for r in rows]

    def folder_rows(self, mailbox: str | None) -> list[FolderRow]:
        """A mailbox's folders with their counters (None: every mailbox's), by name."""
        where, args = ("WHERE mailbox=?", (mailbox,)) if mailbox is not None else ("", ())
        with self._read_lock:
            rows = self._reads.execute(
                f"SELECT {FOLDER_COLUMNS} FROM folders {where} ORDER BY mailbox, folder", args
            ).fetchall()
        return [folder_of(r) for r in rows]

    def folder_counts(self, mailbox: str) -> dict[str, tuple[int, int]]:
        """By folder name (a folder the mailbox has or not): its live items, and those of
        them not `\\Seen`."""
        with self._read_lock:
            return {
                r[0]: (r[1], r[2])
                for r in self._reads.execute(
                    "SELECT folder, COUNT(*), SUM(instr(' ' || flags || ' ', ' \\Seen ') = 0)"
                    " FROM items WHERE mailbox=? AND deleted=0 GROUP BY folder",
                    (mailbox,),
                )
            }

    def folder_status(self, mailbox: str) -> list[FolderStatus]:
        """Each folder's counters with its live items and those not `\\Seen` (STATUS)."""
        counts = self.folder_counts(mailbox)
        return [f.status(*counts.get(f.folder, (0, 0))) for f in self.folder_rows(mailbox)]

    def folder_items(
        self, mailbox: str, folder: str, since_modseq: int = 0, *, tombstones: bool | None = None
    ) -> list[ItemRow]:
        """A folder's items without their bodies (`ItemRow`, the hash in the body's place),
        by UID: the live ones changed after `since_modseq`, and, after a modseq above 0
        (or with `tombstones`), the tombstones expunged since (`items_by_uid`)."""
        with self._read_lock:
            return _folder_items(self._reads, mailbox, folder, since_modseq, tombstones)

    def folder_items_apart(
        self, mailbox: str, folder: str, since_modseq: int = 0, *, tombstones: bool | None = None
    ) -> tuple[int, list[ItemRow]]:
        """`folder_items` through a connection of its own, for a worker thread (the loop's
        reads never wait for it), with the waypoint of the file they were read at (one read
        transaction: the active checks that no generation it did not hold in its overlay
        was flushed into the file meanwhile)."""
        with self._apart_lock:
            conn = self._apart
            conn.execute("BEGIN")
            try:
                (waypoint,) = conn.execute("SELECT waypoint FROM db_header WHERE id=1").fetchone()
                rows = _folder_items(conn, mailbox, folder, since_modseq, tombstones)
            finally:
                conn.execute("COMMIT")
        return int(waypoint), rows

    def listing_apart(
        self, mailbox: str, folder: str, since_modseq: int = 0
    ) -> Callable[[], list[ItemRow] | None]:
        """`folder_items` for a worker thread (`folder_items_apart`)."""
        tombstones = since_modseq > 0
        return lambda: self.folder_items_apart(
            mailbox, folder, since_modseq, tombstones=tombstones
        )[1]

    def bodies_apart(self, mailbox: str, ids: Sequence[str]) -> tuple[FileReads, Held]:
        """The file to read the bodies of `ids` from off the loop (this one), and what is held
        of them apart from it (nothing)."""
        return self, {}

    @contextlib.contextmanager
    def reading_apart(self) -> Iterator[sqlite3.Connection]:
        """The worker threads' connection, in one read transaction for the block: for reads
        made a row at a time (`message_body`) off the loop."""
        with self._apart_lock:
            conn = self._apart
            conn.execute("BEGIN")
            try:
                yield conn
            finally:
                conn.execute("COMMIT")

    def moved_out(self, mailbox: str, uidvalidity: int, since_modseq: int) -> list[int]:
        """The UIDs moved out of the folder of `uidvalidity` after `since_modseq`."""
        with self._read_lock:
            rows = self._reads.execute(
                "SELECT uid FROM moved_out WHERE mailbox=? AND uidvalidity=? AND modseq>?"
                " ORDER BY uid",
                (mailbox, uidvalidity, since_modseq),
            ).fetchall()
        return [r[0] for r in rows]

    def unassigned(self) -> list[tuple[str, str, str]]:
        """(mailbox, folder, item id) of the live items without a UID (a file from before
        UIDs: `AssignUids`), in the order that numbers them."""
        with self._read_lock:
            rows = self._reads.execute(
                "SELECT mailbox, folder, item_id FROM items WHERE deleted=0 AND uid=0"
                " ORDER BY mailbox, folder, item_id"
            ).fetchall()
        return [(r[0], r[1], r[2]) for r in rows]

    def unnumbered(self) -> bool:
        """Whether anything here waits for `AssignUids`: a mailbox or folder without a
        UIDVALIDITY, or a live item without a UID."""
        with self._read_lock:
            row = self._reads.execute(
                "SELECT EXISTS(SELECT 1 FROM mailboxes WHERE uidvalidity_next=0)"
                " OR EXISTS(SELECT 1 FROM folders WHERE uidvalidity=0)"
                " OR EXISTS(SELECT 1 FROM items WHERE deleted=0 AND uid=0)"
            ).fetchone()
        return bool(row[0])

    def items(self, mailbox: str, since_change: int = 0, limit: int | None = None) -> list[ItemRow]:
        """Items (and tombstones) of a mailbox changed after `since_change`, by change number;
        the first `limit` of them when given."""
        with self._read_lock:
            rows = self._reads.execute(
                f"SELECT {ITEM_COLUMNS} FROM {ITEMS} WHERE mailbox=? AND change_number>?"
                " ORDER BY change_number LIMIT ?",
                (mailbox, since_change, -1 if limit is None else limit),
            ).fetchall()
        return [item_of(r) for r in rows]

    def digest_rows(self, mailbox: str) -> list[DigestRow]:
        """A mailbox's items and tombstones as its digest counts them: each body by the
        `body_hash` the row keeps, never the body (a mailbox of gigabytes is not read back
        to be hashed).  The hash was taken from the body as it was written; a body damaged
        on disk since is the scrub's to find (`recompute_digest`)."""
        with self._read_lock:
            rows = self._reads.execute(
                "SELECT item_id, folder, subject, deleted, change_number, body_hash, format"
                " FROM items WHERE mailbox=?",
                (mailbox,),
            ).fetchall()
        return [DigestRow(r[0], r[1], r[2], bool(r[3]), r[4], r[5], "", r[6]) for r in rows]

    def live_count(self, mailbox: str, since_change: int) -> int:
        """How many live items (not tombstones) of a mailbox changed after `since_change`."""
        with self._read_lock:
            (count,) = self._reads.execute(
                "SELECT COUNT(*) FROM items WHERE mailbox=? AND change_number>? AND deleted=0",
                (mailbox, since_change),
            ).fetchone()
        return int(count)

    def items_page(self, mailbox: str, query: ItemsQuery, *, blobs: bool = False) -> ItemsPage:
        """The first `query.limit` changes after `query.since_change` (see `ItemsPage`; no
        `limit`: every one); with `page_bytes`, no more than reach that many bytes
        (`ItemRow.listed_size`: of bodies, or without `bodies` of the rows as listed; at least
        one change).  The rows are read one at a time, so a page cut by bytes reads no body
        past its end: 2,000 items of 30 MiB asked for at once are a page of three.  Without
        `bodies` no body is read at all: each row carries the hash the digest keeps
        (`ItemRow`).  With `blobs`, a body kept apart (`bodies.py`) is not read: the row's
        body is a `BlobText`, read a part at a time when it is written (`body_part`; the
        listing's, `items_stream`)."""
        since_change, limit, bodies = query.since_change, query.limit, query.bodies
        columns, source, row_of = _item_reads(bodies)
        if bodies and blobs:
            columns, row_of = ITEM_BLOB_COLUMNS, self._blob_row_of
        rows: list[ItemRow] = []
        held, cut = 0, False
        with self._read_lock:
            cursor = self._reads.execute(
                f"SELECT {columns} FROM {source} WHERE mailbox=? AND change_number>?"
                " ORDER BY change_number LIMIT ?",
                (mailbox, since_change, -1 if limit is None else limit),  # -1: no LIMIT
            )
            try:
                for r in cursor:
                    row = row_of(r)
                    rows.append(row)
                    held += row.listed_size(bodies)
                    if query.page_bytes is not None and held >= query.page_bytes:
                        cut = True
                        break
            finally:
                cursor.close()
        if not cut and (limit is None or len(rows) < limit):
            return ItemsPage(rows, max([since_change, *(r.change_number for r in rows)]), True)
        return ItemsPage(rows, rows[-1].change_number, False)

    def _blob_row_of(self, r: sqlite3.Row) -> ItemRow:
        row = item_of(r)
        if r[4] is not None:  # its body read whole (`ITEM_BLOB_COLUMNS`)
            return row
        head = BlobBody(row.mailbox, row.item_id, row.format, row.subject, r[15], row.body_hash)
        return row._replace(body=BlobText(head, self.body_part), body_hash="")

    def body_part(self, body: BlobBody, offset: int) -> bytes:
        """A part of `body` from `offset`, read through the loop's connection in a read
        transaction of its own (`body_reads.read_part`: `BodyChanged` if the row no longer
        holds that body)."""
        with self._read_lock:
            self._reads.execute("BEGIN")
            try:
                return read_part(self._reads, body, offset)
            finally:
                self._reads.execute("COMMIT")

    def held_part(self, ids: Sequence[str], body: BlobBody, offset: int) -> bytes:
        """A part of an LLR overlay row's body that this file holds, from the first of `ids`
        that holds it (`body_reads.read_held_part`), in a read transaction of its own."""
        with self._read_lock:
            self._reads.execute("BEGIN")
            try:
                return read_held_part(self._reads, ids, body, offset)
            finally:
                self._reads.execute("COMMIT")

    def item_head(self, mailbox: str, item_id: str) -> ItemRow | None:
        """An item's row without its body (`ItemRow`: its hash in the body's place)."""
        return self._item(mailbox, item_id, bodies=False)

    def item(self, mailbox: str, item_id: str) -> ItemRow | None:
        return self._item(mailbox, item_id, bodies=True)

    def _item(self, mailbox: str, item_id: str, *, bodies: bool) -> ItemRow | None:
        columns, source, row_of = _item_reads(bodies)
        with self._read_lock:
            row = self._reads.execute(
                f"SELECT {columns} FROM {source} WHERE mailbox=? AND item_id=?",
                (mailbox, item_id),
            ).fetchone()
        return row_of(row) if row else None


def _item_reads(bodies: bool) -> tuple[str, str, Callable[[sqlite3.Row], ItemRow]]:
    """How items are read with their bodies or (without `bodies`) with their hashes in the
    bodies' place: the columns, the table (joined to the bodies') and the row they make."""
    if bodies:
        return ITEM_COLUMNS, ITEMS, item_of
    return ITEM_HEAD_COLUMNS, "items", item_head_of


def _folder_items(
    conn: sqlite3.Connection,
    mailbox: str,
    folder: str,
    since_modseq: int,
    tombstones: bool | None,
) -> list[ItemRow]:
    if tombstones is None:
        tombstones = since_modseq > 0
    found = conn.execute(
        "SELECT modseq_floor FROM folders WHERE mailbox=? AND folder=?", (mailbox, folder)
    ).fetchone()
    floor = found[0] if found else 0
    # below the folder's floor every item counts as changed (`ops.floored`)
    since = 0 if floor > since_modseq else since_modseq
    rows = conn.execute(
        f"SELECT {ITEM_HEAD_COLUMNS} FROM items WHERE mailbox=? AND folder=?"
        " AND (?=0 OR modseq>?) AND (deleted=0 OR ?) ORDER BY uid, item_id",
        (mailbox, folder, since, since, int(tombstones)),
    ).fetchall()
    return [floored(item_head_of(r), floor) for r in rows]


StoredBody = tuple[str, BodyFormat, str]  # an item's body, its format, its subject
# What a reader holds of some item ids apart from its file (the active's LLR overlay): an id's
# body (a `BlobText` read a part at a time: from the log, or from the file's rows that hold a
# copy's), or None (deleted, or its mailbox removed in a generation the file does not have
# yet).  An id absent is read from the file.
Held = dict[str, StoredBody | None]
StoredBytes = tuple[bytes | str, BodyFormat, str]  # `message_stored`'s: a message as its bytes


def message_body(conn: sqlite3.Connection, mailbox: str, item_id: str) -> StoredBody | None:
    """A live item's body, format and subject, read through `conn` (`reading_apart`); None
    for no such item or a tombstone."""
    row = conn.execute(
        f"SELECT {BODY_TEXT}, format, subject FROM {ITEMS}"
        " WHERE mailbox=? AND item_id=? AND deleted=0",
        (mailbox, item_id),
    ).fetchone()
    return None if row is None else (row[0], BodyFormat(row[1]), row[2])


def message_stored(conn: sqlite3.Connection, mailbox: str, item_id: str) -> StoredBytes | None:
    """`message_body`, but a message kept as UTF-8 (`BodyFormat.MESSAGE`: the bytes it
    serves are its body's UTF-8) comes as bytes (`bodies.MESSAGE_BYTES`): no str decoded
    only to be encoded again."""
    row = conn.execute(
        f"SELECT CASE format WHEN ? THEN {MESSAGE_BYTES} ELSE {BODY_TEXT} END, format, subject"
        f" FROM {ITEMS} WHERE mailbox=? AND item_id=? AND deleted=0",
        (BodyFormat.MESSAGE.value, mailbox, item_id),
    ).fetchone()
    return None if row is None else (row[0], BodyFormat(row[1]), row[2])
