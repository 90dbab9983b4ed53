"""The move loop: runs a move request's ten steps, persisting after each, gated on the Data
Guarantee API (decisions from `policy`; waits in `gates`; the steps in `steps`; store calls
with their epochs checked in `end_calls`; reconcile and verify in `verification`, over
`reconcile`).

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

Large and bad items (`item_limits`): the move skips up to its limits, saved in the request
(`mrs resume` keeps them, or takes new ones); past them it fails, naming them, before step
8.  The target's max_item_size is the config's, read at each run: large items that fit a
raised limit are copied by a reconcile when the move is resumed.

An operator stops a move from another process (`mrs suspend`, `mrs cancel`) through the
request store: the loop looks for a stop request at its safe points (before each step,
between the batches of a sync, before each stalled wait: `Gates.checkpoint`), where
everything done is saved as it would be for a kill -9, and saves the move Suspended.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import replace
from datetime import datetime

from dag_common.clock import Clock
from dag_common.config_defaults import DEFAULT_MAX_ITEM_SIZE
from dag_common.echo import quoted
from dag_common.store_api import NodeStore
from mrs_client.body_budget import BodyBudget
from mrs_client.end_calls import EndCalls
from mrs_client.errors import (
    MoveFailed,
    MoveRejected,
    MoveReleased,
    MoveStopped,
    NeedsReconcile,
    NodeCallError,
)
from mrs_client.gates import Gates, GuaranteeClient
from mrs_client.item_limits import now_fitting
from mrs_client.lease import hold, worker_id
from mrs_client.move_parts import MoveParts
from mrs_client.move_store.interface import MoveLease, MoveRecord, MoveStore, new_move_id
from mrs_client.policy import MovePriority, MoveSettings, MoveState, MoveStep, StopRequest
from mrs_client.steps import Directory, MoveSteps
from mrs_client.sync import ChangeSync
from mrs_client.verification import Verifier

logger = logging.getLogger(__name__)
ARCHIVE_SUFFIX = ".archive"


def replacing_line(mailbox: str, target_db: str) -> str:
    """What a move says of a soft-deleted copy it will replace in its target."""
    return (
        f"{target_db} holds a soft-deleted copy of {mailbox} (an earlier move's source): "
        "the move replaces it (purged at step 2)"
    )


class Mover:
    """Creates, runs and resumes move requests."""

    def __init__(
        self,
        *,
        requests: MoveStore,
        nodes: NodeStore,
        guarantee: GuaranteeClient,
        directory: Directory,
        databases: set[str],
        clock: Clock,
        settings: MoveSettings | None = None,
        caller_id: str = "mrs",
        worker: str | None = None,
        progress: Callable[[MoveRecord, str], None] | None = None,
        max_item_sizes: Mapping[str, int] | None = None,
        hold_before_completion: Callable[[MoveRecord], Awaitable[datetime | None]] | None = None,
        budget: BodyBudget | None = None,
    ) -> None:
        """`max_item_sizes`: each database's max_item_size, from the cluster config (a
        database not in it: the config's default).  `budget`: the bodies every mover of the
        process may hold (one of its own, of `settings.memory_budget`, if None)."""
        self.requests = requests
        self.nodes = nodes
        self.guarantee = guarantee
        self.directory = directory
        self.databases = databases
        self.clock = clock
        self.settings = settings or MoveSettings()
        self.caller_id = caller_id
        self.worker = worker or worker_id()
        # A batch's word on a move that finished its syncs (worker.Worker): None, complete
        # now; a time, stay Synced and sync again then.
        self.hold_before_completion = hold_before_completion
        self._progress = progress or (lambda record, line: None)
        self.gates = Gates(
            requests=requests,
            guarantee=guarantee,
            clock=clock,
            settings=self.settings,
            caller_id=caller_id,
            progress=self._progress,
        )
        self.max_item_sizes = dict(max_item_sizes or {})
        self.budget = budget or BodyBudget(self.settings.memory_budget)
        self.calls = EndCalls(nodes=nodes, gates=self.gates)
        parts = MoveParts(
            nodes=nodes,
            gates=self.gates,
            calls=self.calls,
            settings=self.settings,
            max_item_size=self.max_item_size,
            progress=self._progress,
            budget=self.budget,
        )
        self.verifier = Verifier(parts)
        self.steps = MoveSteps(
            parts,
            verifier=self.verifier,
            sync=ChangeSync(parts, verifier=self.verifier),
            directory=directory,
            clock=clock,
        )

    def max_item_size(self, database: str) -> int:
        """The largest item `database` takes, as the cluster config says."""
        return self.max_item_sizes.get(database, DEFAULT_MAX_ITEM_SIZE)

    # ---- creating a request ----------------------------------------------------------------

    async def submit(self, record: MoveRecord) -> MoveRecord:
        """Record a move `request` made (it refused one that cannot be: nothing recorded),
        and say so."""
        await self.requests.create([record])
        self._progress(
            record,
            f"move {record.id} recorded: {', '.join(record.mailboxes)} "
            f"{record.source_db} -> {record.target_db}",
        )
        for name in record.replaces_soft_deleted:
            self._progress(record, replacing_line(name, record.target_db))
        return record

    async def request(
        self,
        mailbox: str,
        target_db: str,
        *,
        with_archive: bool = False,
        large_item_limit: int = 0,
        bad_item_limit: int = 0,
        batch: str | None = None,
        priority: MovePriority = MovePriority.NORMAL,
    ) -> MoveRecord:
        """A new move request, validated against the directory and the nodes but not
        recorded; MoveRejected saying why it cannot be (MoveFailed: a node cannot say)."""
        if large_item_limit < 0 or bad_item_limit < 0:
            raise MoveRejected("an item limit cannot be negative")
        if target_db not in self.databases:
            raise MoveRejected(f"unknown database {quoted(target_db)}")
        source_db = await self.directory.mailbox_database(mailbox)
        if source_db is None:
            raise MoveRejected(f"unknown mailbox {quoted(mailbox)} (not in the mailbox directory)")
        if source_db == target_db:
            raise MoveRejected(f"mailbox {mailbox!r} is already in {target_db}")
        mailboxes = [mailbox]
        if with_archive:
            archive = mailbox + ARCHIVE_SUFFIX
            if await self.directory.mailbox_database(archive) != source_db:
                raise MoveRejected(f"mailbox {mailbox!r} has no archive {archive!r} in {source_db}")
            mailboxes.append(archive)
        replaces: list[str] = []
        for name in mailboxes:
            try:
                row = await self.nodes.mailbox(source_db, name)
                existing = await self.nodes.mailbox(target_db, name)
            except NodeCallError as exc:
                # A refusal (4xx) says the request is wrong; a node down or failing says
                # nothing about it: the move is not recorded and failed (exit 1), to be asked
                # again, not bad input (exit 2).
                if exc.status is not None and 400 <= exc.status < 500:
                    raise MoveRejected(f"cannot check {name!r}: {exc}") from exc
                raise MoveFailed(f"cannot check {name!r} now: {exc}; nothing recorded") from exc
            if row is None or row.soft_deleted:
                raise MoveRejected(f"mailbox {name!r} is not in {source_db}")
            if row.locked:
                raise MoveRejected(f"mailbox {name!r} is locked")
            if existing is not None and not existing.soft_deleted:
                raise MoveRejected(f"{target_db} already holds a mailbox {name!r}")
            if existing is not None:  # an earlier move's source, kept soft-deleted: replaced
                replaces.append(name)
        now = self.clock.now()
        return MoveRecord(
            id=new_move_id(),
            mailboxes=tuple(mailboxes),
            source_db=source_db,
            target_db=target_db,
            created=now,
            updated=now,
            large_item_limit=large_item_limit,
            bad_item_limit=bad_item_limit,
            batch=batch,
            priority=priority,
            replaces_soft_deleted=tuple(replaces),
        )

    # ---- running ---------------------------------------------------------------------------

    async def run(
        self,
        move_id: str,
        *,
        large_item_limit: int | None = None,
        bad_item_limit: int | None = None,
        lease: MoveLease | None = None,
        wait_for_dead_holder: bool = False,
        notify: Callable[[str], None] = lambda _: None,
    ) -> MoveRecord:
        """Run (or resume) a move until it completes or fails; return the final record.
        An item limit given replaces the request's (None: kept).  Under `lease` (a worker
        claimed it), else under a lease this mover claims and renews (`lease.hold`).

        MoveBusy if another worker or client is running the same move right now;
        LeaseLost (the move stopped where it was, for another worker to take over) if the
        lease was lost on the way.  `wait_for_dead_holder`: see `lease.hold` (an operator's
        resume after the process running the move died), told through `notify`."""
        if (large_item_limit or 0) < 0 or (bad_item_limit or 0) < 0:
            raise MoveRejected("an item limit cannot be negative")
        if lease is None:
            async with hold(
                self.requests,
                move_id,
                self.worker,
                clock=self.clock,
                wait_for_dead_holder=wait_for_dead_holder,
                notify=notify,
            ) as held:
                return await self.run(
                    move_id,
                    large_item_limit=large_item_limit,
                    bad_item_limit=bad_item_limit,
                    lease=held,
                )
        self.gates.lease = lease
        try:
            return await self._run_held(move_id, large_item_limit, bad_item_limit)
        finally:
            self.gates.lease = None

    async def _run_held(
        self, move_id: str, large_item_limit: int | None, bad_item_limit: int | None
    ) -> MoveRecord:
        record = await self.requests.get(move_id)
        if record is None:
            raise MoveRejected(f"no move request {move_id!r}")
        self.gates.stored(record)
        if record.state is MoveState.COMPLETED:
            return record
        if record.state is MoveState.CANCELLED:
            raise MoveRejected(f"move {move_id} was cancelled")
        stop = await self.requests.stop_requested(move_id)
        if stop is StopRequest.CANCEL:
            raise MoveRejected(
                f"move {move_id} is being cancelled: `mrs cancel {move_id}` finishes it"
            )
        if stop is StopRequest.SUSPEND:
            await self.requests.clear_stop(move_id)  # asked while nobody ran it: this run overrides
        if record.state is MoveState.SYNCED and record.steps_done == MoveStep.INCREMENTAL_SYNC:
            # Synced and waiting to complete: this run syncs again (step 4) first.
            record = replace(record, steps_done=int(MoveStep.INITIAL_SYNC), not_before=None)
        resumed_after_failure = record.state is MoveState.FAILED
        if resumed_after_failure or record.state is MoveState.SUSPENDED:
            # An operator's resume starts the stall and flush limits afresh; a crash-resume
            # (kill -9) keeps them running, since the time passed while nobody watched counts.
            record = record.unstalled(
                failed_stalled=None,
                flush_started=self.clock.now() if record.flush_started else None,
            )
        if resumed_after_failure:
            record = replace(record, verify_rounds=0, reconciles=0)
        record = replace(
            record,
            state=MoveState.IN_PROGRESS,
            failure=None,
            started=record.started or self.clock.now(),
            worker=self.worker,
            large_item_limit=record.large_item_limit
            if large_item_limit is None
            else large_item_limit,
            bad_item_limit=record.bad_item_limit if bad_item_limit is None else bad_item_limit,
        )
        record = self._items_now_fitting(record)
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
        record = await self.gates.save(record)
        begun = False  # the step after steps_done was saved begun with the step before's end
        try:
            if record.steps_done < MoveStep.UPDATE_DIRECTORY:
                await self.verifier.within_limits(record, when=" (as the move was resumed)")
            while record.steps_done < MoveStep.SOFT_DELETE_SOURCE or record.reconcile_pending:
                try:
                    try:
                        await self.gates.checkpoint(record)
                    except MoveStopped:
                        if begun:  # it stops between the two steps, the next one not begun
                            record = await self.gates.save(
                                replace(record, step=MoveStep(record.steps_done))
                            )
                        raise
                    if record.reconcile_pending:
                        record = await self.verifier.reconcile(record)
                        continue
                    if record.steps_done == MoveStep.INCREMENTAL_SYNC and not begun:
                        until = await self._held_before_completion(record)
                        if until is not None:
                            record = await self.gates.save(
                                replace(record, state=MoveState.SYNCED, not_before=until)
                            )
                            self._progress(
                                record,
                                "synced; waits to complete (next incremental sync at "
                                f"{until.isoformat(timespec='seconds')})",
                            )
                            return record
                    step = MoveStep(record.steps_done + 1)
                    if not begun and record.step is not step:  # (as saved: a new move's 1)
                        record = await self.gates.save(replace(record, step=step))
                    begun = False
                    self._progress(record, f"step {int(step)}: {step.label}")
                    record = await self.steps.step(step)(record)
                    record = replace(record, steps_done=int(step))
                    if step is MoveStep.SOFT_DELETE_SOURCE and not record.reconcile_pending:
                        break  # the last: saved done with the completion, below
                    if not record.reconcile_pending and (
                        step is not MoveStep.INCREMENTAL_SYNC
                        or await self._held_before_completion(record) is None
                    ):
                        # One save for "step N done" and "step N+1 begun": nothing runs
                        # between them but the safe point, which looks as of this save.
                        # (After step 4, unless its batch holds the move Synced: asked
                        # here, before the save, not after it at the top of the loop.)
                        record, begun = replace(record, step=MoveStep(step + 1)), True
                    record = await self.gates.save(record)
                except NeedsReconcile as exc:
                    record = await self._reconcile_due(move_id, record, exc)
        except MoveFailed as exc:
            record = await self.gates.save(
                replace(
                    await self.requests.get(move_id) or record,
                    state=MoveState.FAILED,
                    failure=str(exc),
                    failed_stalled=exc.stalled,
                )
            )
            self._progress(record, f"move failed at step {int(record.step)}: {exc}")
            return record
        except MoveReleased:
            # Given back by a worker that stops: everything done was saved at the safe point,
            # and the record stays as it is for whoever takes the lease next.
            self._progress(record, "move given back by its worker at a safe point")
            return await self.requests.get(move_id) or record
        except MoveStopped as exc:
            # Everything done was saved before the safe point: the stored record is the move.
            record = await self.gates.save(
                (await self.requests.get(move_id) or record).unstalled(state=MoveState.SUSPENDED)
            )
            why = "for `mrs cancel`" if exc.args[0] is StopRequest.CANCEL else "by `mrs suspend`"
            self._progress(
                record,
                f"move stopped {why} at step {int(record.step)} ({record.steps_done} done)",
            )
            return record
        record = await self.gates.save(
            record.unstalled(
                state=MoveState.COMPLETED,
                completed=self.clock.now(),
            )
        )
        self._progress(record, "move completed")
        return record

    async def _held_before_completion(self, record: MoveRecord) -> datetime | None:
        """When a move that finished its syncs syncs next, if its batch holds it back from
        completing (None: it completes now)."""
        if self.hold_before_completion is None:
            return None
        return await self.hold_before_completion(record)

    def _items_now_fitting(self, record: MoveRecord) -> MoveRecord:
        """Large items that fit the target's max_item_size now (the config's was raised
        since they were skipped) are skipped no more: a reconcile copies them.  Not once
        step 8 is done: the skipped items were verified, and the mailbox is its user's."""
        limit = self.max_item_size(record.target_db)
        fitting = now_fitting(record.skipped, limit)
        if not fitting or record.steps_done >= MoveStep.UPDATE_DIRECTORY:
            return record
        keys = {s.key for s in fitting}
        return replace(
            record,
            skipped=tuple(s for s in record.skipped if s.key not in keys),
            reconcile_pending=True,
            reconcile_reason=f"{len(fitting)} large items fit the target's max_item_size of "
            f"{limit:,} bytes now: they are copied",
        )

    async def _reconcile_due(
        self, move_id: str, held: MoveRecord, exc: NeedsReconcile
    ) -> MoveRecord:
        """Save that a reconcile is due (it survives a crash) and why."""
        stored = await self.requests.get(move_id) or held
        record = await self.gates.save(
            stored.unstalled(
                state=MoveState.IN_PROGRESS,
                reconcile_pending=True,
                reconcile_reason=str(exc),
                target_in_doubt=stored.target_in_doubt or exc.target_changed,
            )
        )
        self._progress(record, f"reconcile needed: {exc}")
        logger.warning("move %s: reconcile needed: %s", record.id, exc)
        return record
