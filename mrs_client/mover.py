"""The move loop: runs a move request's ten steps, persisting after each, gated on the Data
Guarantee API (decisions from `policy`; waits in `gates`; reconcile and compare in
`reconcile`; I/O here).

Idempotent by construction, so `kill -9` at any point and `mrs resume` give the result of an
uninterrupted move: items are copied with their own item ids (a re-copy replaces, never
duplicates); sync cursors are saved after each batch; the final flush waits for the
generation the target rolled *after* the final sync, saved before the wait.

Incarnations: every node answer names the epoch of the copy that gave it, and the record
keeps the epochs its cursors were read and written under.  An answer naming another epoch
(a failover or switchover of either end), a flush the service says was lost, or a
verification that finds the target different from the source raises `NeedsReconcile`: the
loop saves that a reconcile is due, reconciles by content (`reconcile.Reconciler`), and goes
on from the step `policy.after_reconcile` names.  Before step 8 the digests of both ends
must match in the epoch the final flush was answered for; step 10 (the source's soft
delete) runs only in that verified epoch.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import replace
from functools import partial
from typing import Any, Protocol

from dag_common.clock import Clock
from mrs_client.errors import MoveFailed, MoveRejected, NeedsReconcile, NodeCallError
from mrs_client.gates import Gates, GuaranteeClient
from mrs_client.policy import MoveSettings, MoveState, MoveStep, incremental_done
from mrs_client.reconcile import (
    EpochWatch,
    Reconciler,
    Side,
    differences,
    reconcile_move,
    write_size,
)
from mrs_client.requests_store import MoveRecord, MoveRequestStore
from mrs_client.store_api import Item, NodeStore

logger = logging.getLogger(__name__)
ARCHIVE_SUFFIX = ".archive"


class Directory(Protocol):
    """The mailbox directory (the cluster store)."""

    async def mailbox_database(self, mailbox: str) -> str | None: ...

    async def set_mailbox_database(
        self, mailbox: str, database: str, *, expected: str | None
    ) -> bool: ...


class Mover:
    """Creates, runs and resumes move requests."""

    def __init__(
        self,
        *,
        requests: MoveRequestStore,
        nodes: NodeStore,
        guarantee: GuaranteeClient,
        directory: Directory,
        databases: set[str],
        clock: Clock,
        settings: MoveSettings | None = None,
        caller_id: str = "mrs",
        progress: Callable[[MoveRecord, str], None] | None = None,
    ) -> None:
        self.requests = requests
        self.nodes = nodes
        self.guarantee = guarantee
        self.directory = directory
        self.databases = databases
        self.clock = clock
        self.settings = settings or MoveSettings()
        self.caller_id = caller_id
        self._progress = progress or (lambda record, line: None)
        self.gates = Gates(
            requests=requests,
            guarantee=guarantee,
            clock=clock,
            settings=self.settings,
            caller_id=caller_id,
            progress=self._progress,
        )

    # ---- creating a request ----------------------------------------------------------------

    async def submit(
        self, mailbox: str, target_db: str, *, with_archive: bool = False
    ) -> MoveRecord:
        """Validate and record a move; MoveRejected (nothing changed) if it cannot be."""
        if target_db not in self.databases:
            raise MoveRejected(f"unknown database {target_db!r}")
        source_db = await self.directory.mailbox_database(mailbox)
        if source_db is None:
            raise MoveRejected(f"unknown mailbox {mailbox!r} (not in the mailbox directory)")
        if source_db == target_db:
            raise MoveRejected(f"mailbox {mailbox!r} is already in {target_db}")
        mailboxes = [mailbox]
        if with_archive:
            archive = mailbox + ARCHIVE_SUFFIX
            if await self.directory.mailbox_database(archive) != source_db:
                raise MoveRejected(f"mailbox {mailbox!r} has no archive {archive!r} in {source_db}")
            mailboxes.append(archive)
        for name in mailboxes:
            try:
                row = await self.nodes.mailbox(source_db, name)
                existing = await self.nodes.mailbox(target_db, name)
            except NodeCallError as exc:
                raise MoveRejected(f"cannot check {name!r}: {exc}") from exc
            if row is None or row.soft_deleted:
                raise MoveRejected(f"mailbox {name!r} is not in {source_db}")
            if row.locked:
                raise MoveRejected(f"mailbox {name!r} is locked")
            if existing is not None:
                raise MoveRejected(f"{target_db} already holds a mailbox {name!r}")
        record = self.requests.create(
            mailboxes=tuple(mailboxes),
            source_db=source_db,
            target_db=target_db,
            now=self.clock.now(),
        )
        self._progress(record, f"move {record.id} recorded: {mailboxes} {source_db} -> {target_db}")
        return record

    # ---- running ---------------------------------------------------------------------------

    async def run(self, move_id: str) -> MoveRecord:
        """Run (or resume) a move until it completes or fails; return the final record.

        MoveRejected if another client is running the same move right now."""
        with self.requests.running(move_id):
            return await self._run_held(move_id)

    async def _run_held(self, move_id: str) -> MoveRecord:
        record = self.requests.get(move_id)
        if record is None:
            raise MoveRejected(f"no move request {move_id!r}")
        if record.state is MoveState.COMPLETED:
            return record
        resumed_after_failure = record.state is MoveState.FAILED
        record = replace(record, state=MoveState.IN_PROGRESS, failure=None)
        if resumed_after_failure:
            # An operator's resume starts the stall and flush limits afresh; a crash-resume
            # (kill -9) keeps them running, since the time passed while nobody watched counts.
            record = replace(
                record,
                stalled_since=None,
                stall_reason=None,
                flush_started=self.clock.now() if record.flush_started else None,
                verify_rounds=0,
                reconciles=0,
            )
        if (
            record.steps_done >= MoveStep.CLONE_STRUCTURE
            and not (record.target_epoch and record.source_epoch)
            and not record.reconcile_pending
        ):
            # A request recorded before epochs were kept: its cursors name no incarnation.
            record = replace(
                record,
                reconcile_pending=True,
                reconcile_reason="resumed without the epochs its cursors were saved under",
            )
        record = self.gates.save(record)
        steps = {
            MoveStep.RECORD_REQUEST: self._step_record,
            MoveStep.CLONE_STRUCTURE: self._step_clone,
            MoveStep.INITIAL_SYNC: self._step_initial_sync,
            MoveStep.INCREMENTAL_SYNC: self._step_incremental_sync,
            MoveStep.LOCK_SOURCE: self._step_lock_source,
            MoveStep.FINAL_SYNC_AND_FLUSH: self._step_final_sync_and_flush,
            MoveStep.FINAL_HEALTH_CHECK: self._step_final_health,
            MoveStep.UPDATE_DIRECTORY: self._step_update_directory,
            MoveStep.UNLOCK_TARGET: self._step_unlock_target,
            MoveStep.SOFT_DELETE_SOURCE: self._step_soft_delete_source,
        }
        try:
            while record.steps_done < MoveStep.SOFT_DELETE_SOURCE or record.reconcile_pending:
                try:
                    if record.reconcile_pending:
                        record = await self._reconcile(record)
                        continue
                    step = MoveStep(record.steps_done + 1)
                    record = self.gates.save(replace(record, step=step))
                    self._progress(record, f"step {int(step)}: {step.label}")
                    record = await steps[step](record)
                    record = self.gates.save(replace(record, steps_done=int(step)))
                except NeedsReconcile as exc:
                    record = self._reconcile_due(move_id, record, exc)
        except MoveFailed as exc:
            record = self.gates.save(
                replace(
                    self.requests.get(move_id) or record, state=MoveState.FAILED, failure=str(exc)
                )
            )
            self._progress(record, f"move failed at step {int(record.step)}: {exc}")
            return record
        record = self.gates.save(
            replace(
                record,
                state=MoveState.COMPLETED,
                completed=self.clock.now(),
                stalled_since=None,
                stall_reason=None,
            )
        )
        self._progress(record, "move completed")
        return record

    # ---- incarnations: seeing epochs, reconciling, verifying -----------------------------

    def _seen(self, record: MoveRecord, side: Side, epoch: int, what: str) -> MoveRecord:
        """Check an answer's epoch against the one the move's cursors were saved under;
        NeedsReconcile if it differs.  The first epoch seen of an end is taken (and saved
        with the next save)."""
        watch = EpochWatch(source=record.source_epoch, target=record.target_epoch)
        db = record.target_db if side is Side.TARGET else record.source_db
        watch.see(side, epoch, f"{what} ({db})")
        return replace(
            record,
            source_epoch=watch.epochs[Side.SOURCE],
            target_epoch=watch.epochs[Side.TARGET],
        )

    async def _call(
        self, record: MoveRecord, side: Side, what: str, fn: Callable[[], Any]
    ) -> tuple[MoveRecord, Any]:
        """A store call to one end of the move whose answer's epoch is checked (`_seen`)."""
        try:
            answer = await self.gates.node_call(record, what, fn)
        except MoveFailed as exc:
            if isinstance(exc.__cause__, NodeCallError) and exc.__cause__.status == 404:
                await self._refused(record, side, exc)
            raise
        if answer is not None:
            record = self._seen(record, side, answer.epoch, what)
        return record, answer

    async def _refused(self, record: MoveRecord, side: Side, exc: MoveFailed) -> None:
        """A 404 names no epoch: a mailbox the move made (or read) may have been lost with a
        failover.  NeedsReconcile if that end changed incarnation or lost a mailbox of the
        move; otherwise the refusal stands."""
        db = record.target_db if side is Side.TARGET else record.source_db
        for name in record.mailboxes:
            box = await self.gates.node_call(
                record, "read mailbox", lambda n=name: self.nodes.mailbox(db, n)
            )
            if box is None:
                raise NeedsReconcile(
                    f"{exc}: {name!r} is gone from {db}", target_changed=side is Side.TARGET
                )
            self._seen(record, side, box.epoch, str(exc))

    def _reconcile_due(self, move_id: str, held: MoveRecord, exc: NeedsReconcile) -> MoveRecord:
        """Save that a reconcile is due (it survives a crash) and why."""
        stored = self.requests.get(move_id) or held
        record = self.gates.save(
            replace(
                stored,
                state=MoveState.IN_PROGRESS,
                stalled_since=None,
                stall_reason=None,
                reconcile_pending=True,
                reconcile_reason=str(exc),
                target_in_doubt=stored.target_in_doubt or exc.target_changed,
            )
        )
        self._progress(record, f"reconcile needed: {exc}")
        logger.warning("move %s: reconcile needed: %s", record.id, exc)
        return record

    def _reconciler(self, record: MoveRecord, watch: EpochWatch) -> Reconciler:
        return Reconciler(
            nodes=self.nodes,
            call=partial(self.gates.node_call, record),
            watch=watch,
            source_db=record.source_db,
            target_db=record.target_db,
            max_items=self.settings.sync_batch,
            max_bytes=self.settings.sync_batch_bytes,
        )

    async def _reconcile(self, record: MoveRecord) -> MoveRecord:
        """Bring the target to the source's contents in the incarnations both are in now
        (`reconcile.reconcile_move`), and save where the move goes on from."""
        if record.reconciles >= self.settings.max_reconciles:
            raise MoveFailed(
                f"reconciled {record.reconciles} times and the move's databases still change "
                f"incarnation ({record.reconcile_reason}); the source is untouched"
            )
        record = self.gates.save(replace(record, reconciles=record.reconciles + 1))
        self._progress(record, f"reconciling by content: {record.reconcile_reason}")
        record, lines = await reconcile_move(record, self._reconciler(record, EpochWatch()))
        record = self.gates.save(record)
        self._progress(
            record,
            f"reconciled (source epoch {record.source_epoch}, target epoch "
            f"{record.target_epoch}): {'; '.join(lines)}; going on at step "
            f"{record.steps_done + 1}",
        )
        return record

    async def _verify(self, record: MoveRecord) -> MoveRecord:
        """Before step 8: the target holds exactly the source's live items (digests equal),
        in the epoch the final flush was answered for."""
        self._progress(record, "verifying the target against the source")
        watch = EpochWatch(source=record.source_epoch, target=record.target_epoch)
        found = await differences(
            record, self._reconciler(record, watch), compare=self.settings.verify
        )
        if record.flush_epoch != record.target_epoch:
            raise NeedsReconcile(
                f"the final flush was answered for epoch {record.flush_epoch}, the target is "
                f"at epoch {record.target_epoch}",
                target_changed=True,
            )
        if found:
            record = self.gates.save(replace(record, verify_rounds=record.verify_rounds + 1))
            if record.verify_rounds > self.settings.max_verify_rounds:
                raise MoveFailed(
                    f"the target still differs from the source after "
                    f"{record.verify_rounds - 1} repairs: {'; '.join(found)}; the source "
                    f"is untouched (not soft-deleted)"
                )
            raise NeedsReconcile(f"verification: {'; '.join(found)}", target_changed=True)
        record = self.gates.save(replace(record, verified_epoch=record.target_epoch))
        self._progress(
            record, f"verified: the target equals the source in epoch {record.target_epoch}"
        )
        return record

    async def _verify_unlocked(self, record: MoveRecord) -> MoveRecord:
        """Step 10 in a target incarnation newer than the verified one (it kept the unlock):
        compare the digests again.  The target is its user's now and is not repaired; if it
        differs, the move fails and the source stays whole (not soft-deleted)."""
        watch = EpochWatch(source=record.source_epoch, target=record.target_epoch)
        found = await differences(record, self._reconciler(record, watch), compare=True)
        if found:
            raise MoveFailed(
                f"the target changed incarnation (epoch {record.verified_epoch} -> "
                f"{record.target_epoch}) after it was verified and unlocked, and differs from "
                f"the source: {'; '.join(found)}; the source is kept (not soft-deleted): "
                f"compare the two and soft-delete it by hand"
            )
        record = self.gates.save(replace(record, verified_epoch=record.target_epoch))
        self._progress(
            record, f"verified again: the target equals the source in epoch {record.target_epoch}"
        )
        return record

    # ---- the ten steps ---------------------------------------------------------------------

    async def _step_record(self, record: MoveRecord) -> MoveRecord:
        return await self.gates.health(record)

    async def _step_clone(self, record: MoveRecord) -> MoveRecord:
        src, dst = record.source_db, record.target_db
        for name in record.mailboxes:
            record, source = await self._call(
                record,
                Side.SOURCE,
                "read source mailbox",
                lambda n=name: self.nodes.mailbox(src, n),
            )
            if source is None:
                raise MoveFailed(f"mailbox {name!r} vanished from {src}")
            record, target = await self._call(
                record,
                Side.TARGET,
                "read target mailbox",
                lambda n=name: self.nodes.mailbox(dst, n),
            )
            if target is None:
                record, _ = await self._call(
                    record,
                    Side.TARGET,
                    "create target mailbox",
                    lambda n=name, s=source: self.nodes.create_mailbox(
                        dst, n, display_name=s.display_name, folders=list(s.folders), locked=True
                    ),
                )
                continue
            for folder in sorted(set(source.folders) - set(target.folders)):
                record, _ = await self._call(
                    record,
                    Side.TARGET,
                    "create target folder",
                    lambda n=name, f=folder: self.nodes.create_folder(dst, n, f),
                )
        record = self.gates.save(record)
        return await self.gates.health(record)

    async def _copy_changes(self, record: MoveRecord, *, initial: bool) -> tuple[MoveRecord, int]:
        """Copy changes since each mailbox's cursor; return the record and the change count."""
        total = 0
        src, dst = record.source_db, record.target_db
        for name in record.mailboxes:
            cursor = record.sync_cursor.get(name, 0)
            # Only a target that has received nothing yet has nothing to delete.
            skip_deletes = initial and cursor == 0
            # The epoch is checked before anything read is used: in another incarnation the
            # cursor may count in numbers the source now gives to other changes.
            record, listing = await self._call(
                record,
                Side.SOURCE,
                "read source items",
                lambda n=name, c=cursor: self.nodes.items(src, n, c),
            )
            batch: list[Item] = []
            size = 0
            for item in listing.items:
                if item.deleted:
                    if not skip_deletes:
                        record, _ = await self._call(
                            record,
                            Side.TARGET,
                            "delete target item",
                            lambda n=name, i=item.item_id: self.nodes.delete_item(dst, n, i),
                        )
                else:
                    cost = write_size(item)
                    # One write is one transaction, and a transaction must fit in one log
                    # generation of the target: cut batches by bytes as well as by count.
                    if batch and (
                        len(batch) >= self.settings.sync_batch
                        or size + cost > self.settings.sync_batch_bytes
                    ):
                        record = await self._write_batch(record, name, batch, cursor)
                        batch, size = [], 0
                    batch.append(item)
                    size += cost
                cursor = item.change_number
            if batch:
                record = await self._write_batch(record, name, batch, cursor)
            elif listing.items:
                record = self.gates.save(
                    replace(record, sync_cursor={**record.sync_cursor, name: cursor})
                )
            total += len(listing.items)
        return record, total

    async def _write_batch(
        self, record: MoveRecord, mailbox: str, batch: list[Item], cursor: int
    ) -> MoveRecord:
        """Write one batch to the target, then save the cursor that covers it, provided the
        write was acknowledged in the epoch the cursor was saved under."""
        dst = record.target_db
        record, _ = await self._call(
            record,
            Side.TARGET,
            "write target items",
            lambda: self.nodes.put_items(dst, mailbox, batch),
        )
        record = self.gates.save(
            replace(
                record,
                items_copied=record.items_copied + len(batch),
                bytes_copied=record.bytes_copied + sum(len(b.body.encode()) for b in batch),
                sync_cursor={**record.sync_cursor, mailbox: cursor},
            )
        )
        self._progress(record, "")
        return await self.gates.periodic_health(record)

    async def _step_initial_sync(self, record: MoveRecord) -> MoveRecord:
        record, _ = await self._copy_changes(record, initial=True)
        return await self.gates.health(record)

    async def _step_incremental_sync(self, record: MoveRecord) -> MoveRecord:
        while True:
            record, changes = await self._copy_changes(record, initial=False)
            record = self.gates.save(
                replace(record, incremental_passes=record.incremental_passes + 1)
            )
            record = await self.gates.periodic_health(record)
            if incremental_done(changes, record.incremental_passes, self.settings):
                return record

    async def _step_lock_source(self, record: MoveRecord) -> MoveRecord:
        src = record.source_db
        for name in record.mailboxes:
            record, _ = await self._call(
                record,
                Side.SOURCE,
                "lock source",
                lambda n=name: self.nodes.set_state(src, n, "lock"),
            )
        return record

    async def _roll_target(self, record: MoveRecord, what: str) -> tuple[MoveRecord, int]:
        dst = record.target_db
        record, rolled = await self._call(
            record, Side.TARGET, "roll target log", lambda: self.nodes.roll_log(dst)
        )
        record = self.gates.save(replace(record, flush_started=self.clock.now()))
        self._progress(
            record,
            f"target log rolled: generation {rolled.generation} (epoch {record.target_epoch}) "
            f"holds the {what}",
        )
        return record, rolled.generation

    async def _target_still_there(self, record: MoveRecord) -> MoveRecord:
        """Between flush answers: is the target still in the epoch the roll was made in?"""
        return await self._target_present(record, record.mailboxes[0])

    async def _target_present(self, record: MoveRecord, name: str) -> MoveRecord:
        """Read the target's mailbox: NeedsReconcile if it is in another epoch, or gone."""
        dst = record.target_db
        record, box = await self._call(
            record, Side.TARGET, "read target mailbox", lambda: self.nodes.mailbox(dst, name)
        )
        if box is None:
            raise NeedsReconcile(f"{name!r} is gone from {dst}", target_changed=True)
        return record

    async def _step_final_sync_and_flush(self, record: MoveRecord) -> MoveRecord:
        if record.final_generation is None:
            record, _ = await self._copy_changes(record, initial=False)
            record, generation = await self._roll_target(record, "final sync")
            record = self.gates.save(replace(record, final_generation=generation, flush_epoch=0))
        record, answer = await self.gates.flush(
            record, record.final_generation, between=self._target_still_there
        )
        return self.gates.save(replace(record, flush_epoch=answer.epoch or record.target_epoch))

    async def _step_final_health(self, record: MoveRecord) -> MoveRecord:
        return await self.gates.health(replace(record, stalled_since=None))

    async def _step_update_directory(self, record: MoveRecord) -> MoveRecord:
        record = await self._verify(record)
        for name in record.mailboxes:
            current = await self.directory.mailbox_database(name)
            if current == record.target_db:
                continue  # done before a crash
            if not await self.directory.set_mailbox_database(
                name, record.target_db, expected=record.source_db
            ):
                raise MoveFailed(f"the mailbox directory entry of {name!r} changed under the move")
        return record

    async def _step_unlock_target(self, record: MoveRecord) -> MoveRecord:
        """Unlock the target, and wait until the unlock is replayed like the final sync was:
        a failover right after completion must leave a usable mailbox, not a locked one."""
        dst = record.target_db
        if record.unlock_generation is None:
            for name in record.mailboxes:
                record, _ = await self._call(
                    record,
                    Side.TARGET,
                    "unlock target",
                    lambda n=name: self.nodes.set_state(dst, n, "unlock"),
                )
            # Every unlock acknowledged in this epoch: should the target change incarnation
            # and still show an unlock, everything before it survived (reconcile_move).
            record = self.gates.save(replace(record, unlock_epoch=record.target_epoch))
            record, generation = await self._roll_target(record, "unlock")
            record = self.gates.save(replace(record, unlock_generation=generation))
        record, _ = await self.gates.flush(
            record, record.unlock_generation, between=self._target_still_there
        )
        return record

    async def _step_soft_delete_source(self, record: MoveRecord) -> MoveRecord:
        # Only in a target incarnation where the digests were found equal: the source is
        # the last whole copy otherwise.
        for name in record.mailboxes:
            record = await self._target_present(record, name)
        if record.verified_epoch != record.target_epoch:
            record = await self._verify_unlocked(record)
        src = record.source_db
        for name in record.mailboxes:
            record, row = await self._call(
                record,
                Side.SOURCE,
                "read source mailbox",
                lambda n=name: self.nodes.mailbox(src, n),
            )
            if row is not None and not row.soft_deleted:
                record, _ = await self._call(
                    record,
                    Side.SOURCE,
                    "soft-delete source",
                    lambda n=name: self.nodes.set_state(src, n, "soft-delete"),
                )
        return record
