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

Folders are rows with their IMAP counters (`FolderRow`); one removed or renamed away is held
as None, which hides the file's row of that name.  An operation that changes items the
overlay does not hold changes them here when it names them (flags, moves, copies, a folder's
deletion: the rows are read from the file and held); one that changes every item of a
folder or of the database is held as a rule over the file's rows instead of as rows
(`renames`: a folder renamed, `assigned`: the UIDs `AssignUids` gave), applied to every row
read from the file (`over_file`) until the file has its generation: a rename of a folder of
100,000 messages holds no body.  A move records the UIDs it takes out of its source
(`moved_out`, by the source's UIDVALIDITY), as `tables.moved_out` does.

A body the commit staged in the log (the active's own transactions: `Transaction.staged`)
is not held: its row holds "" with the body's hash and size (as a row read without its
body), and `logged` its place in the log (`LoggedBody`), which the active reads back when a
reader or the LLR flush needs the body (`ActiveCopy`, issue 52).  The log keeps it there: its
commit is past the database file's waypoint, and a part before the waypoint is in Logs
Required, so the truncator keeps every generation an entry names, as crash recovery needs
them.  Transactions recovered at mount carry their bodies (read back once, by recovery).

Nor is a body the file holds: a row read from the file to be changed (a flag change, a
move, a copy, a delete mark) is read without its body (`FileRows.item_head`), and held so,
`in_file` naming the file's rows that hold its body: the item's own, then for a copy those
it was copied from (at any waypoint the first the file has live with the row's hash: the
source's until the copy's generation is written).  Readers take it from the file a part at
a time (`ActiveCopy`), where a flag change of a 30 MiB item was held whole until the flush
(issue 52).  The flush replays the held transactions (no body in these): the same file.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Protocol, TypeVar

import msgspec

from dag_common.counted_text import CountedText, known
from dag_common.mailbox_digest import body_hash, utf8_size
from replication_node.log.events import Transaction
from replication_node.log.operations import (
    AssignUids,
    BackupKind,
    CopyItems,
    CreateFolder,
    CreateMailbox,
    DeleteFolder,
    DeleteItem,
    DeleteMailbox,
    MoveItems,
    PutItem,
    RecordBackup,
    RenameFolder,
    ReserveLost,
    SetFlags,
    SetFolderCounters,
    SetMailbox,
    last_cn,
)
from replication_node.log.spanning import BlobRef
from replication_node.storage.header import DatabaseHeader
from replication_node.storage.ops import (
    created_folders,
    flags_after,
    item_row,
    mailbox_row,
    named_before,
    renaming,
    reserved_folder,
    reserved_mailbox,
    set_mailbox_row,
    tombstone_row,
    under,
    with_backup,
)
from replication_node.storage.reader import FolderRow, ItemRow, MailboxRow

R = TypeVar("R")


class FileRows(Protocol):
    """What the overlay reads of the database file (`Database`), rows as the file has them."""

    def mailboxes(self) -> list[MailboxRow]: ...

    def mailbox(self, name: str) -> MailboxRow | None: ...

    def item_head(self, mailbox: str, item_id: str) -> ItemRow | None:
        """The item's row without its body (its hash in the body's place)."""
        ...

    def folder_rows(self, mailbox: str | None) -> list[FolderRow]: ...

    def unassigned(self) -> list[tuple[str, str, str]]: ...


@dataclass(frozen=True, slots=True)
class LoggedBody:
    """A staged body's place in the log: its reference, and the generation of the commit
    that names it (its parts are read back from its first generation up to that one)."""

    ref: BlobRef
    through: int


def _counts_of(body: str) -> CountedText:
    """A staged body as the overlay holds it: its UTF-8 size and SHA-256, no text or bytes."""
    return known("", utf8_size=utf8_size(body), sha256=body_hash(body))


class LlrOverlay:
    """The active copy's unflushed transactions, and the rows they produce."""

    def __init__(self) -> None:
        self._txns: dict[int, list[Transaction]] = {}
        self.mailboxes: dict[str, tuple[int, MailboxRow]] = {}
        # None: removed or renamed away (the file's row of that name is hidden)
        self.folders: dict[tuple[str, str], tuple[int, FolderRow | None]] = {}
        self.items: dict[tuple[str, str], tuple[int, ItemRow]] = {}
        # the bodies of rows of `items` held as their place in the log (see the module)
        self.logged: dict[tuple[str, str], LoggedBody] = {}
        # the bodies of rows of `items` the file holds: the item ids whose rows hold it, the
        # item's own first (see the module)
        self.in_file: dict[tuple[str, str], tuple[str, ...]] = {}
        self.removed: dict[str, int] = {}  # mailbox -> generation of its removal
        # mailbox -> [(generation, folder, new name)], in log order: the file's rows renamed
        self.renames: dict[str, list[tuple[int, str, str]]] = {}
        # (mailbox, item id) -> (generation, uid, modseq) that AssignUids gave a file's row
        self.assigned: dict[tuple[str, str], tuple[int, int, int]] = {}
        # (mailbox, source folder's uidvalidity, uid) -> (generation, modseq): a message moved
        # out of a folder, as `tables.moved_out` records it
        self.moved_out: dict[tuple[str, int, int], tuple[int, int]] = {}
        # the last stamp of each kind: (generation, order seen, stamp)
        self.backups: dict[BackupKind, tuple[int, int, RecordBackup]] = {}
        self._stamps_seen = 0
        self.max_change_number = 0

    def __len__(self) -> int:
        return sum(len(v) for v in self._txns.values())

    @property
    def generations(self) -> list[int]:
        return sorted(self._txns)

    # ---- the file's rows as the overlay's generations leave them ---------------------------

    def over_file(self, row: ItemRow | None) -> ItemRow | None:
        """A row read from the file as the overlay's generations leave it: its UID if
        AssignUids gave it one, its folder renamed.  (The overlay's own row for the item, if
        any, supersedes it: the caller looks there first.)"""
        if row is None:
            return None
        assigned = self.assigned.get((row.mailbox, row.item_id))
        if assigned is not None:
            row = row._replace(uid=assigned[1], modseq=assigned[2])
        renames = self.renames.get(row.mailbox)
        if renames:
            row = row._replace(folder=self.renamed(row.mailbox, row.folder))
        return row

    def renamed(self, mailbox: str, folder: str) -> str:
        """What a folder name of the file is now, through the renames the file lacks."""
        for _, old, new in self.renames.get(mailbox, ()):
            if under(folder, old):
                folder = new + folder[len(old) :]
        return folder

    def file_names(self, mailbox: str, folder: str) -> set[str]:
        """The names in the file of what is `folder` now (`ops.named_before`)."""
        return named_before(self.renames.get(mailbox, ()), folder)

    def current_item(self, db: FileRows, mailbox: str, item_id: str) -> ItemRow | None:
        """An item as the overlay over the file has it; a row of the file without its body
        (`FileRows.item_head`)."""
        return self._current(
            self.items, mailbox, item_id, lambda: self.over_file(db.item_head(mailbox, item_id))
        )

    def current_mailbox(self, db: FileRows, name: str) -> MailboxRow | None:
        return self.mailbox(name) or (None if self.hides(name) else db.mailbox(name))

    def current_folders(self, db: FileRows, mailbox: str) -> dict[str, FolderRow]:
        """A mailbox's folders as the overlay over the file has them, by name."""
        rows = {} if self.hides(mailbox) else {r.folder: r for r in db.folder_rows(mailbox)}
        for (m, name), (_, row) in self.folders.items():
            if m == mailbox:
                if row is None:
                    rows.pop(name, None)
                else:
                    rows[name] = row
        return rows

    def _folder(self, db: FileRows, mailbox: str, folder: str) -> FolderRow | None:
        return self._current(
            self.folders,
            mailbox,
            folder,
            lambda: next((r for r in db.folder_rows(mailbox) if r.folder == folder), None),
        )

    def _current(
        self,
        entries: Mapping[tuple[str, str], tuple[int, R | None]],
        mailbox: str,
        name: str,
        from_file: Callable[[], R | None],
    ) -> R | None:
        """The row the overlay holds for (`mailbox`, `name`) in `entries` (None: removed),
        else the file's (`from_file`) unless the overlay hides the whole mailbox."""
        entry = entries.get((mailbox, name))
        if entry is not None:
            return entry[1]
        return None if self.hides(mailbox) else from_file()

    def _lift(
        self,
        db: FileRows,
        gen: int,
        mailbox: str,
        folder: str,
        uid_next: int,
        modseq: int,
        floor: int = 0,
    ) -> None:
        """A folder's counters (and its `modseq_floor`) past these (never lowered), if it
        is there."""
        row = self._folder(db, mailbox, folder)
        if row is not None:
            lifted = row._replace(
                uid_next=max(row.uid_next, uid_next),
                highest_modseq=max(row.highest_modseq, modseq),
                modseq_floor=max(row.modseq_floor, floor),
            )
            self.folders[(mailbox, folder)] = (gen, lifted)

    def _lift_uidvalidity(self, db: FileRows, gen: int, mailbox: str, following: int) -> None:
        row = self.current_mailbox(db, mailbox)
        if row is not None:
            lifted = row._replace(uidvalidity_next=max(row.uidvalidity_next, following))
            self.mailboxes[mailbox] = (gen, lifted)

    def _live_in(self, db: FileRows, mailbox: str, item_id: str, folder: str) -> ItemRow | None:
        row = self.current_item(db, mailbox, item_id)
        return row if row is not None and not row.deleted and row.folder == folder else None

    def _body_ids(self, key: tuple[str, str]) -> tuple[str, ...] | None:
        """The rows of the file holding the body of the item's current row (`in_file`),
        asked before a row made from it is held: None if the overlay holds the body (in
        memory, or in the log); the item's own if the row is the file's."""
        if key in self.items:
            return self.in_file.get(key)
        return (key[1],)

    def _hold(
        self, key: tuple[str, str], gen: int, row: ItemRow, in_file: tuple[str, ...] | None
    ) -> None:
        """Hold `row` for `key`, its body in the file's rows `in_file` (None: not there)."""
        self.items[key] = (gen, row)
        if in_file is None:
            self.in_file.pop(key, None)
        else:
            self.in_file[key] = in_file

    # ---- taking transactions ------------------------------------------------------------

    def add(self, txn: Transaction, db: FileRows) -> None:
        """Take a durable transaction; `db` reads rows not in the overlay yet.  Its staged
        bodies are held as their place in the log (see the module)."""
        staged = dict(txn.staged)
        stripped = txn.ops
        if staged:  # held without them: the LLR flush reads them back (`with_bodies`)
            # Each as its counts alone (no text, no bytes): the flush takes the body's
            # SHA-256 from it instead of hashing the bytes it reads back again.
            stripped = tuple(
                msgspec.structs.replace(op, body=_counts_of(op.body))  # type: ignore[type-var,attr-defined]
                if i in staged
                else op
                for i, op in enumerate(txn.ops)
            )
            self._txns.setdefault(txn.generation, []).append(
                Transaction(txn.position, txn.commit_time, stripped, txn.staged)
            )
        else:
            self._txns.setdefault(txn.generation, []).append(txn)
        gen = txn.generation
        when = txn.commit_time.isoformat()
        # The counters the puts lift, by folder: each folder lifted once, past the highest,
        # before the next operation that is not a put (one may read the folder) and at the
        # end, rather than a folder row read and rebuilt per put.
        lifts: dict[tuple[str, str], tuple[int, int]] = {}
        for index, op in enumerate(txn.ops):
            if type(op) is PutItem:
                self.max_change_number = max(self.max_change_number, op.cn)
                key = (op.mailbox, op.item_id)
                row = item_row(op, when)
                ref = staged.get(index)
                self.in_file.pop(key, None)
                if ref is None:
                    self.logged.pop(key, None)
                else:
                    self.logged[key] = LoggedBody(ref, gen)
                    counts = stripped[index].body  # type: ignore[union-attr]
                    row = row._replace(body="", size=counts.utf8_size, body_hash=counts.sha256)
                self.items[key] = (gen, row)
                if op.uid:
                    where = (op.mailbox, op.folder)
                    uid_next, modseq = lifts.get(where, (0, 0))
                    lifts[where] = (max(uid_next, op.uid + 1), max(modseq, op.modseq))
                continue
            self._lift_puts(db, gen, lifts)
            if type(op) is RecordBackup:
                self._stamps_seen += 1
                self.backups[op.kind] = (gen, self._stamps_seen, op)
                continue
            self.max_change_number = max(self.max_change_number, last_cn(op))
            match op:
                case CreateMailbox():
                    current = self.current_mailbox(db, op.mailbox)
                    self.mailboxes[op.mailbox] = (gen, mailbox_row(op, current))
                    for folder in created_folders(op):
                        if self._folder(db, op.mailbox, folder.folder) is None:
                            self.folders[(op.mailbox, folder.folder)] = (gen, folder)
                case SetMailbox():
                    current = self.current_mailbox(db, op.mailbox)
                    if current is not None:
                        self.mailboxes[op.mailbox] = (gen, set_mailbox_row(current, op))
                case CreateFolder():
                    if self._folder(db, op.mailbox, op.folder) is None:
                        row = FolderRow(
                            op.mailbox, op.folder, op.cn, op.uidvalidity, op.uid_next,
                            op.highest_modseq,
                        )  # fmt: skip
                        self.folders[(op.mailbox, op.folder)] = (gen, row)
                    if op.uidvalidity:
                        self._lift_uidvalidity(db, gen, op.mailbox, op.uidvalidity + 1)
                case DeleteItem():
                    self._delete(db, gen, op, when, None)
                case DeleteMailbox():
                    name = op.mailbox
                    self.mailboxes.pop(name, None)
                    self.folders = {k: v for k, v in self.folders.items() if k[0] != name}
                    self.items = {k: v for k, v in self.items.items() if k[0] != name}
                    self.logged = {k: v for k, v in self.logged.items() if k[0] != name}
                    self.in_file = {k: v for k, v in self.in_file.items() if k[0] != name}
                    self.assigned = {k: v for k, v in self.assigned.items() if k[0] != name}
                    self.moved_out = {k: v for k, v in self.moved_out.items() if k[0] != name}
                    self.renames.pop(name, None)
                    self.removed[name] = gen
                case RenameFolder():
                    self._rename(db, gen, op)
                case DeleteFolder():
                    gone = self._folder(db, op.mailbox, op.folder)
                    if gone is not None:  # the file's records go when it has the generation
                        self.moved_out = {k: v for k, v in self.moved_out.items()
                                          if k[:2] != (op.mailbox, gone.uidvalidity)}  # fmt: skip
                    for i, item_id in enumerate(op.item_ids):
                        drop = DeleteItem(op.mailbox, op.cn + i, item_id, op.modseq)
                        self._delete(db, gen, drop, when, op.folder)
                    self.folders[(op.mailbox, op.folder)] = (gen, None)
                case SetFlags():
                    for i, item_id in enumerate(op.item_ids):
                        row = self._live_in(db, op.mailbox, item_id, op.folder)
                        if row is not None:
                            changed = row._replace(
                                flags=flags_after(row.flags, op), modseq=op.modseq,
                                change_number=op.cn + i, commit_time=when,
                            )  # fmt: skip
                            key = (op.mailbox, item_id)
                            self._hold(key, gen, changed, self._body_ids(key))
                    self._lift(db, gen, op.mailbox, op.folder, 1, op.modseq)
                case MoveItems():
                    source = self._folder(db, op.mailbox, op.folder)
                    for i, (item_id, uid) in enumerate(op.items):
                        row = self._live_in(db, op.mailbox, item_id, op.folder)
                        if row is not None:
                            if row.uid and source is not None:
                                key = (op.mailbox, source.uidvalidity, row.uid)
                                self.moved_out[key] = (gen, op.modseq)
                            moved = row._replace(
                                folder=op.to, uid=uid, modseq=op.modseq,
                                change_number=op.cn + i, commit_time=when,
                            )  # fmt: skip
                            key = (op.mailbox, item_id)
                            self._hold(key, gen, moved, self._body_ids(key))
                    uids = [u for _, u in op.items]
                    self._lift(db, gen, op.mailbox, op.folder, 1, op.modseq)
                    self._lift(db, gen, op.mailbox, op.to, max(uids, default=0) + 1, op.modseq)
                case CopyItems():
                    for i, (item_id, new_id, uid) in enumerate(op.items):
                        row = self._live_in(db, op.mailbox, item_id, op.folder)
                        if row is not None:
                            copied = row._replace(
                                item_id=new_id, folder=op.to, uid=uid, modseq=op.modseq,
                                change_number=op.cn + i, commit_time=when,
                            )  # fmt: skip
                            ids = self._body_ids((op.mailbox, item_id))
                            in_file = None if ids is None else (new_id, *ids)
                            self._hold((op.mailbox, new_id), gen, copied, in_file)
                            logged = self.logged.get((op.mailbox, item_id))
                            if logged is not None:
                                self.logged[(op.mailbox, new_id)] = logged
                            else:
                                self.logged.pop((op.mailbox, new_id), None)
                    uids = [u for _, _, u in op.items]
                    self._lift(db, gen, op.mailbox, op.folder, 1, op.modseq)
                    self._lift(db, gen, op.mailbox, op.to, max(uids, default=0) + 1, op.modseq)
                case SetFolderCounters():
                    self._lift(
                        db, gen, op.mailbox, op.folder, op.uid_next, op.highest_modseq,
                        op.modseq_floor,
                    )  # fmt: skip
                    self._lift_uidvalidity(db, gen, op.mailbox, op.uidvalidity_next)
                case AssignUids():
                    self._assign(db, gen, op)
                case ReserveLost():
                    self._reserve(db, gen, op.by)
        self._lift_puts(db, gen, lifts)

    def _lift_puts(
        self, db: FileRows, gen: int, lifts: dict[tuple[str, str], tuple[int, int]]
    ) -> None:
        """The folders' counters past what the puts just taken gave (`add`), then none."""
        for (mailbox, folder), (uid_next, modseq) in lifts.items():
            self._lift(db, gen, mailbox, folder, uid_next, modseq)
        lifts.clear()

    def _delete(
        self, db: FileRows, gen: int, op: DeleteItem, when: str, folder: str | None
    ) -> None:
        """An item's tombstone (`ops.tombstone_row`); only of a live one in `folder` when
        given (a DeleteFolder's)."""
        key = (op.mailbox, op.item_id)
        current = self.current_item(db, *key)
        live = current is not None and not current.deleted
        if folder is not None and not (live and current.folder == folder):
            return
        self._hold(key, gen, tombstone_row(current, op, when), None)
        self.logged.pop(key, None)
        if live:
            self._lift(db, gen, op.mailbox, current.folder, 1, op.modseq)

    def _rename(self, db: FileRows, gen: int, op: RenameFolder) -> None:
        """A folder and its children renamed (`ops.renaming`): their rows here, the rows
        held here renamed, and the rule kept for the file's rows."""
        folders = self.current_folders(db, op.mailbox)
        plan = renaming(folders, op)
        if plan is None:
            return
        for old in plan:
            self.folders[(op.mailbox, old)] = (gen, None)
        for old, new in plan.items():
            self.folders[(op.mailbox, new)] = (
                gen,
                folders[old]._replace(folder=new, change_number=op.cn),
            )
        for key, (g, row) in list(self.items.items()):
            if key[0] == op.mailbox and row.folder in plan:
                self.items[key] = (g, row._replace(folder=plan[row.folder]))
        self.renames.setdefault(op.mailbox, []).append((gen, op.folder, op.to))

    def _names(self, db: FileRows) -> set[str]:
        """Every mailbox with a row or a folder, in the file or here."""
        names = {r.mailbox for r in db.mailboxes()} | {r.mailbox for r in db.folder_rows(None)}
        names = {name for name in names if not self.hides(name)}
        names.update(self.mailboxes)
        names.update(m for (m, _) in self.folders)
        return names

    def _reserve(self, db: FileRows, gen: int, by: int) -> None:
        """Every folder's and mailbox's counters advanced, as `tables._reserve_lost` does:
        held here as rows (one per folder; no item is read)."""
        for name in self._names(db):
            row = self.current_mailbox(db, name)
            if row is not None:
                self.mailboxes[name] = (gen, reserved_mailbox(row, by))
            for folder in self.current_folders(db, name).values():
                self.folders[(name, folder.folder)] = (gen, reserved_folder(folder, by))

    def _assign(self, db: FileRows, gen: int, op: AssignUids) -> None:
        """Number what a file from before UIDs holds, as `tables._assign_uids` does."""
        names = self._names(db)
        counters: dict[tuple[str, str], list[int]] = {}
        for name in sorted(names):
            row = self.current_mailbox(db, name)
            if row is not None:
                lifted = row._replace(
                    uidvalidity_next=max(row.uidvalidity_next, op.uidvalidity + 1)
                )
                self.mailboxes[name] = (gen, lifted)
            for folder in self.current_folders(db, name).values():
                if folder.uidvalidity == 0:
                    folder = folder._replace(uidvalidity=op.uidvalidity)
                    self.folders[(name, folder.folder)] = (gen, folder)
                counters[(name, folder.folder)] = [folder.uid_next, folder.highest_modseq + 1]
        todo: list[tuple[str, str, str]] = []
        for mailbox, _, item_id in db.unassigned():
            if not self.hides(mailbox) and (mailbox, item_id) not in self.items:
                row = self.over_file(db.item_head(mailbox, item_id))
                if row is not None and row.uid == 0:
                    todo.append((mailbox, row.folder, item_id))
        for (mailbox, item_id), (_, row) in self.items.items():
            if not row.deleted and row.uid == 0:
                todo.append((mailbox, row.folder, item_id))
        for mailbox, folder, item_id in sorted(todo):
            numbers = counters.get((mailbox, folder))
            if numbers is None:
                continue  # an item of no folder: none to number it in
            uid, modseq = numbers[0], numbers[1]
            numbers[0] += 1
            self.assigned[(mailbox, item_id)] = (gen, uid, modseq)
            entry = self.items.get((mailbox, item_id))
            if entry is not None:
                self.items[(mailbox, item_id)] = (
                    entry[0],
                    entry[1]._replace(uid=uid, modseq=modseq),
                )
            current = self._folder(db, mailbox, folder)
            assert current is not None, "numbered in a folder that is there"
            self.folders[(mailbox, folder)] = (
                gen,
                current._replace(uid_next=numbers[0], highest_modseq=modseq),
            )

    # ---- the LLR flush ------------------------------------------------------------------

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
        self.folders = {k: v for k, v in self.folders.items() if v[0] > generation}
        self.items = {k: v for k, v in self.items.items() if v[0] > generation}
        self.logged = {k: v for k, v in self.logged.items() if k in self.items}
        self.in_file = {k: v for k, v in self.in_file.items() if k in self.items}
        self.removed = {k: g for k, g in self.removed.items() if g > generation}
        self.assigned = {k: v for k, v in self.assigned.items() if v[0] > generation}
        self.moved_out = {k: v for k, v in self.moved_out.items() if v[0] > generation}
        renames = {}
        for mailbox, held in self.renames.items():
            left = [r for r in held if r[0] > generation]
            if left:
                renames[mailbox] = left
        self.renames = renames
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

    def file_body(self, mailbox: str, item_id: str) -> tuple[str, ...] | None:
        """The item ids whose rows in the file hold the body of the overlay's row of an
        item (its own first; the first the file has live with the row's hash is it), if
        the file holds it rather than the overlay (see the module)."""
        return self.in_file.get((mailbox, item_id))

    def logged_body(self, mailbox: str, item_id: str) -> LoggedBody | None:
        """Where the body of the overlay's row of an item is in the log, if it holds it
        there rather than in memory."""
        return self.logged.get((mailbox, item_id))
