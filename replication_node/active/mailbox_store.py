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

import functools
import re
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

from dag_common.api_types import FOLDER_PATTERN, NAME_PATTERN
from dag_common.counted_text import CountedText
from dag_common.mailbox_digest import utf8_size
from dag_common.store_api import ItemIn, Written
from replication_node.active.copy import ActiveCopy
from replication_node.active.imap_counters import ImapCounters, UidExhausted, put_again
from replication_node.active.item_ids import new_item_id
from replication_node.errors import BadRequest, Conflict, NotFound
from replication_node.log.operations import (
    DEFAULT_FOLDERS,
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
    RenameFolder,
    ReserveLost,
    SetFlags,
    SetFolderCounters,
    SetMailbox,
    last_cn,
)
from replication_node.log.spanning import BlobRef
from replication_node.storage.ops import under
from replication_node.storage.reader import FolderRow, ItemRow, MailboxRow

T = TypeVar("T")
# A folder's UIDVALIDITY, UIDNEXT and HIGHESTMODSEQ, as a move copies them.
FolderCounters = tuple[int, int, int]
# Recorded outside the log before a write is numbered; raises (Conflict) to refuse the write.
Claim = Callable[[], Awaitable[None]]


def stage_plan(sizes: list[int], log_file_size: int) -> list[int]:
    """Which bodies (by index, of these UTF-8 sizes) to stage rather than write inline: every
    body over an eighth of a log file (one record never takes most of a generation), then
    the largest others while what stays inline is over three quarters of one (the commit
    record must fit in one generation with its frame, the operations' other fields and the
    close after it; a batch of small items that fits is never staged)."""
    large = log_file_size // 8
    chosen = [i for i, size in enumerate(sizes) if size > large]
    inline = sum(size for i, size in enumerate(sizes) if i not in chosen)
    for i in sorted(set(range(len(sizes))) - set(chosen), key=lambda i: -sizes[i]):
        if inline <= log_file_size * 3 // 4:
            break
        chosen.append(i)
        inline -= sizes[i]
    return sorted(chosen)


_NAME = re.compile(NAME_PATTERN)
_FOLDER = re.compile(FOLDER_PATTERN)
MAX_BATCH = 1000


def _check_text(field: str, value: str) -> None:
    """Text must be valid Unicode that UTF-8 can carry: a lone surrogate ("\ud800", which
    JSON can spell) cannot be written to the log.  ASCII text (most mail) is UTF-8 as it
    stands: no copy of a 36 MiB body is made to find that out."""
    if value.isascii():
        return
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise BadRequest(f"{field} is not valid UTF-8 text: {exc.reason} at {exc.start}") from exc


def _take_utf8(body: str) -> bytes | bytearray | None:
    """The UTF-8 bytes a counted body holds, taken from it (None: it holds none)."""
    return body.take_utf8() if type(body) is CountedText else None


def _check_folder(folder: str) -> None:
    if not _FOLDER.match(folder):
        raise BadRequest(f"invalid folder name {folder!r}")
    _check_text("folder", folder)


def _check_name(mailbox: str) -> None:
    if not _NAME.match(mailbox):
        raise BadRequest(f"invalid mailbox name {mailbox!r}")


def _admitted(method: Callable[..., Awaitable[T]]) -> Callable[..., Awaitable[T]]:
    """A write: the copy admits it (`ActiveCopy.admit`: its lease, its synchronous copies)
    before any change number is handed out, so a refused write leaves no gap behind."""

    @functools.wraps(method)
    async def write(self: MailboxStore, *args: Any, **kwargs: Any) -> T:
        await self.copy.admit()
        return await method(self, *args, **kwargs)

    return write


