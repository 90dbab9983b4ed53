"""The folder writes of the mailbox store: create, lift the counters of, rename, delete.

A part of `MailboxStore` (`store_core` says how a write is checked and numbered)."""

from __future__ import annotations

from dag_common.store_api import Written
from replication_node.active.store_core import StoreCore, admitted, check_folder
from replication_node.errors import BadRequest, Conflict
from replication_node.log.operations import (
    DEFAULT_FOLDERS,
    CreateFolder,
    DeleteFolder,
    RenameFolder,
    SetFolderCounters,
)
from replication_node.storage.ops import under

# A folder's UIDVALIDITY, UIDNEXT and HIGHESTMODSEQ, as a move copies them.
FolderCounters = tuple[int, int, int]


class FolderWrites(StoreCore):
    """Folders of a live mailbox, each with its UIDVALIDITY and counters."""

    @admitted
    async def create_folder(
        self,
        mailbox: str,
        folder: str,
        *,
        override_lock: bool = False,
        counters: FolderCounters | None = None,
    ) -> Written:
        """Create a folder, with the mailbox's next UIDVALIDITY; or with `counters` (a
        move's copy of the source's folder: its UIDVALIDITY, UIDNEXT and HIGHESTMODSEQ,
        given only with override_lock).  A folder the mailbox has keeps its own."""
        row = self._live_mailbox(mailbox, override_lock=override_lock)
        check_folder(folder)
        cn = self.copy.next_change_number
        if counters is not None:
            if not override_lock:
                raise BadRequest("a folder's counters are given only by a move (override_lock)")
            uidvalidity, uid_next, modseq = counters
            self.counters.uidvalidity_given(mailbox, uidvalidity)
            return await self._commit(
                [CreateFolder(mailbox, cn(), folder, uidvalidity, uid_next, modseq)]
            )
        floor = row.uidvalidity_next or self._unix_now()
        uidvalidity = self.counters.uidvalidity(mailbox, floor)
        return await self._commit([CreateFolder(mailbox, cn(), folder, uidvalidity)])

    @admitted
    async def set_folder_counters(
        self,
        mailbox: str,
        folder: str,
        *,
        uid_next: int,
        highest_modseq: int,
        uidvalidity_next: int,
        modseq_floor: int = 0,
        override_lock: bool = False,
    ) -> Written:
        """Lift a folder's UIDNEXT, HIGHESTMODSEQ and `modseq_floor`, and its mailbox's next
        UIDVALIDITY, to at least these (never lowered): a move's final sync, so that a UID
        the source gave a message expunged during the move is not given again on the
        target, and no item's modseq is reported lower than the source reported it."""
        if not override_lock:
            raise BadRequest("a folder's counters are lifted only by a move (override_lock)")
        if modseq_floor > highest_modseq:
            raise BadRequest(
                f"modseq_floor {modseq_floor} is above highest_modseq {highest_modseq}:"
                " no item is reported above its folder's HIGHESTMODSEQ"
            )
        self._live_mailbox(mailbox, override_lock=override_lock)
        self._folder_row(mailbox, folder)
        op = SetFolderCounters(
            mailbox, self.copy.next_change_number(), folder, uid_next, highest_modseq,
            uidvalidity_next, modseq_floor,
        )  # fmt: skip
        return await self._commit([op])

    @admitted
    async def rename_folder(
        self, mailbox: str, folder: str, to: str, *, override_lock: bool = False
    ) -> Written:
        """Rename a folder and its children (`folder/…`), their items with them; their
        UIDVALIDITY and counters kept.  Inbox is not renamed (mail is delivered there)."""
        self._live_mailbox(mailbox, override_lock=override_lock)
        check_folder(to)
        self._folder_row(mailbox, folder)
        if folder == DEFAULT_FOLDERS[0]:
            raise Conflict(f"{folder!r} is where mail is delivered: it is not renamed")
        if under(to, folder):
            raise Conflict(f"{to!r} is {folder!r} or inside it")
        names = set(self.copy.folders(mailbox))
        for name in sorted(names):
            if under(name, folder) and to + name[len(folder) :] in names:
                raise Conflict(f"mailbox {mailbox!r} has a folder {to + name[len(folder) :]!r}")
        op = RenameFolder(mailbox, self.copy.next_change_number(), folder, to)
        return await self._commit([op])

    @admitted
    async def delete_folder(
        self, mailbox: str, folder: str, *, override_lock: bool = False
    ) -> Written:
        """Remove a folder with its items (tombstones, each numbered); refused while it has
        children (RFC 3501 lets a server refuse), and for Inbox."""
        self._live_mailbox(mailbox, override_lock=override_lock)
        row = self._folder_row(mailbox, folder)
        assert row is not None
        if folder == DEFAULT_FOLDERS[0]:
            raise Conflict(f"{folder!r} is where mail is delivered: it is not removed")
        children = [f for f in self.copy.folders(mailbox) if f != folder and under(f, folder)]
        if children:
            raise Conflict(f"folder {folder!r} has children ({children[0]!r}): remove them first")
        item_ids = tuple(r.item_id for r in self.copy.folder_items(mailbox, folder))
        modseq = self.counters.modseq(row)
        cn = self._cns(len(item_ids))
        return await self._commit([DeleteFolder(mailbox, cn, folder, item_ids, modseq)])
