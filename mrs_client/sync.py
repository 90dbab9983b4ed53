"""A sync of a move: the source's changes since each mailbox's cursor copied to the target.

The source is read a page at a time (bounded by changes and by bytes of bodies), the next page
read ahead while the current one is written, each within the process's memory budget
(`body_budget`), each page's large and bad items set aside (`item_limits`) before any of it
is written; writes are cut by bytes, an item larger than the cut alone
(`batching.BatchCutter`), and each item's body goes once written; sync cursors are saved
after each batch.  Folders are synced first (`folder_sync`), and an item the target holds as
the same version only has its flags set there (`FlagWrites`).  Every store call goes through
`EndCalls` (its answer's epoch checked), and the move's steps (`steps.MoveSteps`) run it.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import replace

from dag_common.store_api import Item, Items, Mailbox, utf8_len
from mrs_client.batching import BatchCutter, write_cut
from mrs_client.body_budget import Hold
from mrs_client.epoch_watch import Side
from mrs_client.errors import NeedsReconcile, NodeCallError
from mrs_client.folder_sync import Create, plan_folders, statuses
from mrs_client.item_limits import SkipReason, classify, counts, with_skipped, without
from mrs_client.move_parts import MoveParts, MoveStage
from mrs_client.move_store.interface import MoveRecord
from mrs_client.reconcile import folder_write
from mrs_client.repair_plan import Held
from mrs_client.source_reader import read_page
from mrs_client.verification import Verifier

FLAG_WRITE = 1000  # items one flag write names, at most (the node's MAX_NAMED)
TargetRead = Callable[[MoveRecord, str], Awaitable[tuple[MoveRecord, dict[str, Held]]]]


class FlagWrites:
    """The flag changes of one pass over a mailbox, gathered to be written as the source's
    STOREs made them, and the target's folders as read for them (once a pass each)."""

    def __init__(self) -> None:
        self._folders: dict[str, dict[str, Held]] = {}
        self._pending: dict[tuple[str, tuple[str, ...], int], list[str]] = {}

    async def held(self, record: MoveRecord, item: Item, read: TargetRead) -> MoveRecord | None:
        """If the target holds this version of `item` (its UID in its folder), note its
        flags to set if they differ, and return the record; None: it must be written."""
        there = self._folders.get(item.folder)
        if there is None:
            record, there = await read(record, item.folder)
            self._folders[item.folder] = there
        held = there.get(item.item_id)
        if held is None or held[0] != item.uid:
            return None
        if held[1] != item.flags:
            self._pending.setdefault((item.folder, item.flags, item.modseq), []).append(
                item.item_id
            )
        return record

    def take(self) -> list[tuple[tuple[str, tuple[str, ...], int], list[str]]]:
        """The flag writes gathered, and start again."""
        taken, self._pending = list(self._pending.items()), {}
        return taken


