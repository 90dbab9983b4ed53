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
3. otherwise list both ends in full (tombstones included) and repair the target: put every
   live source item it lacks or holds differently, delete every item the source does not
   hold live; the cursor goes on from the highest change number of that source listing.

Every answer goes through an `EpochWatch`: an end that changes incarnation again in the
middle raises `NeedsReconcile`, and the reconcile starts over (it is idempotent: puts carry
the source's item ids, deletes of absent items are no-ops).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import Any

from mrs_client.errors import MoveFailed, NeedsReconcile, NodeCallError
from mrs_client.policy import MoveStep, after_reconcile
from mrs_client.requests_store import MoveRecord
from mrs_client.store_api import Digest, Item, Mailbox, NodeStore

NodeCall = Callable[[str, Callable[[], Awaitable[Any]]], Awaitable[Any]]


class Side(StrEnum):
    SOURCE = "source"
    TARGET = "target"


class EpochWatch:
    """The epoch each end of a move is in; an answer naming another raises NeedsReconcile.

    An end seen at 0 (not yet, or a node that does not say) takes the first epoch seen."""

    def __init__(self, *, source: int = 0, target: int = 0) -> None:
        self.epochs = {Side.SOURCE: source, Side.TARGET: target}

    def see(self, side: Side, epoch: int, what: str) -> None:
        known = self.epochs[side]
        if not epoch or epoch == known:
            return
        if not known:
            self.epochs[side] = epoch
            return
        raise NeedsReconcile(
            f"{what}: the {side} is at epoch {epoch}, the move saw epoch {known}",
            target_changed=side is Side.TARGET,
        )


def utf8_len(text: str) -> int:
    """The length of `text` in UTF-8, without encoding it when it is ASCII."""
    return len(text) if text.isascii() else len(text.encode())


def write_size(item: Item) -> int:
    """About what an item costs in the target's log record (its text and the JSON around).
    Called for every item of a sync: it counts without building the write's entry."""
    return (
        utf8_len(item.item_id)
        + utf8_len(item.folder)
        + utf8_len(item.subject)
        + utf8_len(item.body)
        + 200
    )


def cut_batches(items: Iterable[Item], *, max_items: int, max_bytes: int) -> list[list[Item]]:
    """Writes of at most `max_items` items and about `max_bytes`: one write is one
    transaction, and a transaction must fit in one log generation of the target."""
    out: list[list[Item]] = []
    batch: list[Item] = []
    size = 0
    for item in items:
        cost = write_size(item)
        if batch and (len(batch) >= max_items or size + cost > max_bytes):
            out.append(batch)
            batch, size = [], 0
        batch.append(item)
        size += cost
    if batch:
        out.append(batch)
    return out


@dataclass(frozen=True, slots=True)
class RepairPlan:
    """What makes the target hold exactly the source's live items."""

    puts: tuple[Item, ...]  # missing on the target, or held differently
    deletes: tuple[str, ...]  # on the target, not live on the source
    cursor: int  # the highest change number of the source listing
    missing: int = 0
    different: int = 0

    def __bool__(self) -> bool:
        return bool(self.puts or self.deletes)

    def describe(self) -> str:
        ids = [i.item_id for i in self.puts[:3]] + list(self.deletes[:3])
        return f"{self.missing} missing, {self.different} different, {len(self.deletes)} extra" + (
            f" (e.g. {', '.join(ids)})" if ids else ""
        )


def plan_repair(source: Iterable[Item], target: Iterable[Item]) -> RepairPlan:
    """Compare full listings of both ends (tombstones included) and say what to write."""
    cursor = 0
    live: dict[str, Item] = {}
    for item in source:
        cursor = max(cursor, item.change_number)
        if not item.deleted:
            live[item.item_id] = item
    held = {i.item_id: i for i in target if not i.deleted}
    missing = [i for k, i in live.items() if k not in held]
    different = [i for k, i in live.items() if k in held and not i.same_content(held[k])]
    deletes = tuple(sorted(k for k in held if k not in live))
    puts = sorted(missing + different, key=lambda i: i.change_number)
    return RepairPlan(tuple(puts), deletes, cursor, len(missing), len(different))


@dataclass(frozen=True, slots=True)
class Reconciled:
    """One mailbox reconciled: where its cursor goes on from, and what was repaired."""

    mailbox: str
    cursor: int
    plan: RepairPlan | None  # None: the digests were equal, nothing was listed
    created: bool = False  # the target had lost the mailbox itself

    @property
    def repaired(self) -> int:
        return len(self.plan.puts) + len(self.plan.deletes) if self.plan else 0

    def describe(self) -> str:
        if self.plan is None or not self.plan:
            return f"{self.mailbox}: target equal to source, cursor {self.cursor}"
        return (
            f"{self.mailbox}: repaired {self.plan.describe()}"
            + (" (mailbox re-created)" if self.created else "")
            + f", cursor {self.cursor}"
        )


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
    ) -> None:
        self.nodes = nodes
        self._node_call = call
        self.watch = watch
        self.source_db = source_db
        self.target_db = target_db
        self.max_items = max_items
        self.max_bytes = max_bytes

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
        box = await self.call(
            "read target mailbox", lambda: self.nodes.mailbox(self.target_db, name)
        )
        if box is not None:
            self.watch.see(Side.TARGET, box.epoch, "read target mailbox")
        return box

    async def source_mailbox(self, name: str) -> Mailbox | None:
        box = await self.call(
            "read source mailbox", lambda: self.nodes.mailbox(self.source_db, name)
        )
        if box is not None:
            self.watch.see(Side.SOURCE, box.epoch, "read source mailbox")
        return box

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

    async def mailbox(
        self, name: str, *, lock_source: bool, allow_soft_deleted: bool = False
    ) -> Reconciled:
        """Make the target's `name` hold exactly the source's live items (module docstring)."""
        source = await self.source_mailbox(name)
        if source is None or (source.soft_deleted and not allow_soft_deleted):
            raise MoveFailed(f"mailbox {name!r} vanished from {self.source_db}")
        if lock_source and not source.locked and not source.soft_deleted:
            # The lock was lost with the source's failover: lock again before comparing,
            # so that what is compared stays what it is.
            written = await self.call(
                "lock source", lambda: self.nodes.set_state(self.source_db, name, "lock")
            )
            self.watch.see(Side.SOURCE, written.epoch, "lock source")
        target = await self.target_mailbox(name)
        created = target is None
        if target is not None and not target.locked:
            # Until its step 9 the move owns the target: an unlock that reached only an
            # unverified incarnation is taken back before the target is compared.
            written = await self.call(
                "lock target", lambda: self.nodes.set_state(self.target_db, name, "lock")
            )
            self.watch.see(Side.TARGET, written.epoch, "lock target")
        if target is None:
            written = await self.call(
                "create target mailbox",
                lambda: self.nodes.create_mailbox(
                    self.target_db,
                    name,
                    display_name=source.display_name,
                    folders=list(source.folders),
                    locked=True,
                ),
            )
            self.watch.see(Side.TARGET, written.epoch, "create target mailbox")
        else:
            for folder in sorted(set(source.folders) - set(target.folders)):
                written = await self.call(
                    "create target folder",
                    lambda f=folder: self.nodes.create_folder(self.target_db, name, f),
                )
                self.watch.see(Side.TARGET, written.epoch, "create target folder")
        source_digest, target_digest = await self.digests(name)
        if target_digest is not None and source_digest.matches(target_digest):
            return Reconciled(name, source_digest.last_change_number, None, created)
        listed = await self.call(
            "read source items", lambda: self.nodes.items(self.source_db, name, 0)
        )
        self.watch.see(Side.SOURCE, listed.epoch, "read source items")
        held = await self.call(
            "read target items", lambda: self.nodes.items(self.target_db, name, 0)
        )
        self.watch.see(Side.TARGET, held.epoch, "read target items")
        plan = plan_repair(listed.items, held.items)
        for batch in cut_batches(plan.puts, max_items=self.max_items, max_bytes=self.max_bytes):
            written = await self.call(
                "write target items",
                lambda b=batch: self.nodes.put_items(self.target_db, name, b),
            )
            self.watch.see(Side.TARGET, written.epoch, "write target items")
        for item_id in plan.deletes:
            deleted = await self.call(
                "delete target item",
                lambda i=item_id: self.nodes.delete_item(self.target_db, name, i),
            )
            if deleted is not None:
                self.watch.see(Side.TARGET, deleted.epoch, "delete target item")
        return Reconciled(name, max(plan.cursor, listed.last_change_number), plan, created)


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
            )
            cursors[name] = done.cursor
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
        steps_done=steps_done,
        items_repaired=record.items_repaired + repaired,
        reconcile_pending=False,
        target_in_doubt=False,
    )
    if steps_done < MoveStep.FINAL_SYNC_AND_FLUSH:
        record = replace(
            record, final_generation=None, final_offset=None, flush_started=None, flush_epoch=0
        )
    if steps_done < MoveStep.UNLOCK_TARGET:
        record = replace(record, unlock_generation=None, unlock_offset=None, unlock_epoch=0)
    return record, lines


async def differences(record: MoveRecord, reconciler: Reconciler, *, compare: bool) -> list[str]:
    """How the target's mailboxes differ from the source's (empty: equal), by digest; with
    `compare` off (the bench's comparison only), just that each target mailbox is there.
    Every answer's epoch must be the record's (else NeedsReconcile)."""
    found = []
    for name in record.mailboxes:
        if not compare:
            if await reconciler.target_mailbox(name) is None:
                found.append(f"{name}: no mailbox in {record.target_db}")
            continue
        source, target = await reconciler.digests(name)
        if target is None or not source.matches(target):
            held = f"{target.item_count} items ({target.digest[:12]})" if target else "none"
            found.append(
                f"{name}: source {source.item_count} items ({source.digest[:12]}), target {held}"
            )
    return found
