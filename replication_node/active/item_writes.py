"""The item writes of the mailbox store: put (large bodies staged first), delete, move,
copy, expunge.

A part of `MailboxStore` (`store_core` says how a write is checked and numbered)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from dag_common.counted_text import CountedText, is_bytes_only, text_of
from dag_common.mailbox_digest import utf8_size
from dag_common.store_api import ItemIn, Written
from replication_node.active.imap_counters import put_again
from replication_node.active.item_ids import new_item_id
from replication_node.active.message_staging import MessageStager
from replication_node.active.store_core import MAX_BATCH, StoreCore, admitted
from replication_node.errors import BadRequest, NotFound
from replication_node.log.body import BodyReader
from replication_node.log.operations import CopyItems, DeleteItem, MoveItems, Operation, PutItem
from replication_node.log.spanning import BlobRef
from replication_node.storage.reader import FolderRow, ItemRow


def stage_plan(sizes: list[int], log_file_size: int) -> list[int]:
    """Which bodies (by index, of these UTF-8 sizes) to stage rather than write inline: every
    body over an eighth of a log file (one record never takes most of a generation), then
    the largest others while what stays inline is over three quarters of one (the commit
    record must fit in one generation with its frame, the operations' other fields and the
    close after it; a batch of small items that fits is never staged)."""
    large = log_file_size // 8
    chosen = [i for i, size in enumerate(sizes) if size > large]
    inline = sum(size for i, size in enumerate(sizes) if i not in chosen)
    if inline <= log_file_size * 3 // 4:  # nearly every batch: no other body to sort out
        return chosen
    for i in sorted(set(range(len(sizes))) - set(chosen), key=lambda i: -sizes[i]):
        if inline <= log_file_size * 3 // 4:
            break
        chosen.append(i)
        inline -= sizes[i]
    return sorted(chosen)


def _take_utf8(body: str) -> bytes | bytearray | None:
    """The UTF-8 bytes a counted body holds, taken from it (None: it holds none)."""
    return body.take_utf8() if type(body) is CountedText else None


class ItemWrites(StoreCore):
    """Items of a live mailbox's folders, each with its UID and modseq."""

    @admitted
    async def put_items(
        self,
        mailbox: str,
        items: Sequence[ItemIn],
        *,
        override_lock: bool = False,
        staged: Mapping[int, BlobRef] | None = None,
    ) -> Written:
        """Create or replace items, as one transaction; an item without an id gets one (the
        items given are left as they are: the ids are in the answer).  A body too large to
        be written inline is staged in the log first (`log/spanning.py`); the request is
        checked again once it is, and only then numbered and committed.  The items were
        validated where they were built (`ItemIn`): here they are checked against the
        mailbox.  `staged`: bodies staged already as they arrived, by item index (a raw
        message's, `message_staging.py`), each item's body its counts alone (aborted, as
        the others, once the write is numbered and refused; before, by who staged them)."""
        folders = self._check_items(mailbox, items, override_lock=override_lock)
        if not override_lock and any(item.uid is not None for item in items):
            raise BadRequest("a UID is given only by a move's copy (override_lock)")
        item_ids = tuple(item.item_id or new_item_id() for item in items)
        given = dict(staged or {})
        staged, texts = await self._stage_bodies(items, given)
        staged |= given
        try:
            if staged:  # the awaits let other writes in: the mailbox or a folder may be gone
                folders = self._check_items(mailbox, items, override_lock=override_lock)
            # numbered only once the whole request is valid, with no await before the commit:
            # change numbers, and each item's UID and modseq in its folder (`folders`: as
            # they are now, read by the last check with no await since)
            ops: list[Operation] = []
            for n, (item_id, i) in enumerate(zip(item_ids, items, strict=True)):
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
                        texts.get(n, i.body),
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

    def message_stager(
        self, *, max_item_size: int, database: str, size: int | None = None
    ) -> MessageStager:
        """A message's bytes staged into the log as they arrive, for `put_items(staged=)`
        (`size`: its length, if declared)."""
        return MessageStager(self.copy, max_item_size=max_item_size, database=database, size=size)

    def check_put(
        self, mailbox: str, items: Sequence[ItemIn], *, override_lock: bool = False
    ) -> None:
        """`put_items`' checks against the mailbox, made before the bodies are read (a
        message staged as it arrives: one to a mailbox gone or locked is refused unread)."""
        self._check_items(mailbox, items, override_lock=override_lock)

    def _check_items(
        self, mailbox: str, items: Sequence[ItemIn], *, override_lock: bool
    ) -> dict[str, FolderRow]:
        """The items can be written to `mailbox`: it is live, and has their folders; its
        folders with their counters, by name (read once: the numbering uses them)."""
        self._live_mailbox(mailbox, override_lock=override_lock)
        if not items:
            raise BadRequest("no items")
        if len(items) > MAX_BATCH:
            raise BadRequest(f"at most {MAX_BATCH} items per request")
        folders = {f.folder: f for f in self.copy.folder_rows(mailbox)}
        for item in items:
            if item.folder not in folders:
                raise NotFound(f"mailbox {mailbox!r} has no folder {item.folder!r}")
        return folders

    async def _stage_bodies(
        self, items: Sequence[ItemIn], given: Mapping[int, BlobRef]
    ) -> tuple[dict[int, BlobRef], dict[int, str]]:
        """Stage the bodies a commit record cannot carry (`stage_plan`); by item index.  A
        body counted where it came in (`counted_text`) is not counted again, and its UTF-8
        bytes, if it holds them (a raw message's), are what is staged, as they are; every
        item lets go of them here, staged or not (the text is what the other stages read).
        Also the texts of the bytes-only bodies (`counted_text.bytes_only`: a large raw
        message's) written inline after all, by index: their record carries text.  The
        bodies `given` (staged already) are left as they are."""
        plan = [i for i in self._staging_plan(items) if i not in given]
        texts = {
            i: text_of(item.body)  # type: ignore[arg-type]
            for i, item in enumerate(items)
            if is_bytes_only(item.body) and i not in plan and i not in given
        }
        sizes = [utf8_size(item.body) for item in items]
        utf8 = [_take_utf8(item.body) for item in items]
        staged: dict[int, BlobRef] = {}
        try:
            for i in plan:
                data = utf8[i]
                utf8[i] = None
                body = BodyReader(items[i].body if data is None else data, sizes[i])
                staged[i] = await self.copy.stage(body)
                del body, data
        except BaseException:
            if staged:
                await self.copy.abort_staged(list(staged.values()))
            raise
        return staged, texts

    def _staging_plan(self, items: Sequence[ItemIn]) -> list[int]:
        sizes = [utf8_size(item.body) for item in items]
        return stage_plan(sizes, self.copy.stream.log_file_size)

    @admitted
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

    @admitted
    async def move_or_copy_items(
        self,
        mailbox: str,
        folder: str,
        to: str,
        *,
        copy: bool,
        uids: Sequence[int] | None = None,
        item_ids: Sequence[str] | None = None,
        override_lock: bool = False,
    ) -> tuple[Written, list[ItemRow], list[int]]:
        """Move items to another folder in one operation (each a new UID there: MOVE), or
        with `copy` copy them to a folder (each a new item id and a new UID there: COPY);
        the written answer, the items moved or copied and their new UIDs."""
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

    @admitted
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
