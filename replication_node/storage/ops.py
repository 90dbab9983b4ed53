"""The rows an operation produces: defined once here, used as they are by the LLR overlay,
written as the same columns by the database (tests/replication_node/test_ops.py holds the
two to the same rows for the same operations).  The operations themselves are the log's
(`log.operations`): what a transaction carries, typed from the store to the log and back.

A backup stamp (`RecordBackup`) produces no row: both appliers turn it into header values
(`with_backup`: the database writes them into its header, the overlay holds them until the
file has the generation that carries them).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace
from datetime import datetime

from dag_common.mailbox_digest import utf8_size
from replication_node.log.operations import BackupKind as BackupKind  # backups name it here
from replication_node.log.operations import (
    CreateMailbox,
    DeleteItem,
    PutItem,
    RecordBackup,
    RenameFolder,
    SetFlags,
    SetMailbox,
)
from replication_node.storage.header import DatabaseHeader
from replication_node.storage.reader import FolderRow, ItemRow, MailboxRow

SEEN = "\\Seen"

# Where `ReserveLost` holds each counter: a folder's `uid_next` past the last 32-bit UID (it
# then has none left), its `highest_modseq` at the largest modseq, a mailbox's
# `uidvalidity_next` at the largest UIDVALIDITY.
UID_NEXT_CEILING = 2**32
MODSEQ_CEILING = 2**63 - 1
UIDVALIDITY_CEILING = 2**32 - 1


def reserved(value: int, by: int, ceiling: int) -> int:
    """A counter advanced by `by` (`ReserveLost`), held at `ceiling`, never lowered; the
    database file computes the same in SQL (`tables.reserve_sql`)."""
    return max(value, min(value + by, ceiling))


def reserved_folder(row: FolderRow, by: int) -> FolderRow:
    """A folder's row after `ReserveLost {by}`: its UIDs and modseqs advanced, and its
    `modseq_floor` lifted to its new `highest_modseq`: each of its items is then reported
    changed at it (`floored`), above every modseq the lost tail may have shown a client."""
    highest = reserved(row.highest_modseq, by, MODSEQ_CEILING)
    return row._replace(
        uid_next=reserved(row.uid_next, by, UID_NEXT_CEILING),
        highest_modseq=highest,
        modseq_floor=max(row.modseq_floor, highest),
    )


def folder_floor(folders: Iterable[FolderRow], folder: str) -> int:
    """The `modseq_floor` of `folder` among a mailbox's `folders` (0: none, or no folder)."""
    return next((f.modseq_floor for f in folders if f.folder == folder), 0)


def floored(row: ItemRow, floor: int) -> ItemRow:
    """An item as it is reported in a folder whose `modseq_floor` is `floor`: its modseq
    `max(modseq, floor)` (a lossy failover's lost tail may have changed it, with a modseq the
    copy never had; docs/concepts/imap.md, *No UID shown…*)."""
    return row if row.modseq >= floor else row._replace(modseq=floor)


def reserved_mailbox(row: MailboxRow, by: int) -> MailboxRow:
    """A mailbox's row after `ReserveLost {by}`: its next folders' UIDVALIDITYs advanced."""
    return row._replace(uidvalidity_next=reserved(row.uidvalidity_next, by, UIDVALIDITY_CEILING))


def mailbox_row(op: CreateMailbox, current: MailboxRow | None = None) -> MailboxRow:
    """The row a CreateMailbox leaves (over `current`, the row of that name if any: its
    `uidvalidity_next` never goes back)."""
    following = op.uidvalidity + len(op.folders) if op.uidvalidity else 0
    if current is not None:
        following = max(following, current.uidvalidity_next)
    return MailboxRow(op.mailbox, op.display_name, False, False, op.cn, following)


