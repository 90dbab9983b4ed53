"""Reconcile by content: make the target's copy of a mailbox hold exactly the source's live
items, whatever either end lost, and find out cheaply whether it already does.

Why by content, not by cursor: when either end of a move changes incarnation (a failover;
a switchover too, though it loses nothing), what the mover wrote or read before may be gone
(the target's unshipped open log, or items the source acknowledged and then lost), and the
source's new active numbers changes again from its own highest, reusing the numbers of the
lost log.  A cursor (a change number) then points into a stream that no longer exists.  The
contents of the two mailboxes are what they are whatever the fork point: comparing them is
exact, needs no history of epochs, and no trust in change numbers across a fork.  It costs
one digest request per end when nothing was lost (a switchover), and a listing of both ends
when something was.

For each mailbox (`Reconciler.mailbox`):
1. read the source's mailbox (re-lock it if the move had locked it and the lock was lost)
   and the target's (create it, locked, if the failover lost it; lock it again if it is
   not; add missing folders);
2. compare the digests of both ends; equal: the cursor goes on from the source's highest
   change number, nothing is written;
3. otherwise list both ends in full (tombstones included) without their bodies, a page at a
   time (each item with its size and its body's hash, which the node keeps for the digest),
   and plan the repair from them: put every live source item the target lacks or holds
   differently, delete every item the source does not hold live; the cursor goes on from
   the highest change number of that source listing;
4. read the items to put with their bodies, from the first of them on, a page at a time
   within the process's memory budget (`body_budget`), as the syncs read, and write each
   page's as it is read (`PutsFromPages`); then the deletes.  A mailbox of gigabytes is
   repaired holding a page of bodies, not the mailbox twice over.

Skipped items (`item_limits`: large and bad ones) count as not held by the source: step 2
compares the target with the source's digest less them, steps 3 and 4 never put them and
delete the target's older versions of them, and the listing of step 3 (with the reads of
step 4, which alone see a body the source cannot read) says afresh which of the mailbox's
items are skipped.

Every answer goes through an `EpochWatch`: an end that changes incarnation again in the
middle raises `NeedsReconcile`, and the reconcile starts over (it is idempotent: puts carry
the source's item ids, deletes of absent items are no-ops).
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import replace
from typing import Any

from dag_common.items_query import ItemsQuery
from dag_common.store_api import (
    Digest,
    Item,
    Items,
    Mailbox,
    NodeStore,
    Written,
)
from mrs_client.batching import BatchCutter
from mrs_client.body_budget import BodyBudget
from mrs_client.epoch_watch import EpochWatch, Side
from mrs_client.errors import MoveFailed, NeedsReconcile, NodeCallError
from mrs_client.folder_sync import Create, FolderWrite, Remove, Rename, plan_folders, statuses
from mrs_client.item_limits import (
    SkippedItem,
    all_terms_known,
    for_mailbox,
    less_skipped,
    sort_out,
    still_bad,
    summed,
)
from mrs_client.move_store.interface import MoveRecord
from mrs_client.policy import MoveStep, after_reconcile
from mrs_client.repair_plan import (
    Compared,
    PutsFromPages,
    Reconciled,
    RepairPlan,
    imap_differences,
    latest,
    plan_repair,
)
from mrs_client.source_reader import read_page

NodeCall = Callable[[str, Callable[[], Awaitable[Any]]], Awaitable[Any]]


async def folder_write(
    nodes: NodeStore, database: str, mailbox: str, write: FolderWrite
) -> Written:
    """One folder write of a move's target (`folder_sync`)."""
    match write:
        case Rename(folder, to):
            return await nodes.rename_folder(database, mailbox, folder, to)
        case Remove(folder):
            return await nodes.delete_folder(database, mailbox, folder)
        case Create(status) if status.uidvalidity:
            return await nodes.create_folder_as(database, mailbox, status)
        case Create(status):
            return await nodes.create_folder(database, mailbox, status.folder)
    raise AssertionError(write)


