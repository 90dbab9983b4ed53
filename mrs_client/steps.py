"""The ten steps of a move, each idempotent (a crash and `mrs resume` repeat it safely).

Items are copied with their own item ids (a re-copy replaces, never duplicates) by the
syncs of `sync.ChangeSync`; the final flush waits for a point of the target's log past the
final sync, saved before the wait: the durable end of its open log when every copy follows
in block mode (no roll), else a generation rolled *after* the final sync; the unlock is
flushed the same way.
Every store call goes through `EndCalls` (its answer's epoch checked); the guarantee gates
through `Gates`; the verification before steps 8 and 10 through `Verifier`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import Protocol

from dag_common.clock import Clock
from dag_common.model import Lsn
from mrs_client.epoch_watch import Side
from mrs_client.errors import MoveFailed, NeedsReconcile
from mrs_client.move_parts import MoveParts, MoveStage
from mrs_client.move_store.interface import MoveRecord
from mrs_client.policy import (
    GuaranteeAnswer,
    MoveStep,
    flush_point,
    incremental_done,
)
from mrs_client.sync import ChangeSync
from mrs_client.verification import Verifier


class Directory(Protocol):
    """The mailbox directory (the cluster store)."""

    async def mailbox_database(self, mailbox: str) -> str | None: ...

    async def set_mailbox_database(
        self, mailbox: str, database: str, *, expected: str | None
    ) -> bool: ...


class MoveSteps(MoveStage):
    """Runs one step of a move on its record; returns the record to save as done."""

    def __init__(
        self,
        parts: MoveParts,
        *,
        verifier: Verifier,
        sync: ChangeSync,
        directory: Directory,
        clock: Clock,
    ) -> None:
        super().__init__(parts)
        self._verifier = verifier
        self.sync = sync
        self.directory = directory
        self.clock = clock

    def step(self, step: MoveStep) -> Callable[[MoveRecord], Awaitable[MoveRecord]]:
        """The coroutine function that runs `step`."""
        return {
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
        }[step]

    async def _step_record(self, record: MoveRecord) -> MoveRecord:
        return await self.gates.health(record)

    async def _step_clone(self, record: MoveRecord) -> MoveRecord:
        dst = record.target_db
        for name in record.mailboxes:
            record, source = await self._calls.source_mailbox(record, name)
            record, target = await self._call(
                record,
                Side.TARGET,
                "read target mailbox",
                lambda n=name: self.nodes.mailbox(dst, n),
            )
            replacing = target is not None and target.soft_deleted
            if target is None or replacing:
                # A soft-deleted copy (an earlier move's source) is removed in the same
                # transaction that creates the target: a crash leaves one or the other.
                # Its folders come next (`ChangeSync.sync_folders`), each with the source's
                # UIDVALIDITY and counters, which a new mailbox's folders would not have.
                numbered = any(f.uidvalidity for f in source.folder_status)
                record, _ = await self._call(
                    record,
                    Side.TARGET,
                    "create target mailbox",
                    lambda n=name, s=source, r=replacing, e=numbered: self.nodes.create_mailbox(
                        dst,
                        n,
                        display_name=s.display_name,
                        folders=[] if e else list(s.folders),
                        locked=True,
                        replace_soft_deleted=r,
                    ),
                )
                if replacing:
                    self._progress(record, f"replaced the soft-deleted copy of {name} in {dst}")
                    if name not in record.replaces_soft_deleted:
                        replaced = (*record.replaces_soft_deleted, name)
                        record = replace(record, replaces_soft_deleted=replaced)
            record, _, _ = await self.sync.sync_folders(record, name)
        # The epochs seen are saved with the step's end (or the stall's, should it wait).
        return await self.gates.health(record)

    async def _step_initial_sync(self, record: MoveRecord) -> MoveRecord:
        record, _ = await self.sync.copy_changes(record, initial=True)
        return await self.gates.health(record)

    async def _step_incremental_sync(self, record: MoveRecord) -> MoveRecord:
        while True:
            record, changes = await self.sync.copy_changes(record, initial=False)
            record = replace(record, incremental_passes=record.incremental_passes + 1)
            done = incremental_done(changes, record.incremental_passes, self.settings)
            if not done:  # the last pass is saved with the step's end (Mover)
                record = await self.gates.save(record)
            record = await self.gates.periodic_health(record)
            if done:
                return record

    async def _step_lock_source(self, record: MoveRecord) -> MoveRecord:
        for name in record.mailboxes:
            record = await self._calls.set_state(record, Side.SOURCE, name, "lock")
        return record

    async def _roll_target(self, record: MoveRecord, what: str) -> tuple[MoveRecord, Lsn]:
        """Roll the target's log: the generation it closed holds everything acknowledged
        so far.  The record's flush_started is set, to be saved with the point (`keep`)."""
        dst = record.target_db
        record, rolled = await self._call(
            record, Side.TARGET, "roll target log", lambda: self.nodes.roll_log(dst)
        )
        record = replace(record, flush_started=self.clock.now())  # saved with the point
        self._progress(
            record,
            f"target log rolled: generation {rolled.generation} (epoch {record.target_epoch}) "
            f"holds the {what}",
        )
        return record, Lsn(generation=rolled.generation, epoch=record.target_epoch)

    async def _mark_target(self, record: MoveRecord, what: str) -> tuple[MoveRecord, Lsn]:
        """A point of the target's log past everything it acknowledged so far: read where
        its log stands (`policy.flush_point`), or roll it.  As `_roll_target`, the record's
        flush_started is set, not saved: the caller saves it with the point (`keep`)."""
        dst = record.target_db
        record, position = await self._call(
            record, Side.TARGET, "read target log position", lambda: self.nodes.log_position(dst)
        )
        point = flush_point(position, record.target_epoch)
        if point is None:
            return await self._roll_target(record, what)
        record = replace(record, flush_started=self.clock.now())  # saved with the point
        where = (
            f"generation {point.generation} through byte {point.offset}, held in block mode by "
            f"{', '.join(position.block_followers)}"
            if point.record_offset is not None
            else f"closed generation {point.generation}"
        )
        self._progress(
            record, f"target log holds the {what} in {where} (epoch {record.target_epoch})"
        )
        return record, point

    async def _flush_target(
        self,
        record: MoveRecord,
        what: str,
        point: Lsn | None,
        keep: Callable[[MoveRecord, Lsn], Awaitable[MoveRecord]],
    ) -> tuple[MoveRecord, GuaranteeAnswer]:
        """Flush the target through `point`, marked first if None (`keep` saves it in the
        record, with when the flush started, before any question is asked).  A point inside
        the open log not Satisfied within `block_flush_wait` is replaced by a generation
        rolled for it: a copy may have left block mode."""
        if point is None:
            record, point = await self._mark_target(record, what)
            record = await keep(record, point)
        if point.record_offset is not None:
            record, answer = await self.gates.flush(
                record,
                point,
                between=self._target_still_there,
                give_up_after=self.settings.block_flush_wait,
            )
            if answer is not None:
                return record, answer
            record, point = await self._roll_target(
                record,
                f"{what} (not flushed in block mode within "
                f"{self.settings.block_flush_wait.total_seconds():g}s)",
            )
            record = await keep(record, point)
        record, answer = await self.gates.flush(record, point, between=self._target_still_there)
        assert answer is not None  # no give_up_after: Satisfied, or it raised
        return record, answer

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
        point = record.final_point
        if point is None:
            record, _ = await self.sync.copy_changes(record, initial=False)
        if point is None:
            record = await self.sync.lift_counters(record)
        record, answer = await self._flush_target(
            record,
            "final sync",
            point,
            lambda r, p: self.gates.save(replace(r, final_position=p.position, flush_epoch=0)),
        )
        # Saved with the step's end (Mover): nothing runs between.
        return replace(record, flush_epoch=answer.epoch or record.target_epoch)

    async def _step_final_health(self, record: MoveRecord) -> MoveRecord:
        return await self.gates.health(replace(record, stalled_since=None))

    async def _step_update_directory(self, record: MoveRecord) -> MoveRecord:
        record = await self._verifier.verify(record)
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
        point = record.unlock_point
        if point is None:
            for name in record.mailboxes:
                record = await self._calls.set_state(record, Side.TARGET, name, "unlock")
            # Every unlock acknowledged in this epoch: should the target change incarnation
            # and still show an unlock, everything before it survived (reconcile_move).
            record = await self.gates.save(replace(record, unlock_epoch=record.target_epoch))
        record, _ = await self._flush_target(
            record,
            "unlock",
            point,
            lambda r, p: self.gates.save(replace(r, unlock_position=p.position)),
        )
        return record

    async def _step_soft_delete_source(self, record: MoveRecord) -> MoveRecord:
        # Only in a target incarnation where the digests were found equal: the source is
        # the last whole copy otherwise.
        for name in record.mailboxes:
            record = await self._target_present(record, name)
        if record.verified_epoch != record.target_epoch:
            record = await self._verifier.verify_unlocked(record)
        src = record.source_db
        for name in record.mailboxes:
            record, row = await self._call(
                record,
                Side.SOURCE,
                "read source mailbox",
                lambda n=name: self.nodes.mailbox(src, n),
            )
            if row is not None and not row.soft_deleted:
                record = await self._calls.set_state(record, Side.SOURCE, name, "soft-delete")
        return record
