"""The rows an operation produces: defined once here, used as they are by the LLR overlay,
written as the same columns by the database (tests/replication_node/test_ops.py holds the
two to the same rows for the same operations).  The operations themselves are the log's
(`log.operations`): what a transaction carries, typed from the store to the log and back.

A backup stamp (`RecordBackup`) produces no row: both appliers turn it into header values
(`with_backup`: the database writes them into its header, the overlay holds them until the
file has the generation that carries them).
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime

from dag_common.mailbox_digest import utf8_size
from replication_node.log.operations import BackupKind as BackupKind  # backups name it here
from replication_node.log.operations import (
    CreateMailbox,
    DeleteItem,
    PutItem,
    RecordBackup,
    SetMailbox,
)
from replication_node.storage.header import DatabaseHeader
from replication_node.storage.reader import ItemRow, MailboxRow


def mailbox_row(op: CreateMailbox) -> MailboxRow:
    return MailboxRow(op.mailbox, op.display_name, False, False, op.cn)


def set_mailbox_row(row: MailboxRow, op: SetMailbox) -> MailboxRow:
    locked = row.locked if op.locked is None else op.locked
    soft_deleted = row.soft_deleted if op.soft_deleted is None else op.soft_deleted
    return row._replace(locked=locked, soft_deleted=soft_deleted, change_number=op.cn)


def item_row(op: PutItem, commit_time: str) -> ItemRow:
    """A PutItem's row (a creation or a replacement)."""
    return ItemRow(
        op.mailbox, op.item_id, op.folder, op.subject, op.body, utf8_size(op.body), op.cn, False,
        commit_time, format=op.format,
    )  # fmt: skip


def tombstone_row(row: ItemRow | None, op: DeleteItem, commit_time: str) -> ItemRow:
    """The row a DeleteItem leaves: a tombstone, so incremental sync sees the deletion (its
    body gone, its format text)."""
    folder, subject = (row.folder, row.subject) if row is not None else ("", "")
    return ItemRow(op.mailbox, op.item_id, folder, subject, "", 0, op.cn, True, commit_time)


def with_backup(header: DatabaseHeader, op: RecordBackup) -> DatabaseHeader:
    """The header a backup stamp leaves: the last backup of its kind, and the last backup of
    any kind, which truncation counts as backed up."""
    when = datetime.fromisoformat(op.time)
    header = replace(header, last_backup_generation=op.generation, last_backup_time=when)
    if op.kind is BackupKind.FULL:
        return replace(
            header, last_full_backup_generation=op.generation, last_full_backup_time=when
        )
    return replace(
        header, last_incremental_backup_generation=op.generation, last_incremental_backup_time=when
    )