class MailboxStore:
    """Writes and reads of the mailbox store on one active copy."""

    def __init__(self, copy: ActiveCopy) -> None:
        self.copy = copy
        # Mailboxes being created, purged or restored (their claim awaited, or their commit
        # in the log but not yet acknowledged): one such request at a time per mailbox.
        self._changing: set[str] = set()
        self.counters = ImapCounters()  # UIDs, modseqs, UIDVALIDITYs handed out
        # (mailbox, item id) -> the modseq of a flag change numbered, not yet in the rows
        self._flag_modseqs: dict[tuple[str, str], int] = {}

    def _live_mailbox(self, mailbox: str, *, override_lock: bool = False) -> MailboxRow:
        _check_name(mailbox)
        row = self.copy.mailbox(mailbox)
        if row is None or row.soft_deleted:
            raise NotFound(f"no mailbox {mailbox!r}")
        if row.locked and not override_lock:
            raise Conflict(f"mailbox {mailbox!r} is locked by a move")
        return row

    async def _commit(
        self,
        ops: list[Operation],
        item_ids: tuple[str, ...] = (),
        *,
        staged: dict[int, BlobRef] | None = None,
        uids: tuple[int, ...] = (),
    ) -> Written:
        """Commit `ops`; `staged`: the bodies staged for some of them, by op index (the record
        names them where the body would be: `LogStream.commit`); `uids`: the items'."""
        committed = await self.copy.commit(ops, staged=staged)
        # The LSN names the stream's epoch as the writer made it (`log/writer.py`).
        last = max(map(last_cn, ops))
        return Written.of(committed.lsn, committed.commit_time, last, item_ids, uids)

    @_admitted
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
        _check_name(mailbox)
        _check_text("display_name", display_name)
        names = tuple(folders) if folders is not None else DEFAULT_FOLDERS
        for folder in names:
            if not _FOLDER.match(folder):
                raise BadRequest(f"invalid folder name {folder!r}")
            _check_text("folder", folder)
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

    @_admitted
    async def set_mailbox(
        self, mailbox: str, *, locked: bool | None = None, soft_deleted: bool | None = None
    ) -> Written:
        """Lock, unlock or soft-delete a mailbox."""
        _check_name(mailbox)
        row = self.copy.mailbox(mailbox)
        if row is None:
            raise NotFound(f"no mailbox {mailbox!r}")
        if row.soft_deleted and soft_deleted is not False:
            raise NotFound(f"mailbox {mailbox!r} is soft-deleted")
        cn = self.copy.next_change_number()
        return await self._commit([SetMailbox(mailbox, cn, locked, soft_deleted)])

    @_admitted
    async def delete_mailbox(self, mailbox: str) -> Written:
        """Remove a mailbox with its folders and items, leaving no tombstone (a cancelled
        move's target copy; the HTTP edge refuses one the mailbox directory places here)."""
        _check_name(mailbox)
        if self.copy.mailbox(mailbox) is None:
            raise NotFound(f"no mailbox {mailbox!r}")
        return await self._commit([DeleteMailbox(mailbox, self.copy.next_change_number())])

    def _soft_deleted(self, mailbox: str, *, mine: bool = False) -> None:
        """`mailbox` is soft-deleted and no other request is changing it: NotFound if there
        is none, Conflict if it is live (what purge and restore act on)."""
        _check_name(mailbox)
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

    @_admitted
    async def purge_mailbox(self, mailbox: str, *, claim: Claim | None = None) -> Written:
        """Remove a soft-deleted mailbox with its folders and items (Exchange's
        Remove-StoreMailbox); a live one is refused (Conflict).  `claim`: the edge's look at
        the mailbox directory."""
        _check_name(mailbox)
        return await self._change_soft_deleted(
            mailbox, lambda cn: DeleteMailbox(mailbox, cn), claim
        )

    @_admitted
    async def restore_mailbox(self, mailbox: str, *, claim: Claim | None = None) -> Written:
        """Make a soft-deleted mailbox live again, unlocked (Exchange's Connect-Mailbox);
        a live one is refused (Conflict).  `claim`: its entry in the mailbox directory."""
        _check_name(mailbox)
        return await self._change_soft_deleted(
            mailbox, lambda cn: SetMailbox(mailbox, cn, locked=False, soft_deleted=False), claim
        )

    @_admitted
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
        _check_folder(folder)
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

    @_admitted
    async def set_folder_counters(
        self,
        mailbox: str,
        folder: str,
        *,
        uid_next: int,
        highest_modseq: int,
        uidvalidity_next: int,
        override_lock: bool = False,
    ) -> Written:
        """Lift a folder's UIDNEXT and HIGHESTMODSEQ, and its mailbox's next UIDVALIDITY,
        to at least these (never lowered): a move's final sync, so that a UID the source
        gave a message expunged during the move is not given again on the target."""
        if not override_lock:
            raise BadRequest("a folder's counters are lifted only by a move (override_lock)")
        self._live_mailbox(mailbox, override_lock=override_lock)
        self._folder_row(mailbox, folder)
        op = SetFolderCounters(
            mailbox, self.copy.next_change_number(), folder, uid_next, highest_modseq,
            uidvalidity_next,
        )  # fmt: skip
        return await self._commit([op])

    @_admitted
    async def put_items(
        self, mailbox: str, items: Sequence[ItemIn], *, override_lock: bool = False
    ) -> Written:
        """Create or replace items, as one transaction; an item without an id gets one (the
        items given are left as they are: the ids are in the answer).  A body too large to
        be written inline is staged in the log first (`log/spanning.py`); the request is
        checked again once it is, and only then numbered and committed.  The items were
        validated where they were built (`ItemIn`): here they are checked against the
        mailbox."""
        self._check_items(mailbox, items, override_lock=override_lock)
        if not override_lock and any(item.uid is not None for item in items):
            raise BadRequest("a UID is given only by a move's copy (override_lock)")
        item_ids = tuple(item.item_id or new_item_id() for item in items)
        staged = await self._stage_bodies(items)
        try:
            if staged:  # the awaits let other writes in: the mailbox or a folder may be gone
                self._check_items(mailbox, items, override_lock=override_lock)
            # numbered only once the whole request is valid, with no await before the commit:
            # change numbers, and each item's UID and modseq in its folder
            folders = {f.folder: f for f in self.copy.folder_rows(mailbox)}
            ops: list[Operation] = []
            for item_id, i in zip(item_ids, items, strict=True):
                folder = folders[i.folder]
                flags = tuple(sorted(set(i.flags)))
                # none given: the commit's time, which the record has
                received = i.received.isoformat() if i.received is not None else ""
                held = None if i.item_id is None else self.copy.item(mailbox, item_id)
                if i.uid is not None:  # a move's copy: the source's UID and modseq
                    uid, modseq = i.uid, i.modseq or self.counters.modseq(folder)
                    self.counters.given(folder, uid, modseq)
                elif held is not None and put_again(held, i):  # the same item again
                    uid, modseq, flags = held.uid, held.modseq, held.flags
                    received = held.received or held.commit_time
                else:
                    (uid,) = self._uids(folder, 1)
                    modseq = self.counters.modseq(folder)
                ops.append(
                    PutItem(
                        mailbox,
                        self.copy.next_change_number(),
                        item_id,
                        i.folder,
                        i.subject,
                        i.body,
                        i.format,
                        uid,
                        modseq,
                        flags,
                        received,
                    )
                )
            uids = tuple(op.uid for op in ops if isinstance(op, PutItem))
            return await self._commit(ops, item_ids, staged=staged, uids=uids)
        except BaseException:
            if staged:
                await self.copy.abort_staged(list(staged.values()))
            raise

    def _check_items(self, mailbox: str, items: Sequence[ItemIn], *, override_lock: bool) -> None:
        """The items can be written to `mailbox`: it is live, and has their folders."""
        self._live_mailbox(mailbox, override_lock=override_lock)
        if not items:
            raise BadRequest("no items")
        if len(items) > MAX_BATCH:
            raise BadRequest(f"at most {MAX_BATCH} items per request")
        folders = set(self.copy.folders(mailbox))
        for item in items:
            if item.folder not in folders:
                raise NotFound(f"mailbox {mailbox!r} has no folder {item.folder!r}")

    async def _stage_bodies(self, items: Sequence[ItemIn]) -> dict[int, BlobRef]:
        """Stage the bodies a commit record cannot carry (`stage_plan`); by item index.  A
        body counted where it came in (`counted_text`) is not counted again, and its UTF-8
        bytes, if it holds them (a raw message's), are what is staged, as they are; every
        item lets go of them here, staged or not (the text is what the other stages read)."""
        sizes = [utf8_size(item.body) for item in items]
        utf8 = [_take_utf8(item.body) for item in items]
        staged: dict[int, BlobRef] = {}
        try:
            for i in stage_plan(sizes, self.copy.stream.log_file_size):
                data = utf8[i]
                utf8[i] = None
                staged[i] = await self.copy.stage(items[i].body if data is None else data, sizes[i])
                del data
        except BaseException:
            if staged:
                await self.copy.abort_staged(list(staged.values()))
            raise
        return staged

    @_admitted
    async def delete_item(
        self, mailbox: str, item_id: str, *, override_lock: bool = False
    ) -> Written:
        self._live_mailbox(mailbox, override_lock=override_lock)
        row = self.copy.item(mailbox, item_id)
        if row is None or row.deleted:
            raise NotFound(f"mailbox {mailbox!r} has no item {item_id!r}")
        folder = self._folder_row(mailbox, row.folder, missing=None)
        modseq = self.counters.modseq(folder) if folder is not None else 0
        return await self._commit(
            [DeleteItem(mailbox, self.copy.next_change_number(), item_id, modseq)]
        )

    # ---- IMAP: UIDs, flags, folders ------------------------------------------------------

    def _unix_now(self) -> int:
        return int(self.copy.now().timestamp())

    def _uids(self, folder: FolderRow, count: int) -> list[int]:
        try:
            return self.counters.uids(folder, count)
        except UidExhausted as exc:
            raise Conflict(str(exc)) from None

    def _folder_row(
        self, mailbox: str, folder: str, *, missing: type[Exception] | None = NotFound
    ) -> FolderRow | None:
        """A folder of a mailbox with its counters; `missing` raised when there is none."""
        row = next((f for f in self.copy.folder_rows(mailbox) if f.folder == folder), None)
        if row is None and missing is not None:
            raise missing(f"mailbox {mailbox!r} has no folder {folder!r}")
        return row

    def _chosen(
        self,
        mailbox: str,
        folder: str,
        *,
        uids: Sequence[int] | None,
        item_ids: Sequence[str] | None,
    ) -> list[ItemRow]:
        """The live items of a folder a request names by UID or by item id (one of them),
        in the order named, each once; NotFound naming the first that is not there."""
        if (uids is None) == (item_ids is None):
            raise BadRequest("name the items by uids or by item_ids (one of them)")
        named: Sequence[object] = uids if uids is not None else item_ids  # type: ignore[assignment]
        if not named:
            raise BadRequest("no items named")
        if len(named) > MAX_BATCH:
            raise BadRequest(f"at most {MAX_BATCH} items per request")
        rows = self.copy.folder_items(mailbox, folder)
        by = {r.uid: r for r in rows} if uids is not None else {r.item_id: r for r in rows}
        chosen: dict[str, ItemRow] = {}
        for key in named:
            row = by.get(key)  # type: ignore[call-overload]
            if row is None:
                what = "UID" if uids is not None else "item"
                raise NotFound(f"folder {folder!r} of {mailbox!r} has no {what} {key!r}")
            chosen.setdefault(row.item_id, row)
        return list(chosen.values())

    def _cns(self, count: int) -> int:
        """`count` change numbers (at least one), in order; the first."""
        first = self.copy.next_change_number()
        for _ in range(count - 1):
            self.copy.next_change_number()
        return first

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

    @_admitted
    async def rename_folder(
        self, mailbox: str, folder: str, to: str, *, override_lock: bool = False
    ) -> Written:
        """Rename a folder and its children (`folder/…`), their items with them; their
        UIDVALIDITY and counters kept.  Inbox is not renamed (mail is delivered there)."""
        self._live_mailbox(mailbox, override_lock=override_lock)
        _check_folder(to)
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

    @_admitted
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

    def _flags_op(
        self, mailbox: str, folder: str, chosen: list[ItemRow], *, add: Sequence[str],
        remove: Sequence[str], replace: Sequence[str] | None, modseq: int | None,
        override_lock: bool,
    ) -> SetFlags:  # fmt: skip
        """The numbered `SetFlags` of `chosen` (no await: the caller checked them)."""
        row = self._folder_row(mailbox, folder)
        assert row is not None
        if modseq is not None:
            if not override_lock:
                raise BadRequest("a modseq is given only by a move's copy (override_lock)")
            self.counters.given(row, 0, modseq)
        else:
            modseq = self.counters.modseq(row)
        return SetFlags(
            mailbox, self._cns(len(chosen)), folder, tuple(r.item_id for r in chosen), modseq,
            tuple(sorted(set(add))), tuple(sorted(set(remove))),
            None if replace is None else tuple(sorted(set(replace))),
        )  # fmt: skip

    async def _commit_flags(self, op: SetFlags) -> Written:
        """Commit a flag change; its items' modseq held (`_flag_modseqs`) until it is in the
        rows, so a conditional STORE checked meanwhile sees it."""
        for item_id in op.item_ids:
            self._flag_modseqs[(op.mailbox, item_id)] = op.modseq
        try:
            return await self._commit([op])
        finally:
            for item_id in op.item_ids:
                if self._flag_modseqs.get((op.mailbox, item_id)) == op.modseq:
                    del self._flag_modseqs[(op.mailbox, item_id)]

    def item_modseq(self, row: ItemRow) -> int:
        """An item's modseq, a flag change numbered and not yet durable counted."""
        return max(row.modseq, self._flag_modseqs.get((row.mailbox, row.item_id), 0))

    @_admitted
    async def set_flags(
        self,
        mailbox: str,
        folder: str,
        *,
        uids: Sequence[int] | None = None,
        item_ids: Sequence[str] | None = None,
        add: Sequence[str] = (),
        remove: Sequence[str] = (),
        replace: Sequence[str] | None = None,
        modseq: int | None = None,
        override_lock: bool = False,
    ) -> tuple[Written, SetFlags]:
        """Change the flags of items of a folder (a STORE): one operation and one modseq;
        with the operation, which says what each item was given.  `modseq`: the source's,
        given by a move's copy of a flag change (override_lock only)."""
        self._live_mailbox(mailbox, override_lock=override_lock)
        self._folder_row(mailbox, folder)
        if replace is not None and (add or remove):
            raise BadRequest("replace the flags, or add and remove some: not both")
        chosen = self._chosen(mailbox, folder, uids=uids, item_ids=item_ids)
        op = self._flags_op(
            mailbox, folder, chosen, add=add, remove=remove, replace=replace, modseq=modseq,
            override_lock=override_lock,
        )  # fmt: skip
        return await self._commit_flags(op), op

    @_admitted
    async def set_flags_unchanged_since(
        self,
        mailbox: str,
        folder: str,
        unchanged_since: int,
        *,
        uids: Sequence[int] | None = None,
        item_ids: Sequence[str] | None = None,
        add: Sequence[str] = (),
        remove: Sequence[str] = (),
        replace: Sequence[str] | None = None,
    ) -> tuple[Written | None, SetFlags | None, list[ItemRow]]:
        """A conditional STORE (RFC 7162 UNCHANGEDSINCE): the flags changed of those items
        whose modseq is at most `unchanged_since`, the others left as they are and answered
        (the third value: MODIFIED).  The check and the numbering have no await between
        them, and an earlier flag change not yet durable counts (`item_modseq`), so of two
        conditional STOREs racing on an item only one passes.  Nothing is written when no
        item passes (None, None, the items)."""
        self._live_mailbox(mailbox)
        self._folder_row(mailbox, folder)
        if replace is not None and (add or remove):
            raise BadRequest("replace the flags, or add and remove some: not both")
        if not 0 <= unchanged_since <= 2**63 - 1:
            raise BadRequest("unchanged_since must be within 0..2^63-1")
        chosen = self._chosen(mailbox, folder, uids=uids, item_ids=item_ids)
        passed = [r for r in chosen if self.item_modseq(r) <= unchanged_since]
        modified = [r for r in chosen if self.item_modseq(r) > unchanged_since]
        if not passed:
            return None, None, modified
        op = self._flags_op(
            mailbox, folder, passed, add=add, remove=remove, replace=replace, modseq=None,
            override_lock=False,
        )  # fmt: skip
        return await self._commit_flags(op), op, modified

    async def _move_or_copy(
        self,
        mailbox: str,
        folder: str,
        to: str,
        *,
        uids: Sequence[int] | None,
        item_ids: Sequence[str] | None,
        copy: bool,
        override_lock: bool,
    ) -> tuple[Written, list[ItemRow], list[int]]:
        self._live_mailbox(mailbox, override_lock=override_lock)
        source = self._folder_row(mailbox, folder)
        target = self._folder_row(mailbox, to)
        assert source is not None and target is not None
        if to == folder and not copy:
            raise BadRequest("an item is moved to another folder")
        chosen = self._chosen(mailbox, folder, uids=uids, item_ids=item_ids)
        new_uids = self._uids(target, len(chosen))
        modseq = self.counters.modseq(source, target)
        cn = self._cns(len(chosen))
        if copy:
            new_ids = tuple(new_item_id() for _ in chosen)
            copied = tuple(
                (r.item_id, n, u) for r, n, u in zip(chosen, new_ids, new_uids, strict=True)
            )
            written = await self._commit(
                [CopyItems(mailbox, cn, folder, to, copied, modseq)], new_ids
            )
        else:
            moved = tuple((r.item_id, u) for r, u in zip(chosen, new_uids, strict=True))
            written = await self._commit([MoveItems(mailbox, cn, folder, to, moved, modseq)])
        return written, chosen, new_uids

    @_admitted
    async def move_items(
        self,
        mailbox: str,
        folder: str,
        to: str,
        *,
        uids: Sequence[int] | None = None,
        item_ids: Sequence[str] | None = None,
        override_lock: bool = False,
    ) -> tuple[Written, list[ItemRow], list[int]]:
        """Move items to another folder in one operation (each a new UID there: MOVE);
        the written answer, the items moved and their new UIDs."""
        return await self._move_or_copy(
            mailbox, folder, to, uids=uids, item_ids=item_ids, copy=False,
            override_lock=override_lock,
        )  # fmt: skip

    @_admitted
    async def copy_items(
        self,
        mailbox: str,
        folder: str,
        to: str,
        *,
        uids: Sequence[int] | None = None,
        item_ids: Sequence[str] | None = None,
        override_lock: bool = False,
    ) -> tuple[Written, list[ItemRow], list[int]]:
        """Copy items to a folder (each a new item id and a new UID there: COPY)."""
        return await self._move_or_copy(
            mailbox, folder, to, uids=uids, item_ids=item_ids, copy=True,
            override_lock=override_lock,
        )  # fmt: skip

    @_admitted
    async def expunge(
        self,
        mailbox: str,
        folder: str,
        *,
        uids: Sequence[int] | None = None,
        override_lock: bool = False,
    ) -> tuple[Written | None, list[ItemRow]]:
        """Remove the items of a folder flagged `\\Deleted` (EXPUNGE), only those among
        `uids` when given (UID EXPUNGE): one transaction, one modseq.  (None, []) when there
        is none."""
        self._live_mailbox(mailbox, override_lock=override_lock)
        row = self._folder_row(mailbox, folder)
        assert row is not None
        if uids is not None and len(uids) > MAX_BATCH:
            raise BadRequest(f"at most {MAX_BATCH} items per request")
        wanted = set(uids) if uids is not None else None
        gone = [
            r
            for r in self.copy.folder_items(mailbox, folder)
            if "\\Deleted" in r.flags and (wanted is None or r.uid in wanted)
        ]
        if not gone:
            return None, []
        modseq = self.counters.modseq(row)
        ops: list[Operation] = [
            DeleteItem(mailbox, self.copy.next_change_number(), r.item_id, modseq) for r in gone
        ]
        return await self._commit(ops), gone
