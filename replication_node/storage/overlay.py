"""Lost log resilience on the active: transactions on disk in the log but not yet in the
database file.

The active writes a transaction into its database file only once `llr_depth` more
generations exist; until then it lives here, and reads merge it over the database.  Each
entry remembers the generation of its latest write, so that after generations up to F are
written to the file, exactly the entries last written at or below F are dropped.

A mailbox removed (`DeleteMailbox`) leaves no row to merge: the overlay forgets what it held
of it and remembers the removal's generation in `removed`, and until the file has that
generation every read of the mailbox ignores the file's rows (`hides`).

A backup stamp (`RecordBackup`) is held the same way (`backups`, the last of each kind), so
the active's header as the log has it (`over_header`) shows a backup as soon as the stamp
is durable, before its generation reaches the file.
"""

from __future__ import annotations

from collections.abc import Callable

from replication_node.log.events import Transaction
from replication_node.log.operations import (
    BackupKind,
    CreateFolder,
    CreateMailbox,
    DeleteItem,
    DeleteMailbox,
    PutItem,
    RecordBackup,
    SetMailbox,
)
from replication_node.storage.header import DatabaseHeader
from replication_node.storage.ops import (
    item_row,
    mailbox_row,
    set_mailbox_row,
    tombstone_row,
    with_backup,
)
from replication_node.storage.reader import ItemRow, MailboxRow


class LlrOverlay:
    """The active copy's unflushed transactions, and the rows they produce."""

    def __init__(self) -> None:
        self._txns: dict[int, list[Transaction]] = {}
        self.mailboxes: dict[str, tuple[int, MailboxRow]] = {}
        self.folders: dict[tuple[str, str], int] = {}
        self.items: dict[tuple[str, str], tuple[int, ItemRow]] = {}
        self.removed: dict[str, int] = {}  # mailbox -> generation of its removal
        # the last stamp of each kind: (generation, order seen, stamp)
        self.backups: dict[BackupKind, tuple[int, int, RecordBackup]] = {}
        self._stamps_seen = 0
        self.max_change_number = 0

    def __len__(self) -> int:
        return sum(len(v) for v in self._txns.values())

    @property
    def generations(self) -> list[int]:
        return sorted(self._txns)

    def add(
        self,
        txn: Transaction,
        *,
        db_mailbox: Callable[[str], MailboxRow | None],
        db_item: Callable[[str, str], ItemRow | None],
    ) -> None:
        """Take a durable transaction; `db_*` read rows not in the overlay yet."""
        self._txns.setdefault(txn.generation, []).append(txn)
        gen = txn.generation
        when = txn.commit_time.isoformat()
        for op in txn.ops:
            if type(op) is RecordBackup:
                self._stamps_seen += 1
                self.backups[op.kind] = (gen, self._stamps_seen, op)
                continue
            self.max_change_number = max(self.max_change_number, op.cn)
            match op:
                case CreateMailbox():
                    self.mailboxes[op.mailbox] = (gen, mailbox_row(op))
                    for folder in op.folders:
                        self.folders.setdefault((op.mailbox, folder), gen)
                case SetMailbox():
                    current = self.mailbox(op.mailbox) or (
                        None if self.hides(op.mailbox) else db_mailbox(op.mailbox)
                    )
                    if current is not None:
                        self.mailboxes[op.mailbox] = (gen, set_mailbox_row(current, op))
                case CreateFolder():
                    self.folders[(op.mailbox, op.folder)] = gen
                case PutItem():
                    self.items[(op.mailbox, op.item_id)] = (gen, item_row(op, when))
                case DeleteItem():
                    key = (op.mailbox, op.item_id)
                    current = self.item(*key) or (None if self.hides(op.mailbox) else db_item(*key))
                    self.items[key] = (gen, tombstone_row(current, op, when))
                case DeleteMailbox():
                    name = op.mailbox
                    self.mailboxes.pop(name, None)
                    self.folders = {k: g for k, g in self.folders.items() if k[0] != name}
                    self.items = {k: v for k, v in self.items.items() if k[0] != name}
                    self.removed[name] = gen

    def transactions_through(self, generation: int) -> list[Transaction]:
        """The transactions of generations up to `generation`, in log order."""
        out: list[Transaction] = []
        for gen in sorted(g for g in self._txns if g <= generation):
            out.extend(self._txns[gen])
        return out

    def forget_through(self, generation: int) -> None:
        """Drop what generations up to `generation` wrote: the database file has it now."""
        for gen in [g for g in self._txns if g <= generation]:
            del self._txns[gen]
        self.mailboxes = {k: v for k, v in self.mailboxes.items() if v[0] > generation}
        self.folders = {k: g for k, g in self.folders.items() if g > generation}
        self.items = {k: v for k, v in self.items.items() if v[0] > generation}
        self.removed = {k: g for k, g in self.removed.items() if g > generation}
        self.backups = {k: v for k, v in self.backups.items() if v[0] > generation}

    def over_header(self, header: DatabaseHeader) -> DatabaseHeader:
        """The database file's header with the backup stamps the file does not have yet."""
        if not self.backups:
            return header
        for _, _, stamp in sorted(self.backups.values(), key=lambda v: v[1]):
            header = with_backup(header, stamp)
        return header

    def hides(self, mailbox: str) -> bool:
        """The mailbox was removed in a generation the database file does not have yet: its
        rows there are gone."""
        return mailbox in self.removed

    def mailbox(self, name: str) -> MailboxRow | None:
        entry = self.mailboxes.get(name)
        return entry[1] if entry else None

    def item(self, mailbox: str, item_id: str) -> ItemRow | None:
        entry = self.items.get((mailbox, item_id))
        return entry[1] if entry else None
