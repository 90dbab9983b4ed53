"""Suspending and cancelling a move request (Exchange's Suspend-MoveRequest and
Remove-MoveRequest): `mrs suspend ID`, `mrs cancel ID`.

A worker (`mrs serve`, or `mrs move` in the foreground) on any host may be running the move.
Nothing is sent to it: the request to stop is saved in the move store
(`MoveStore.request_stop`), the running mover stops at its next safe point and saves the move
Suspended, and its move lease is released when it returns.  Whoever holds that lease owns
the move; these operations wait for it (`hold`), and do their work holding it, so a mover can
never start under a cancel.  A worker killed lets its lease run out: they wait for that.

- Suspend: a move nobody runs is saved Suspended at once.  A suspended move keeps its
  mailbox claim, its target copy (locked) and, after step 5, its source lock;
  `mrs resume ID` goes on from where it stopped.
- Cancel: only before step 8 (after it the directory names the target: the move can only go
  forward).  The source is unlocked if step 5 may have locked it, the target copy is
  removed through the node API (`DELETE …/mailboxes/{mailbox}`), and the move is saved
  Cancelled, which releases its claim.  Nothing else of the source is touched.  The cancel
  request is saved before anything is changed: a cancel interrupted (mrs killed, a node
  down) keeps any `mrs resume` out, and `mrs cancel ID` again finishes it.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING

from dag_common.clock import Clock
from dag_common.echo import quoted
from mrs_client.errors import MoveBusy, MoveFailed, MoveRejected, NodeCallError
from mrs_client.lease import hold as lease_hold
from mrs_client.lease import worker_id
from mrs_client.move_store.interface import MoveLease, MoveRecord, MoveStore
from mrs_client.policy import (
    MoveState,
    MoveStep,
    StopRequest,
    cancel_refusal,
    source_lock_taken,
    suspend_refusal,
)

if TYPE_CHECKING:
    from dag_common.store_api import NodeStore
    from mrs_client.steps import Directory

logger = logging.getLogger(__name__)
POLL = 0.1  # seconds between two looks at whether the running mover has let the move go


@dataclass(frozen=True, slots=True)
class Stopped:
    """What an operation did: the record as it is now, and one line saying so."""

    record: MoveRecord
    line: str
    done: bool = True  # False: asked, but the running mover has not stopped yet


async def _get(requests: MoveStore, move_id: str) -> MoveRecord:
    record = await requests.get(move_id)
    if record is None:
        raise MoveRejected(f"no move request {quoted(move_id)}")
    return record


@contextlib.asynccontextmanager
async def hold(
    requests: MoveStore,
    move_id: str,
    action: StopRequest,
    *,
    clock: Clock,
    wait: timedelta,
) -> AsyncIterator[MoveLease | str]:
    """Hold the move's lease, first asking the worker that holds it to stop (`action`) and
    waiting up to `wait` for it to let go.  Yields the lease once held, or, when the worker
    did not stop in time, who holds it (the request stays: the worker still stops at its
    next safe point)."""
    me = worker_id(f"mrs-{action}")
    deadline = clock.monotonic() + wait.total_seconds()
    asked = entered = False
    while True:
        try:
            async with lease_hold(requests, move_id, me, clock=clock) as lease:
                entered = True
                yield lease
                return
        except MoveBusy as busy:
            if entered:  # the body's, not the claim's
                raise
            if not asked:
                await requests.request_stop(move_id, action, clock.now())
                logger.info("move %s: %s asked of the worker running it", move_id, action)
                asked = True
            if clock.monotonic() >= deadline:
                yield str(busy).removeprefix(f"move {move_id} is being run by another worker, ")
                return
        await clock.sleep(POLL)


async def suspend(requests: MoveStore, move_id: str, *, clock: Clock, wait: timedelta) -> Stopped:
    """Suspend a move: at once if nobody runs it, else at the running mover's next safe
    point (waiting up to `wait` for it)."""
    record = await _get(requests, move_id)
    refused = suspend_refusal(record.state)
    if refused:
        raise MoveRejected(f"move {move_id} {refused}")
    async with hold(requests, move_id, StopRequest.SUSPEND, clock=clock, wait=wait) as holder:
        if isinstance(holder, str):
            return Stopped(
                await _get(requests, move_id),
                f"move {move_id}: suspend requested; {holder} has not stopped within "
                f"{wait.total_seconds():g}s, it stops at its next safe point",
                done=False,
            )
        record = await _get(requests, move_id)
        refused = suspend_refusal(record.state)
        if refused:  # it ended (completed, failed) before reaching a safe point
            await requests.clear_stop(move_id)
            raise MoveFailed(f"move {move_id} {refused}")
        # Saved Suspended, the store carries out the suspend request; so again for a move
        # its mover suspended already (for another request), lest this one's own request,
        # written after the mover looked, be left standing.
        if (
            record.state is not MoveState.SUSPENDED
            or await requests.stop_requested(move_id) is StopRequest.SUSPEND
        ):
            record = await requests.save(
                record.unstalled(state=MoveState.SUSPENDED),
                clock.now(),
                lease=holder,
            )
    return Stopped(
        record,
        f"move {move_id} suspended at step {int(record.step)} ({record.steps_done} of 10 done); "
        f"`mrs resume {move_id}` goes on",
    )


async def cancellable(requests: MoveStore, move_id: str) -> MoveRecord:
    """The move's record if a cancel may go on (or it is cancelled already), as its record
    says; MoveRejected otherwise.  Asks no node: the CLI checks this first."""
    record = await _get(requests, move_id)
    refused = (
        None
        if record.state is MoveState.CANCELLED
        else cancel_refusal(record.state, record.steps_done)
    )
    if refused:
        raise MoveRejected(f"move {move_id} {refused}")
    return record


async def cancel(
    requests: MoveStore,
    move_id: str,
    *,
    nodes: NodeStore,
    directory: Directory,
    clock: Clock,
    wait: timedelta,
) -> Stopped:
    """Cancel a move before step 8 (module docstring); MoveRejected after it."""
    record = await cancellable(requests, move_id)
    if record.state is MoveState.CANCELLED:
        return Stopped(record, f"move {move_id} was already cancelled")
    async with hold(requests, move_id, StopRequest.CANCEL, clock=clock, wait=wait) as holder:
        if isinstance(holder, str):
            raise MoveFailed(
                f"move {move_id}: cancel requested, but {holder} has not stopped within "
                f"{wait.total_seconds():g}s; `mrs cancel {move_id}` again finishes it"
            )
        record = await _get(requests, move_id)
        if record.state is MoveState.CANCELLED:
            return Stopped(record, f"move {move_id} was already cancelled")
        refused = cancel_refusal(record.state, record.steps_done)
        for name in record.mailboxes:
            if not refused and await directory.mailbox_database(name) == record.target_db:
                # step 8 done before a crash, not yet saved as done
                refused = cancel_refusal(record.state, MoveStep.UPDATE_DIRECTORY)
        if refused:
            # The mover reached step 8 before its safe point: the cancel is withdrawn.
            await requests.clear_stop(move_id)
            suspended = record.state is MoveState.SUSPENDED
            hint = f": `mrs resume {move_id}` goes on" if suspended else ""
            raise MoveRejected(f"move {move_id} {refused} (its state: {record.state}{hint})")
        await requests.request_stop(move_id, StopRequest.CANCEL, clock.now())
        try:
            done = await _undo(record, nodes)
        except NodeCallError as exc:
            raise MoveFailed(
                f"move {move_id}: cancel not finished: {exc}; `mrs cancel {move_id}` again "
                "finishes it"
            ) from exc
        record = await requests.save(
            record.unstalled(state=MoveState.CANCELLED),
            clock.now(),
            lease=holder,
        )
    return Stopped(record, f"move {move_id} cancelled: {done}")


async def _undo(record: MoveRecord, nodes: NodeStore) -> str:
    """Unlock the source (if the move may have locked it) and remove the target copy; what
    was done, in words.  Each part is done again harmlessly by a second cancel."""
    src, dst = record.source_db, record.target_db
    locked = source_lock_taken(record.step, record.steps_done)
    if locked:
        for name in record.mailboxes:
            box = await nodes.mailbox(src, name)
            if box is not None and box.locked and not box.soft_deleted:
                await nodes.set_state(src, name, "unlock")
    removed = []
    for name in record.mailboxes:
        box = await nodes.mailbox(dst, name)
        if box is None:
            continue
        if not box.locked:
            # Until step 9 the move keeps its target copy locked: an unlocked one is not it.
            raise MoveFailed(
                f"{dst} holds an unlocked mailbox {name!r}, not the move's copy; left alone, "
                "the move is not cancelled"
            )
        if await nodes.delete_mailbox(dst, name):
            removed.append(name)
    said = [
        f"target mailbox removed from {dst}" if removed else f"no target mailbox in {dst}",
        "source unlocked" if locked else "source untouched (never locked)",
    ]
    return ", ".join(said)
