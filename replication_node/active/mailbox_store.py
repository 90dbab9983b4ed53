"""The mailbox store of an active copy: requests become validated operations.

This is where a request is checked against the current state (the mailbox exists, is not
locked by a move, the folder exists) and turned into operations with change numbers and item
ids assigned, so that every copy replays exactly the same thing.  Checks and change-number
assignment happen without an await in between, so two concurrent requests cannot both pass a
check that only one of them may pass.

A write that must first be recorded outside the log (a new mailbox's, or a restored one's,
entry in the mailbox directory) takes it as a `Claim`: awaited once the request is checked,
before anything is numbered, and the request checked again after it (the await let other
writes in).  The HTTP edge says why the claim goes first (`http/directory_claim.py`).
"""

from __future__ import annotations

from collections.abc import Callable

from dag_common.store_api import Written
from replication_node.active.copy import ActiveCopy
from replication_node.active.flag_writes import FlagWrites
from replication_node.active.folder_writes import FolderCounters, FolderWrites
from replication_node.active.item_writes import ItemWrites
from replication_node.active.store_core import Claim, admitted, check_folder, check_name, check_text
from replication_node.errors import Conflict, NotFound
from replication_node.log.operations import (
    DEFAULT_FOLDERS,
    AssignUids,
    CreateMailbox,
    DeleteMailbox,
    Operation,
    ReserveLost,
    SetMailbox,
)

__all__ = ["Claim", "FolderCounters", "MailboxStore"]