class Reconciler:
    """Reconciles and compares mailboxes between a move's source and target databases."""

    def __init__(
        self,
        *,
        nodes: NodeStore,
        call: NodeCall,
        watch: EpochWatch,
        source_db: str,
        target_db: str,
        max_items: int,
        max_bytes: int,
        max_item_size: int,
        page: int,
        page_bytes: int,
        budget: BodyBudget,
    ) -> None:
        self.nodes = nodes
        self._node_call = call
        self.watch = watch
        self.source_db = source_db
        self.target_db = target_db
        self.max_items = max_items
        self.max_bytes = max_bytes
        self.max_item_size = max_item_size  # the target's: a larger item is skipped
        self.page = page  # changes per page of a listing
        self.page_bytes = page_bytes  # and bytes (of bodies, or of rows listed without)
        self.budget = budget  # the bodies this process holds

    async def call(self, what: str, fn: Callable[[], Awaitable[Any]]) -> Any:
        """A node call; a 404 in the middle (a mailbox lost with yet another failover) starts
        the reconcile over instead of failing the move: it begins by finding out which
        mailboxes each end holds."""
        try:
            return await self._node_call(what, fn)
        except MoveFailed as exc:
            cause = exc.__cause__
            if isinstance(cause, NodeCallError) and cause.status == 404:
                raise NeedsReconcile(f"{what}: {cause}", target_changed=True) from exc
            raise

    async def target_mailbox(self, name: str) -> Mailbox | None:
        return await self._mailbox(Side.TARGET, name)

    async def source_mailbox(self, name: str) -> Mailbox | None:
        return await self._mailbox(Side.SOURCE, name)

    def _db(self, side: Side) -> str:
        return self.target_db if side is Side.TARGET else self.source_db

    async def _mailbox(self, side: Side, name: str) -> Mailbox | None:
        """`name` at one end (None: not there), its epoch seen."""
        what = f"read {side} mailbox"
        box = await self.call(what, lambda: self.nodes.mailbox(self._db(side), name))
        if box is not None:
            self.watch.see(side, box.epoch, what)
        return box

    async def _lock(self, side: Side, name: str) -> None:
        """Lock `name` at one end, the answer's epoch seen."""
        what = f"lock {side}"
        written = await self.call(what, lambda: self.nodes.set_state(self._db(side), name, "lock"))
        self.watch.see(side, written.epoch, what)

    async def digests(self, name: str) -> tuple[Digest, Digest | None]:
        """Both ends' digests of `name` (the target's None if it has no such mailbox), asked
        of the two nodes at once: each node hashes the whole mailbox."""
        asked = [
            asyncio.ensure_future(
                self.call(f"{side} digest", lambda db=db: self.nodes.digest(db, name))
            )
            for side, db in ((Side.SOURCE, self.source_db), (Side.TARGET, self.target_db))
        ]
        try:
            source, target = [await task for task in asked]
        except BaseException:
            for task in asked:
                task.cancel()
            await asyncio.gather(*asked, return_exceptions=True)  # retrieve, do not leak
            raise
        if source is None:
            raise MoveFailed(f"mailbox {name!r} vanished from {self.source_db}")
        self.watch.see(Side.SOURCE, source.epoch, "source digest")
        if target is not None:
            self.watch.see(Side.TARGET, target.epoch, "target digest")
        return source, target

    async def compare(self, name: str, skipped: Iterable[SkippedItem]) -> Compared:
        """The target's digest of `name` and the source's less the items it skips.  Every
        skipped item's term known (large items, and bad ones a reconcile found): from both
        nodes' digests, asked at once.  Otherwise (a bad item nobody knows the content of,
        whose node may not be able to hash the mailbox either) the source is listed without
        bodies and summed here, skipping what `item_limits` says, which is found afresh on
        the way; a bad item whose row lists well without its body (its body is what cannot
        be read) stays skipped while its row is unchanged (`still_bad`)."""
        mine = [s for s in skipped if s.mailbox == name]
        if all_terms_known(mine):
            source, target = await self.digests(name)
            return Compared(less_skipped(source, mine), target, len(mine))
        target = await self.call("target digest", lambda: self.nodes.digest(self.target_db, name))
        if target is not None:
            self.watch.see(Side.TARGET, target.epoch, "target digest")
        listed = await self.listing(Side.SOURCE, name)
        kept, found = sort_out(listed.items, mailbox=name, max_item_size=self.max_item_size)
        carried = still_bad(mine, name, kept)
        changes = {s.change_number for s in carried}
        kept = [item for item in kept if item.change_number not in changes]
        found += carried
        source = summed(name, kept, epoch=listed.epoch).model_copy(
            update={"last_change_number": listed.last_change_number}
        )
        return Compared(source, target, len(found), tuple(found), listed)

    async def listing(self, side: Side, name: str) -> Items:
        """`name`'s changes on one end, tombstones included, without their bodies, read a
        page at a time (the source's stepping over what it cannot read: `source_reader`);
        the last state of each item."""
        db = self.source_db if side is Side.SOURCE else self.target_db
        what = f"read {side} items"
        items: list[Item] = []
        since = 0
        while True:

            async def page(since: int = since) -> Items:
                if side is Side.SOURCE:
                    return await read_page(
                        self.nodes, db, name, since, self.page, page_bytes=self.page_bytes,
                        bodies=False,
                    )  # fmt: skip
                query = ItemsQuery(since, self.page, page_bytes=self.page_bytes, bodies=False)
                return await self.nodes.items(db, name, query)

            listed = await self.call(what, page)
            self.watch.see(side, listed.epoch, what)
            items.extend(listed.items)
            since = listed.last_change_number
            if not listed.more:
                return Items(tuple(latest(items)), since, listed.epoch)

    async def put(self, name: str, plan: RepairPlan) -> list[SkippedItem]:
        """Write the plan's puts, read with their bodies from the source a page at a time
        within the budget, each page's written as it is read (`PutsFromPages`); the puts the
        source cannot read, as bad items."""
        puts = PutsFromPages(plan.puts, mailbox=name, max_item_size=self.max_item_size)
        cutter = BatchCutter(max_items=self.max_items, max_bytes=self.max_bytes)
        since = puts.since
        async with self.budget.hold() as hold:
            while not puts.done:

                async def read(since: int = since) -> Items:
                    return await self.call(
                        "read source items",
                        lambda: read_page(
                            self.nodes, self.source_db, name, since, self.page,
                            page_bytes=self.page_bytes,
                        ),
                    )  # fmt: skip

                page = await hold.read(read, self.page_bytes)
                self.watch.see(Side.SOURCE, page.epoch, "read source items")
                # The page's items go as they are written (`pending`), not with the page.
                pending, after, more = deque(page.items), since, page.more
                since = page.last_change_number
                del page
                while pending:
                    item = pending.popleft()
                    if puts.take(item, after):
                        if batch := cutter.add(item):
                            await self.write(name, batch)
                        if cutter.full:
                            await self.write(name, cutter.take())
                    hold.release((item,))  # written, set aside, or gathered (`body_budget`)
                    after = item.change_number or after
                if not more:
                    break
            if batch := cutter.take():
                await self.write(name, batch)
        return puts.bad

    async def sync_folders(self, name: str, source: Mailbox) -> None:
        """Give the target's `name` the source's folders (`folder_sync`), with their
        UIDVALIDITY and counters."""
        target = await self.target_mailbox(name)
        if target is None:
            raise NeedsReconcile(f"{name!r} is gone from {self.target_db}", target_changed=True)
        for write in plan_folders(statuses(source), statuses(target)):
            written = await self.call(
                f"target {write.describe()}",
                lambda w=write: folder_write(self.nodes, self.target_db, name, w),
            )
            self.watch.see(Side.TARGET, written.epoch, f"target {write.describe()}")

    async def imap_compare(self, name: str, skipped: Iterable[SkippedItem] = ()) -> list[str]:
        """How the target's IMAP state of `name` differs from the source's, less the items
        the move skips (`imap_differences`; empty from a node that has none)."""
        left_out = {s.item_id for s in skipped if s.mailbox == name}
        source = await self.source_mailbox(name)
        target = await self.target_mailbox(name)
        if source is None or target is None:
            return [f"{name}: no mailbox in {self.target_db if source else self.source_db}"]
        if not any(f.uidvalidity for f in source.folder_status):
            return []
        held = {}
        for folder in source.folder_status:
            ends = []
            for side, db in ((Side.SOURCE, self.source_db), (Side.TARGET, self.target_db)):
                listed = await self.call(
                    f"read {side} folder",
                    lambda d=db, f=folder.folder: self.nodes.folder_uids(d, name, f),
                )
                if listed is not None:
                    self.watch.see(side, listed.epoch, f"read {side} folder")
                held_there = listed.by_item() if listed is not None else {}
                ends.append({k: v for k, v in held_there.items() if k not in left_out})
            held[folder.folder] = (ends[0], ends[1])
        return [f"{name}: {line}" for line in imap_differences(source, target, held)]

    async def write(self, name: str, batch: list[Item]) -> None:
        written = await self.call(
            "write target items", lambda: self.nodes.put_items(self.target_db, name, batch)
        )
        self.watch.see(Side.TARGET, written.epoch, "write target items")

    async def mailbox(
        self,
        name: str,
        *,
        lock_source: bool,
        allow_soft_deleted: bool = False,
        skipped: Iterable[SkippedItem] = (),
    ) -> Reconciled:
        """Make the target's `name` hold exactly the source's live items but the `skipped`
        ones, which are found afresh if the mailbox is listed (module docstring)."""
        source = await self.source_mailbox(name)
        if source is None or (source.soft_deleted and not allow_soft_deleted):
            raise MoveFailed(f"mailbox {name!r} vanished from {self.source_db}")
        if lock_source and not source.locked and not source.soft_deleted:
            # The lock was lost with the source's failover: lock again before comparing,
            # so that what is compared stays what it is.
            await self._lock(Side.SOURCE, name)
        target = await self.target_mailbox(name)
        # A soft-deleted copy in the target (an earlier move's source) whose replacement at
        # step 2 a lossy failover of the target lost: replaced again, as step 2 does.
        replacing = target is not None and target.soft_deleted
        if replacing:
            target = None
        created = target is None
        if target is not None and not target.locked:
            # Until its step 9 the move owns the target: an unlock that reached only an
            # unverified incarnation is taken back before the target is compared.
            await self._lock(Side.TARGET, name)
        if target is None:
            written = await self.call(
                "create target mailbox",
                lambda: self.nodes.create_mailbox(
                    self.target_db,
                    name,
                    display_name=source.display_name,
                    # its folders with the source's counters: `sync_folders`
                    folders=[]
                    if any(f.uidvalidity for f in source.folder_status)
                    else list(source.folders),
                    locked=True,
                    replace_soft_deleted=replacing,
                ),
            )
            self.watch.see(Side.TARGET, written.epoch, "create target mailbox")
        await self.sync_folders(name, source)
        if lock_source:  # the source is locked: its counters are final (the final sync's)
            for folder in source.folder_status:
                if folder.uidvalidity:
                    written = await self.call(
                        "lift target folder counters",
                        lambda f=folder: self.nodes.set_folder_counters(
                            self.target_db, name, f, source.uidvalidity_next
                        ),
                    )
                    self.watch.see(Side.TARGET, written.epoch, "lift target folder counters")
        compared = await self.compare(name, skipped)
        known = compared.skipped if compared.skipped is not None else tuple(skipped)
        if compared.equal and not await self.imap_compare(name, known):
            return Reconciled(
                name, compared.source.last_change_number, None, created, compared.skipped
            )
        listed = compared.listed or await self.listing(Side.SOURCE, name)
        held = await self.listing(Side.TARGET, name)
        kept, found = sort_out(listed.items, mailbox=name, max_item_size=self.max_item_size)
        plan = plan_repair(kept, held.items)
        found += await self.put(name, plan)
        # The target's versions of the puts found bad go too: a skipped item is not held.
        on_target = {i.item_id for i in held.items if not i.deleted}
        bad = {s.item_id for s in found if s.item_id in on_target and s.item_id not in plan.deletes}
        plan = replace(plan, deletes=plan.deletes + tuple(sorted(bad)))
        for item_id in plan.deletes:
            deleted = await self.call(
                "delete target item",
                lambda i=item_id: self.nodes.delete_item(self.target_db, name, i),
            )
            if deleted is not None:
                self.watch.see(Side.TARGET, deleted.epoch, "delete target item")
        return Reconciled(
            name, max(plan.cursor, listed.last_change_number), plan, created, tuple(found)
        )


