"""Reconciling and verifying a move by content: the target brought to the source's contents
in the incarnations both are in now (`reconcile.reconcile_move`), the digests of both ends
compared before the directory moves (step 8), and again before the source's soft delete
(step 10) when the target changed incarnation after it was verified.

A target that still differs after `max_verify_rounds` repairs, or that differs after it was
unlocked, fails the move with the source untouched.  Both compare the target with the
source less the items the move skipped (`item_limits`): a move never reaches step 8 with
more skipped items than its limits allow.
"""

from __future__ import annotations

from dataclasses import replace
from functools import partial

from mrs_client.batching import write_cut
from mrs_client.epoch_watch import EpochWatch
from mrs_client.errors import MoveFailed, NeedsReconcile
from mrs_client.item_limits import over_limits
from mrs_client.move_parts import MoveStage
from mrs_client.move_store.interface import MoveRecord
from mrs_client.policy import source_lock_taken
from mrs_client.reconcile import Reconciler, differences, reconcile_move


class Verifier(MoveStage):
    """Reconciles and verifies one move's target against its source."""

    def _reconciler(self, record: MoveRecord, watch: EpochWatch) -> Reconciler:
        return Reconciler(
            nodes=self.nodes,
            call=partial(self.gates.node_call, record),
            watch=watch,
            source_db=record.source_db,
            target_db=record.target_db,
            max_items=self.settings.sync_batch,
            max_bytes=write_cut(self.settings, self.max_item_size(record.target_db)),
            max_item_size=self.max_item_size(record.target_db),
            page=self.settings.sync_page,
            page_bytes=self.settings.sync_page_bytes,
            budget=self.budget,
        )

    async def within_limits(self, record: MoveRecord, *, when: str = "") -> None:
        """MoveFailed, naming them, if the move skipped more items than its limits allow.
        The record (with what it skipped) is saved before: `mrs stats` lists them."""
        why = over_limits(
            record.skipped,
            large_item_limit=record.large_item_limit,
            bad_item_limit=record.bad_item_limit,
        )
        if why is None:
            return
        await self.gates.save(record)
        locked = (
            ", locked since step 5" if source_lock_taken(record.step, record.steps_done) else ""
        )
        raise MoveFailed(
            f"{why}{when}; the source is untouched (not soft-deleted{locked}): `mrs stats "
            f"{record.id}` lists every skipped item; raise the limit and `mrs resume "
            f"{record.id}`, or `mrs cancel {record.id}`"
        )

    async def reconcile(self, record: MoveRecord) -> MoveRecord:
        """Bring the target to the source's contents in the incarnations both are in now
        (`reconcile.reconcile_move`), and save where the move goes on from."""
        if record.reconciles >= self.settings.max_reconciles:
            raise MoveFailed(
                f"reconciled {record.reconciles} times and the move's databases still change "
                f"incarnation ({record.reconcile_reason}); the source is untouched"
            )
        record = await self.gates.save(replace(record, reconciles=record.reconciles + 1))
        self._progress(record, f"reconciling by content: {record.reconcile_reason}")
        record, lines = await reconcile_move(record, self._reconciler(record, EpochWatch()))
        record = await self.gates.save(record)
        await self.within_limits(record, when=" (found by the reconcile)")
        self._progress(
            record,
            f"reconciled (source epoch {record.source_epoch}, target epoch "
            f"{record.target_epoch}): {'; '.join(lines)}; going on at step "
            f"{record.steps_done + 1}",
        )
        return record

    async def verify(self, record: MoveRecord) -> MoveRecord:
        """Before step 8: the target holds exactly the source's live items (digests equal),
        in the epoch the final flush was answered for."""
        self._progress(record, "verifying the target against the source")
        await self.within_limits(record)
        watch = EpochWatch(source=record.source_epoch, target=record.target_epoch)
        # UIDs and flags too: the source is locked, and a client's cache of it must hold.
        found, skipped = await differences(
            record, self._reconciler(record, watch), compare=self.settings.verify, imap=True
        )
        if skipped != record.skipped:
            record = await self.gates.save(replace(record, skipped=skipped))
            await self.within_limits(record, when=" (found by the verification)")
        if record.flush_epoch != record.target_epoch:
            raise NeedsReconcile(
                f"the final flush was answered for epoch {record.flush_epoch}, the target is "
                f"at epoch {record.target_epoch}",
                target_changed=True,
            )
        if found:
            record = await self.gates.save(replace(record, verify_rounds=record.verify_rounds + 1))
            if record.verify_rounds > self.settings.max_verify_rounds:
                raise MoveFailed(
                    f"the target still differs from the source after "
                    f"{record.verify_rounds - 1} repairs: {'; '.join(found)}; the source "
                    f"is untouched (not soft-deleted)"
                )
            raise NeedsReconcile(f"verification: {'; '.join(found)}", target_changed=True)
        record = await self.gates.save(replace(record, verified_epoch=record.target_epoch))
        n = len(record.skipped)
        left_out = f" less {n} skipped item{'s' if n != 1 else ''}" if n else ""
        self._progress(
            record,
            f"verified: the target equals the source{left_out} in epoch {record.target_epoch}",
        )
        return record

    async def verify_unlocked(self, record: MoveRecord) -> MoveRecord:
        """Step 10 in a target incarnation newer than the verified one (it kept the unlock):
        compare the digests again.  The target is its user's now and is not repaired; if it
        differs, the move fails and the source stays whole (not soft-deleted)."""
        watch = EpochWatch(source=record.source_epoch, target=record.target_epoch)
        found, _ = await differences(record, self._reconciler(record, watch), compare=True)
        if found:
            raise MoveFailed(
                f"the target changed incarnation (epoch {record.verified_epoch} -> "
                f"{record.target_epoch}) after it was verified and unlocked, and differs from "
                f"the source: {'; '.join(found)}; the source is kept (not soft-deleted): "
                f"compare the two and soft-delete it by hand"
            )
        record = await self.gates.save(replace(record, verified_epoch=record.target_epoch))
        self._progress(
            record, f"verified again: the target equals the source in epoch {record.target_epoch}"
        )
        return record