def created_folders(op: CreateMailbox) -> list[FolderRow]:
    """The folders a CreateMailbox makes, numbered from its `uidvalidity` (0: not numbered)."""
    return [
        FolderRow(op.mailbox, folder, op.cn, op.uidvalidity + i if op.uidvalidity else 0)
        for i, folder in enumerate(op.folders)
    ]


def flags_text(flags: Iterable[str]) -> str:
    """Flags as a row stores them: one string, space-separated (a flag is an atom)."""
    return " ".join(flags)


def flags_of(text: str) -> tuple[str, ...]:
    """Flags as a row stores them, back as the sorted tuple."""
    return tuple(text.split()) if text else ()


def sorted_flags(flags: Iterable[str]) -> tuple[str, ...]:
    """Flags as an item holds them: each once, sorted."""
    return tuple(sorted(set(flags)))


def flags_after(current: tuple[str, ...], op: SetFlags) -> tuple[str, ...]:
    """An item's flags once `op` is applied to them."""
    if op.replace is not None:
        return sorted_flags(op.replace)
    return sorted_flags((set(current) | set(op.add)) - set(op.remove))


def under(folder: str, parent: str) -> bool:
    """`folder` is `parent` or one of its children (`parent/…`)."""
    return folder == parent or folder.startswith(parent + "/")


def renaming(names: Iterable[str], op: RenameFolder) -> dict[str, str] | None:
    """What a RenameFolder renames among a mailbox's folders (`names`): old name to new,
    the folder and its children; None (nothing renamed) when the folder is not there, the
    new name is the folder or under it, or a new name is taken."""
    names = set(names)
    if op.folder not in names or under(op.to, op.folder):
        return None
    plan = {f: op.to + f[len(op.folder) :] for f in names if under(f, op.folder)}
    if any(new in names for new in plan.values()):
        return None
    return plan


def named_before(renames: Iterable[tuple[int, str, str]], folder: str) -> set[str]:
    """What `folder` was called before `renames` ((generation, old, new), in the order they
    were made): every name they map to it, undone last first.  Mostly one; two where items
    were already under the name a rename took: a name without a folder row of its own (an
    item put into a folder never made) does not stop a rename to it (`renaming`), and those
    items keep their name.  None for a name renamed away."""
    names = {folder}
    for _, old, new in reversed(list(renames)):
        before = set()
        for name in names:
            if under(name, new):  # renamed to it from `old`
                before.add(old + name[len(new) :])
            if not under(name, old):  # or called so already, and left as it was
                before.add(name)
        names = before
    return names


def set_mailbox_row(row: MailboxRow, op: SetMailbox) -> MailboxRow:
    locked = row.locked if op.locked is None else op.locked
    soft_deleted = row.soft_deleted if op.soft_deleted is None else op.soft_deleted
    return row._replace(locked=locked, soft_deleted=soft_deleted, change_number=op.cn)


def item_row(op: PutItem, commit_time: str) -> ItemRow:
    """A PutItem's row (a creation or a replacement)."""
    return ItemRow(
        op.mailbox, op.item_id, op.folder, op.subject, op.body, utf8_size(op.body), op.cn, False,
        commit_time, format=op.format, uid=op.uid, modseq=op.modseq, flags=op.flags,
        received=op.received or commit_time,
    )  # fmt: skip


def tombstone_row(
    row: ItemRow | None, op: DeleteItem, commit_time: str, *, cn: int | None = None
) -> ItemRow:
    """The row a DeleteItem (or a DeleteFolder, numbering each `cn`) leaves: a tombstone, so
    incremental sync sees the deletion (its body gone, its format text), keeping its folder,
    subject and UID (a resync asks what was expunged), with the expunge's modseq."""
    folder, subject, uid = (row.folder, row.subject, row.uid) if row is not None else ("", "", 0)
    return ItemRow(
        op.mailbox, op.item_id, folder, subject, "", 0, op.cn if cn is None else cn, True,
        commit_time, uid=uid, modseq=op.modseq,
    )  # fmt: skip


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