async def reconcile_move(
    record: MoveRecord, reconciler: Reconciler
) -> tuple[MoveRecord, list[str]]:
    """Reconcile every mailbox of a move; the record to save (epochs, cursors, the steps that
    still count as done, per `policy.after_reconcile`) and what was done, in sentences.

    After step 8 the directory names the target, and once unlocked the mailbox is its
    user's: nothing may be rewritten then.  If every unlock was acknowledged in the verified
    epoch and the target, in its new incarnation, still shows one of them, the new stream
    kept everything written before that unlock (a fork keeps a prefix of the stream), so
    everything verified: step 9 is done again, and step 10 compares the digests in the new
    epoch before it soft-deletes anything.  Otherwise (no unlock kept, or an unlock that
    reached only the new incarnation) the target is locked again and repaired like one
    before step 8."""
    watch = reconciler.watch
    after_directory = record.steps_done >= MoveStep.UPDATE_DIRECTORY
    targets = [await reconciler.target_mailbox(n) for n in record.mailboxes]
    for name in record.mailboxes:
        await reconciler.source_mailbox(name)
    target_changed = record.target_in_doubt or watch.epochs[Side.TARGET] != record.target_epoch
    unlock_survived = (
        record.unlock_epoch != 0
        and record.unlock_epoch == record.verified_epoch
        and all(t is not None for t in targets)
        and any(t is not None and not t.locked for t in targets)
    )
    cursors = dict(record.sync_cursor)
    skipped = record.skipped
    repaired = 0
    if after_directory and (not target_changed or unlock_survived):
        lines = [
            "the target kept its unlock, and with it everything verified"
            if target_changed
            else "the target did not change"
        ]
    else:
        lines = []
        for name in record.mailboxes:
            done = await reconciler.mailbox(
                name,
                lock_source=record.steps_done >= MoveStep.LOCK_SOURCE,
                allow_soft_deleted=after_directory,
                skipped=record.skipped,
            )
            cursors[name] = done.cursor
            if done.skipped is not None:
                skipped = for_mailbox(skipped, name, done.skipped)
            repaired += done.repaired
            lines.append(done.describe())
    steps_done = after_reconcile(
        record.step,
        record.steps_done,
        target_changed=target_changed or repaired > 0,
        unlock_survived=unlock_survived,
    )
    record = replace(
        record,
        source_epoch=watch.epochs[Side.SOURCE] or record.source_epoch,
        target_epoch=watch.epochs[Side.TARGET] or record.target_epoch,
        sync_cursor=cursors,
        skipped=skipped,
        steps_done=steps_done,
        items_repaired=record.items_repaired + repaired,
        reconcile_pending=False,
        target_in_doubt=False,
    )
    if steps_done < MoveStep.FINAL_SYNC_AND_FLUSH:
        record = replace(record, final_position=None, flush_started=None, flush_epoch=0)
    if steps_done < MoveStep.UNLOCK_TARGET:
        record = replace(record, unlock_position=None, unlock_epoch=0)
    return record, lines


async def differences(
    record: MoveRecord, reconciler: Reconciler, *, compare: bool, imap: bool = False
) -> tuple[list[str], tuple[SkippedItem, ...]]:
    """How the target's mailboxes differ from the source's less the items the move skips
    (empty: equal), by digest, and with `imap` by what a client caches (each folder's
    UIDVALIDITY and counters, each message's UID and flags: `imap_differences`); and the
    skipped items as found (afresh, for a mailbox the comparison had to list); with
    `compare` off (the bench's comparison only), just that each target mailbox is there.
    Every answer's epoch must be the record's (else NeedsReconcile)."""
    found = []
    skipped = record.skipped
    for name in record.mailboxes:
        if not compare:
            if await reconciler.target_mailbox(name) is None:
                found.append(f"{name}: no mailbox in {record.target_db}")
            continue
        compared = await reconciler.compare(name, record.skipped)
        if compared.skipped is not None:
            skipped = for_mailbox(skipped, name, compared.skipped)
        if not compared.equal:
            found.append(compared.describe())
        elif imap:
            found += await reconciler.imap_compare(name, skipped)
    return found, skipped
