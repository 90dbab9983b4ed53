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
from typing import Any

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

Row = dict[str, Any]


def mailbox_row(op: CreateMailbox) -> Row:
    return {
        "mailbox": op.mailbox,
        "display_name": op.display_name,
        "locked": False,
        "soft_deleted": False,
        "change_number": op.cn,
    }


def set_mailbox_row(row: Row, op: SetMailbox) -> Row:
    new = dict(row, change_number=op.cn)
    if op.locked is not None:
        new["locked"] = op.locked
    if op.soft_deleted is not None:
        new["soft_deleted"] = op.soft_deleted
    return new


def item_row(op: PutItem, commit_time: str) -> Row:
    """A PutItem's row (a creation or a replacement)."""
    return {
        "mailbox": op.mailbox,
        "item_id": op.item_id,
        "folder": op.folder,
        "subject": op.subject,
        "body": op.body,
        "size": utf8_size(op.body),
        "change_number": op.cn,
        "deleted": False,
        "commit_time": commit_time,
    }


def tombstone_row(row: Row | None, op: DeleteItem, commit_time: str) -> Row:
    """The row a DeleteItem leaves: a tombstone, so incremental sync sees the deletion."""
    base = row or {"mailbox": op.mailbox, "item_id": op.item_id, "folder": "", "subject": ""}
    return dict(base, body="", size=0, change_number=op.cn, deleted=True, commit_time=commit_time)


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