class MailboxStore(ItemWrites, FolderWrites, FlagWrites):
    """Writes and reads of the mailbox store on one active copy: its mailboxes here, its
    items, folders and flags in their parts (`item_writes`, `folder_writes`,
    `flag_writes`), over what they share (`store_core`)."""

    def __init__(self, copy: ActiveCopy) -> None:
        super().__init__(copy)
        # Mailboxes being created, purged or restored (their claim awaited, or their commit
        # in the log but not yet acknowledged): one such request at a time per mailbox.
        self._changing: set[str] = set()

    @admitted
    async def create_mailbox(
        self,
        mailbox: str,
        *,
        display_name: str = "",
        folders: list[str] | None = None,
        locked: bool = False,
        replace_soft_deleted: bool = False,
        claim: Claim | None = None,
    ) -> Written:
        """Create a mailbox (with the default folders unless told otherwise).
        `replace_soft_deleted`: a soft-deleted mailbox of that name is removed, with its
        items, in the same transaction (a move's target where an earlier move left the
        mailbox soft-deleted); a live one is always a Conflict.  `claim`: see the module."""
        check_name(mailbox)
        check_text("display_name", display_name)
        names = tuple(folders) if folders is not None else DEFAULT_FOLDERS
        for folder in names:
            check_folder(folder)
        self._check_new(mailbox, replace_soft_deleted=replace_soft_deleted)
        self._changing.add(mailbox)
        try:
            if claim is not None:
                await claim()
                self._check_new(mailbox, replace_soft_deleted=replace_soft_deleted, mine=True)
            ops: list[Operation] = []
            old = self.copy.mailbox(mailbox)
            if old is not None:  # soft-deleted: _check_new said so
                ops.append(DeleteMailbox(mailbox, self.copy.next_change_number()))
            # UIDVALIDITYs from the time, past the replaced mailbox's (RFC 3501: a folder
            # made again has a greater one)
            floor = max(self._unix_now(), old.uidvalidity_next if old is not None else 0)
            uidvalidity = self.counters.uidvalidity(mailbox, floor, max(len(names), 1))
            ops.append(
                CreateMailbox(
                    mailbox, self.copy.next_change_number(), display_name[:256], names, uidvalidity
                )
            )
            if locked:
                ops.append(SetMailbox(mailbox, self.copy.next_change_number(), locked=True))
            return await self._commit(ops)
        finally:
            self._changing.discard(mailbox)

    def _check_new(self, mailbox: str, *, replace_soft_deleted: bool, mine: bool = False) -> None:
        """`mailbox` may be created here: none of that name, or a soft-deleted one to replace,
        and no other request changing it (`mine`: this request is the one changing it)."""
        if mailbox in self._changing and not mine:
            raise Conflict(f"mailbox {mailbox!r} exists already, or is being created")
        row = self.copy.mailbox(mailbox)
        if row is None or (row.soft_deleted and replace_soft_deleted):
            return
        if row.soft_deleted:
            raise Conflict(
                f"a soft-deleted mailbox {mailbox!r} is in this database: purge it or restore "
                "it (`replication-node mailbox purge|restore`)"
            )
        raise Conflict(f"mailbox {mailbox!r} exists already")

    @admitted
    async def set_mailbox(
        self, mailbox: str, *, locked: bool | None = None, soft_deleted: bool | None = None
    ) -> Written:
        """Lock, unlock or soft-delete a mailbox."""
        check_name(mailbox)
        row = self.copy.mailbox(mailbox)
        if row is None:
            raise NotFound(f"no mailbox {mailbox!r}")
        if row.soft_deleted and soft_deleted is not False:
            raise NotFound(f"mailbox {mailbox!r} is soft-deleted")
        cn = self.copy.next_change_number()
        return await self._commit([SetMailbox(mailbox, cn, locked, soft_deleted)])

    @admitted
    async def delete_mailbox(self, mailbox: str) -> Written:
        """Remove a mailbox with its folders and items, leaving no tombstone (a cancelled
        move's target copy; the HTTP edge refuses one the mailbox directory places here)."""
        check_name(mailbox)
        if self.copy.mailbox(mailbox) is None:
            raise NotFound(f"no mailbox {mailbox!r}")
        return await self._commit([DeleteMailbox(mailbox, self.copy.next_change_number())])

    def _soft_deleted(self, mailbox: str, *, mine: bool = False) -> None:
        """`mailbox` is soft-deleted and no other request is changing it: NotFound if there
        is none, Conflict if it is live (what purge and restore act on)."""
        check_name(mailbox)
        if mailbox in self._changing and not mine:
            raise Conflict(f"another request is changing mailbox {mailbox!r} now")
        row = self.copy.mailbox(mailbox)
        if row is None:
            raise NotFound(f"no mailbox {mailbox!r}")
        if not row.soft_deleted:
            raise Conflict(f"mailbox {mailbox!r} is live, not soft-deleted")

    async def _change_soft_deleted(
        self, mailbox: str, op: Callable[[int], Operation], claim: Claim | None
    ) -> Written:
        """Commit `op(change number)` to the soft-deleted `mailbox`, after `claim`, checked
        before and after it, numbered only then."""
        self._soft_deleted(mailbox)
        self._changing.add(mailbox)
        try:
            if claim is not None:
                await claim()
                self._soft_deleted(mailbox, mine=True)
            return await self._commit([op(self.copy.next_change_number())])
        finally:
            self._changing.discard(mailbox)

    @admitted
    async def purge_mailbox(self, mailbox: str, *, claim: Claim | None = None) -> Written:
        """Remove a soft-deleted mailbox with its folders and items (Exchange's
        Remove-StoreMailbox); a live one is refused (Conflict).  `claim`: the edge's look at
        the mailbox directory."""
        check_name(mailbox)
        return await self._change_soft_deleted(
            mailbox, lambda cn: DeleteMailbox(mailbox, cn), claim
        )

    @admitted
    async def restore_mailbox(self, mailbox: str, *, claim: Claim | None = None) -> Written:
        """Make a soft-deleted mailbox live again, unlocked (Exchange's Connect-Mailbox);
        a live one is refused (Conflict).  `claim`: its entry in the mailbox directory."""
        check_name(mailbox)
        return await self._change_soft_deleted(
            mailbox, lambda cn: SetMailbox(mailbox, cn, locked=False, soft_deleted=False), claim
        )

    async def assign_uids(self) -> Written | None:
        """Number what a database from before UIDs holds (`AssignUids`), once: at the first
        mount of such a file by an active that has them, before any other write.  None:
        nothing to number (nothing is admitted then: a mount of a numbered file waits for
        no synchronous copy)."""
        if not self.copy.unnumbered():
            return None
        await self.copy.admit()
        floor = max([self._unix_now(), *(m.uidvalidity_next for m in self.copy.mailboxes())])
        return await self._commit([AssignUids(self.copy.next_change_number(), floor)])

    async def reserve_lost(self, by: int) -> Written | None:
        """Advance every folder's UIDs and modseqs and every mailbox's UIDVALIDITYs by `by`
        (`ReserveLost`: what a lossy activation's lost tail may have handed out), before any
        other write.  None: nothing to reserve (`by` 0)."""
        if by <= 0:
            return None
        await self.copy.admit()
        return await self._commit([ReserveLost(self.copy.next_change_number(), by)])
