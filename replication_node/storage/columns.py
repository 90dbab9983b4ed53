"""The columns the reads of the mailbox tables give back, and their rows as the store's
typed rows (`reader.py`): what `file_reads.py` reads, and `tables.py` where a write reads a
row first."""

from __future__ import annotations

import sqlite3

from dag_common.rfc822 import BodyFormat
from replication_node.storage.bodies import BODY_TEXT
from replication_node.storage.ops import flags_of
from replication_node.storage.reader import FolderRow, ItemRow, MailboxRow

# The columns a read gives back, in the order of the row types (`reader.py`).
MAILBOX_COLUMNS = "mailbox, display_name, locked, soft_deleted, change_number, uidvalidity_next"
FOLDER_COLUMNS = (
    "mailbox, folder, change_number, uidvalidity, uid_next, highest_modseq, modseq_floor"
)
_IMAP_COLUMNS = "uid, modseq, flags, received"
# An item with its body: read `FROM {bodies.ITEMS}` (the item joined to its body apart).
ITEM_COLUMNS = (
    f"mailbox, item_id, folder, subject, {BODY_TEXT}, size, change_number, deleted,"
    f" commit_time, '', format, {_IMAP_COLUMNS}"
)
# An item read for the listing written as it is read (`FROM {ITEMS}`): a body read a part at
# a time later (`body_reads.IN_BLOB`: kept in `bodies`, hashed) left NULL, its hash and size
# after it (the 10th and 16th columns); any other body as ITEM_COLUMNS reads it.
_IN_BLOB = "body_hash<>'' AND of_item_id IS NOT NULL"
ITEM_BLOB_COLUMNS = (
    f"mailbox, item_id, folder, subject, CASE WHEN {_IN_BLOB} THEN NULL ELSE {BODY_TEXT} END,"
    f" size, change_number, deleted, commit_time, CASE WHEN {_IN_BLOB} THEN body_hash ELSE ''"
    f" END, format, {_IMAP_COLUMNS}, CASE WHEN {_IN_BLOB} THEN length(data) ELSE 0 END"
)
# An item read without its body (`FROM items` is enough): the body's hash in its place.
ITEM_HEAD_COLUMNS = (
    "mailbox, item_id, folder, subject, '', size, change_number, deleted, commit_time, body_hash,"
    f" format, {_IMAP_COLUMNS}"
)


def mailbox_of(row: sqlite3.Row) -> MailboxRow:
    """A `mailboxes` row (read as MAILBOX_COLUMNS) as the store's typed row."""
    return MailboxRow(row[0], row[1], bool(row[2]), bool(row[3]), row[4], row[5])


def folder_of(row: sqlite3.Row) -> FolderRow:
    """A `folders` row (read as FOLDER_COLUMNS) as the store's typed row."""
    return FolderRow(row[0], row[1], row[2], row[3], row[4], row[5], row[6])


def item_of(row: sqlite3.Row) -> ItemRow:
    """An `items` row (read as ITEM_COLUMNS or ITEM_HEAD_COLUMNS: an item or a tombstone,
    with or without its body) as the store's row."""
    return ItemRow(
        row[0], row[1], row[2], row[3], row[4], row[5], row[6], bool(row[7]), row[8], row[9],
        BodyFormat(row[10]), row[11], row[12], flags_of(row[13]), row[14],
    )  # fmt: skip


item_head_of = item_of  # the same columns, the hash or the body left ''