class ChangeSync(MoveStage):
    """Copies a move's changes from its source to its target (the syncs of steps 3, 4 and 6)."""

    def __init__(self, parts: MoveParts, *, verifier: Verifier) -> None:
        super().__init__(parts)
        self._verifier = verifier

    async def sync_folders(
        self, record: MoveRecord, name: str
    ) -> tuple[MoveRecord, Mailbox, set[str]]:
        """Give the target's `name` the source's folders (`folder_sync`): renamed and removed
        as on the source, created with the source's UIDVALIDITY and counters; the source's
        mailbox as read, and the folders the target holds now."""
        dst = record.target_db
        record, source = await self._calls.source_mailbox(record, name)
        record, target = await self._call(
            record, Side.TARGET, "read target mailbox", lambda: self.nodes.mailbox(dst, name)
        )
        if target is None:
            raise NeedsReconcile(f"{name!r} is gone from {dst}", target_changed=True)
        for write in plan_folders(statuses(source), statuses(target)):
            record, _ = await self._call(
                record,
                Side.TARGET,
                f"target {write.describe()}",
                lambda w=write: folder_write(self.nodes, dst, name, w),
            )
            if not isinstance(write, Create):  # a rename or a removal on the source
                self._progress(record, f"{name}: {write.describe()} on the target")
        return record, source, set(source.folders)

    async def lift_counters(self, record: MoveRecord) -> MoveRecord:
        """The final sync's last writes, the source locked: each target folder's UIDNEXT and
        HIGHESTMODSEQ, and the mailbox's next UIDVALIDITY, lifted to the source's, so that a
        UID the source gave a message expunged during the move is not given again."""
        dst = record.target_db
        for name in record.mailboxes:
            record, source = await self._calls.source_mailbox(record, name)
            for folder in source.folder_status:
                if folder.uidvalidity:
                    record, _ = await self._call(
                        record,
                        Side.TARGET,
                        "lift target folder counters",
                        lambda n=name, f=folder, v=source.uidvalidity_next: (
                            self.nodes.set_folder_counters(dst, n, f, v)
                        ),
                    )
        return record

    async def copy_changes(self, record: MoveRecord, *, initial: bool) -> tuple[MoveRecord, int]:
        """Copy changes since each mailbox's cursor; return the record and the change count.

        The source is read a page at a time (`sync_page` changes, `sync_page_bytes` of
        bodies), the next page asked of the source while the current one is written (two
        nodes, working at once), both within the budget; writes are cut into batches across
        the pages, each saved with the cursor it covers.  The live items of every mailbox
        are counted before any is copied (a listing of one change without its body, with
        the count of all the pages): the pass knows how many items it copies
        (`items_total`, what `mrs move` shows a percent of) before the first, archive
        included.

        The budget: an item's body counts from its page's read until it is written, set
        aside or gathered into a write of small items (which holds at most
        `sync_batch_bytes`, uncounted); a write closed is written at once.  So when the loop
        waits for its next page it counts nothing, and a page read ahead waits only for
        other moves' pages, which are being written: no two moves wait for each other.
        """
        async with self.budget.hold() as hold:
            live = []
            src = record.source_db
            for name in record.mailboxes:
                cursor = record.sync_cursor.get(name, 0)
                record, counted = await self._call(
                    record,
                    Side.SOURCE,
                    "read source items",
                    lambda n=name, c=cursor: read_page(
                        self.nodes, src, n, c, 1, count=True, bodies=False
                    ),
                )
                live.append(counted.live)
            if all(n is not None for n in live):
                known = record.items_copied + sum(n for n in live if n is not None)
                if record.items_total != known:  # shown at once, saved with the next save
                    record = replace(record, items_total=known)
                    self._progress(record, "")
            total = 0
            for name in record.mailboxes:
                # Folders first: renames and removals reach the target before the items
                # listed in them (the items listing does not name renames).
                record, _, folders = await self.sync_folders(record, name)
                cursor = record.sync_cursor.get(name, 0)
                record, first = await self._source_page(record, name, cursor, None, hold)
                record, changes = await self._copy_mailbox(
                    record, name, first, hold, initial=initial, folders=folders
                )
                total += changes
        return record, total

    async def _copy_mailbox(
        self,
        record: MoveRecord,
        name: str,
        listing: Items,
        hold: Hold,
        *,
        initial: bool,
        folders: set[str],
    ) -> tuple[MoveRecord, int]:
        """Copy one mailbox's changes, from its first page (`listing`) on, into the target's
        `folders`.  An item the target holds as the same version (its UID in the same
        folder: the source gives a new UID to every put) only has its flags set there."""
        src, dst = record.source_db, record.target_db
        cursor = record.sync_cursor.get(name, 0)
        # Only a target that has received nothing yet has nothing to delete.
        skip_deletes = initial and cursor == 0
        cutter = BatchCutter(
            max_items=self.settings.sync_batch,
            max_bytes=write_cut(self.settings, self.max_item_size(dst)),
        )
        flags = FlagWrites()
        total = 0
        ahead: asyncio.Future[Items] | None = None
        try:
            while True:
                if listing.more:
                    ahead = asyncio.ensure_future(
                        hold.read(
                            lambda since=listing.last_change_number: self._read_page(
                                src, name, since
                            ),
                            self.settings.sync_page_bytes,
                        )
                    )
                record, skips = await self._set_aside(record, name, listing.items)
                # The page's items go as they are written, not with the page.
                pending, after = deque(listing.items), listing.last_change_number
                total += len(pending)
                listing = replace(listing, items=())
                while pending:
                    item = pending.popleft()
                    if item.deleted or item.change_number in skips:
                        # A skipped item is not on the target: an older version goes.
                        if not skip_deletes and item.item_id:
                            record, _ = await self._call(
                                record,
                                Side.TARGET,
                                "delete target item",
                                lambda i=item.item_id: self.nodes.delete_item(dst, name, i),
                            )
                    elif item.folder not in folders:
                        # Renamed or removed on the source since its folders were read: the
                        # item cannot be placed by name; the reconcile places it by content.
                        raise NeedsReconcile(
                            f"item {item.item_id} of {name!r} is in folder {item.folder!r}, "
                            f"which the source no longer holds by that name"
                        )
                    elif (
                        not skip_deletes
                        and item.uid
                        and (known := await flags.held(record, item, self._target_uids(name)))
                        is not None
                    ):
                        record = known
                    else:
                        if batch := cutter.add(item):  # the write before it
                            record = await self._flush_flags(record, name, flags)
                            record = await self._write_batch(record, name, batch, cursor)
                        if cutter.full:  # it, alone or last
                            batch = cutter.take()
                            through = max(cursor, item.change_number)
                            record = await self._flush_flags(record, name, flags)
                            record = await self._write_batch(record, name, batch, through)
                    hold.release((item,))  # written, set aside, or gathered (docstring)
                    cursor = max(cursor, item.change_number)  # an unreadable item may say 0
                if ahead is None:
                    break
                record, listing = await self._source_page(record, name, after, ahead, hold)
                ahead = None
        finally:
            if ahead is not None:  # a failure above: the page read ahead is not wanted
                ahead.cancel()
                await asyncio.gather(ahead, return_exceptions=True)
        record = await self._flush_flags(record, name, flags)
        if batch := cutter.take():
            record = await self._write_batch(record, name, batch, cursor)
        elif cursor != record.sync_cursor.get(name, 0):
            record = await self.gates.save(
                replace(record, sync_cursor={**record.sync_cursor, name: cursor})
            )
        return record, total

    def _target_uids(self, name: str) -> TargetRead:
        """How `FlagWrites` reads a target folder's messages (through the gates)."""

        async def read(record: MoveRecord, folder: str) -> tuple[MoveRecord, dict[str, Held]]:
            dst = record.target_db
            record, listed = await self._call(
                record,
                Side.TARGET,
                "read target folder",
                lambda: self.nodes.folder_uids(dst, name, folder),
            )
            return record, listed.by_item() if listed is not None else {}

        return read

    async def _flush_flags(self, record: MoveRecord, name: str, flags: FlagWrites) -> MoveRecord:
        """Write the flag changes gathered (before any cursor that covers them is saved):
        one write per folder, flags and modseq, as the source's STORE made them."""
        dst = record.target_db
        for (folder, wanted, modseq), item_ids in flags.take():
            for start in range(0, len(item_ids), FLAG_WRITE):
                ids = item_ids[start : start + FLAG_WRITE]
                record, _ = await self._call(
                    record,
                    Side.TARGET,
                    "set target flags",
                    lambda f=folder, i=ids, w=wanted, m=modseq: self.nodes.set_flags(
                        dst, name, f, i, w, m
                    ),
                )
        return record

    def _read_page(self, database: str, name: str, since: int) -> Awaitable[Items]:
        """A page of the source's changes after `since`, bounded by changes and by bytes."""
        return read_page(
            self.nodes,
            database,
            name,
            since,
            self.settings.sync_page,
            page_bytes=self.settings.sync_page_bytes,
        )

    async def _set_aside(
        self, record: MoveRecord, name: str, page: tuple[Item, ...]
    ) -> tuple[MoveRecord, set[int]]:
        """The change numbers of the page's items the move skips (large or bad), saved in
        the record with what is said of them before any of the page is written; the move
        fails here, naming them, past its limits.  An item written again small enough, or
        deleted, is no longer skipped."""
        limit = self.max_item_size(record.target_db)
        found = [
            skip
            for item in page
            if not item.deleted
            and (skip := classify(item, mailbox=name, max_item_size=limit)) is not None
        ]
        skips = {s.change_number for s in found}
        if not found and not any(s.mailbox == name for s in record.skipped):
            return record, skips
        known = {s.key for s in record.skipped}
        settled = [i.item_id for i in page if i.item_id and i.change_number not in skips]
        skipped = with_skipped(without(record.skipped, name, settled), found)
        if skipped == record.skipped:
            return record, skips
        new = [s for s in found if s.key not in known]
        total = record.items_total  # what the pass copies: a skipped item is not copied
        if total:
            total = max(record.items_copied, total - len(new))
        record = await self.gates.save(replace(record, skipped=skipped, items_total=total))
        n = counts(s for s in skipped if s not in new)
        for s in new:
            n[s.reason] += 1
            limit = (
                record.large_item_limit if s.reason is SkipReason.LARGE else record.bad_item_limit
            )
            self._progress(
                record,
                f"skipping {s.reason} item {s.describe()} ({n[s.reason]} of at most {limit})",
            )
        await self._verifier.within_limits(record)
        return record, skips

    async def _source_page(
        self,
        record: MoveRecord,
        name: str,
        since: int,
        ahead: asyncio.Future[Items] | None,
        hold: Hold,
    ) -> tuple[MoveRecord, Items]:
        """The source's changes of `name` after `since`, a page of them: the page read ahead
        if it came back, else asked now through the gates (a source that cannot answer
        stalls the move), within the budget.  Its epoch is checked either way: in another
        incarnation the cursor may count in numbers the source now gives to other changes."""
        if ahead is not None:
            try:
                listing = await ahead
            except NodeCallError:
                pass  # asked again below, where a failure stalls or fails the move
            else:
                record = self._calls.seen(record, Side.SOURCE, listing.epoch, "read source items")
                return record, listing
        src = record.source_db
        return await self._call(
            record,
            Side.SOURCE,
            "read source items",
            lambda: hold.read(
                lambda: self._read_page(src, name, since),
                self.settings.sync_page_bytes,
            ),
        )

    async def _write_batch(
        self, record: MoveRecord, mailbox: str, batch: list[Item], cursor: int
    ) -> MoveRecord:
        """Write one batch to the target, then save the cursor that covers it, provided the
        write was acknowledged in the epoch the cursor was saved under."""
        dst = record.target_db
        size = sum(utf8_len(b.body) for b in batch)
        await self.gates.pace(size)
        record, _ = await self._call(
            record,
            Side.TARGET,
            "write target items",
            lambda: self.nodes.put_items(dst, mailbox, batch),
        )
        # Progress only, saved without waiting for the disk: a cursor lost to a power cut
        # (never to a crash of this process) makes the move copy those items again, and a
        # write of an item the target holds replaces it with the same content.  The next
        # durable save (a step's end, a stall) carries it to the disk.
        record = await self.gates.save(
            replace(
                record,
                items_copied=record.items_copied + len(batch),
                bytes_copied=record.bytes_copied + size,
                sync_cursor={**record.sync_cursor, mailbox: cursor},
            ),
            durable=False,
        )
        self._progress(record, "")
        await self.gates.checkpoint(record)  # between batches: the cursor covers what was written
        return await self.gates.periodic_health(record)
