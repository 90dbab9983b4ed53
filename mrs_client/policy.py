"""The move's rules, as pure functions of frozen values (no I/O, no clock reads).

Safety invariant: a move reaches step 8 (the directory names the target) only after step 6
saw CheckReplicationFlush answer Satisfied for a point of the target's log past every write
of the final sync (a generation closed after it, or, with every copy in block mode, the
durable end of the open log: `flush_point`), in the incarnation (epoch) the target is in,
and step 7 saw CheckReplicationHealth answer Satisfied.  Nothing here ever turns a Retry or
NotSatisfied into progress, nor a Satisfied answered for another epoch, nor a flush the
service says was lost in a failover.

Epochs: when either end of a move changes incarnation (a failover or a switchover), the
mover reconciles by content before going on, and `after_reconcile` says which step it goes
on from: anything written to the target before a step 6 flush must be flushed again.

Timing, from the seed (all configurable):
- steps 1-4: ask CheckReplicationHealth (every 10 s during the syncs); on NotSatisfied or
  Retry, queue the move and ask again every 30 s, or after the service's retry_after if that
  is longer; fail after 15 min stalled; Satisfied within that time resumes it.  Each
  question asks the service to wait (`wait`, the 30 s): a service that does answers the
  moment the copies recover and is asked again at once otherwise (the wait was the
  mover's); one that does not is asked again after the 30 s (or retry_after) as above.
- step 6: ask CheckReplicationFlush every 10 s for at most 30 min, else fail.  Asked by LSN
  inside the open generation (no roll) when every copy follows in block mode, for at most
  `block_flush_wait`; then the target's log is rolled and the flush asked for that generation.
- step 7: the seed says only "as long as Satisfied, continue"; we apply the stall rule of
  steps 1-4 to it, so a brief blip after the flush does not fail a move that is all but done.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import IntEnum, StrEnum
from typing import TYPE_CHECKING

from dag_common.echo import quoted
from dag_common.model import GuaranteeStatus, Lsn, Position

if TYPE_CHECKING:  # the store API's models: not imported by `mrs list` (issue 48)
    from dag_common.store_api import LogPosition


class MoveStep(IntEnum):
    """The ten steps of a move (the mailbox-moves seed)."""

    RECORD_REQUEST = 1
    CLONE_STRUCTURE = 2
    INITIAL_SYNC = 3
    INCREMENTAL_SYNC = 4
    LOCK_SOURCE = 5
    FINAL_SYNC_AND_FLUSH = 6
    FINAL_HEALTH_CHECK = 7
    UPDATE_DIRECTORY = 8
    UNLOCK_TARGET = 9
    SOFT_DELETE_SOURCE = 10

    @property
    def label(self) -> str:
        return self.name.replace("_", " ").lower()


class MoveState(StrEnum):
    """A move request's state, as Get-MoveRequest shows it."""

    QUEUED = "Queued"
    IN_PROGRESS = "InProgress"
    STALLED = "Stalled"
    FAILED = "Failed"
    COMPLETED = "Completed"
    SUSPENDED = "Suspended"  # stopped by `mrs suspend`; keeps its claim and locks
    # A batch's move that ran its initial and incremental syncs and waits to complete (the
    # batch's --complete-after or --suspend-when-ready-to-complete, Exchange's Synced and
    # AutoSuspended): a worker syncs it again every incremental_sync_interval.
    SYNCED = "Synced"
    CANCELLED = "Cancelled"  # target copy removed, source unlocked, claim released


class MovePriority(IntEnum):
    """A move's priority, with Exchange's names (New-MoveRequest -Priority): workers take
    the highest first, then the oldest."""

    LOWEST = 0
    LOWER = 1
    LOW = 2
    NORMAL = 3
    HIGH = 4
    HIGHER = 5
    HIGHEST = 6
    EMERGENCY = 7

    @classmethod
    def parse(cls, text: str) -> MovePriority:
        """A priority by name, any case; ValueError naming the choices."""
        try:
            return cls[text.strip().upper()]
        except KeyError:
            names = ", ".join(p.name.capitalize() for p in cls)
            raise ValueError(f"unknown priority {quoted(text)} (one of {names})") from None


class StopRequest(StrEnum):
    """What an operator asked of a move that another `mrs` process may be running: the
    running mover stops at its next safe point (`mrs suspend`, `mrs cancel`)."""

    SUSPEND = "suspend"
    CANCEL = "cancel"


# A move in these states never runs again.
FINISHED = frozenset({MoveState.COMPLETED, MoveState.CANCELLED})


def suspend_refusal(state: MoveState) -> str | None:
    """Why a move in `state` cannot be suspended (None: it can).  A failed move is not
    running: it is resumed or cancelled, not suspended."""
    if state in FINISHED or state is MoveState.FAILED:
        return f"is {state.lower()}: only a queued, running or stalled move can be suspended"
    return None


def cancel_refusal(state: MoveState, steps_done: int) -> str | None:
    """Why a move cannot be cancelled (None: it can).  Once step 8 named the target in the
    mailbox directory, the target is the mailbox its users reach: the move only goes on."""
    if state is MoveState.COMPLETED:
        return "is completed"
    if steps_done >= MoveStep.UPDATE_DIRECTORY:
        return (
            "cannot be cancelled: the mailbox directory names the target since step 8, "
            "the move can only go forward"
        )
    return None


def source_lock_taken(step: MoveStep, steps_done: int) -> bool:
    """Whether the move may have locked its source (step 5, or a reconcile after it)."""
    return max(int(step), steps_done) >= MoveStep.LOCK_SOURCE


@dataclass(frozen=True, slots=True)
class GuaranteeAnswer:
    """One answer of the Data Guarantee API, as the mover keeps it.

    `epoch`: the database's epoch as the service knows it (0: the service did not say).
    `lost`: the flush target was lost in a failover; asking again will not help."""

    status: GuaranteeStatus
    retry_after: timedelta
    reason: str
    epoch: int = 0
    lost: bool = False
    waited: timedelta | None = None  # how long the service waited (None: it did not)
    # What a person waiting needs to read: each copy that does not meet the conditions and
    # the first thing it fails on (`mbx3: status Suspended (maintenance)`); the full
    # reason stays in `reason` (and the move request's answers).
    short: str = ""
    # When the service expects the conditions to be met (None: not predictable).
    expected_in: timedelta | None = None

    @property
    def clears(self) -> str:
        """ ", expected to clear in about 2 min 30 s" when the service predicts it, else ""."""
        if self.expected_in is None or self.status is GuaranteeStatus.SATISFIED:
            return ""
        return f", expected to clear in about {about(self.expected_in)}"


def about(span: timedelta) -> str:
    """A wait as a person reads it: "40 s", "2 min 30 s", "1 h 5 min"."""
    total = max(0, round(span.total_seconds()))
    hours, rest = divmod(total, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours} h {minutes} min" if minutes else f"{hours} h"
    if minutes:
        return f"{minutes} min {secs} s" if secs else f"{minutes} min"
    return f"{secs} s"


@dataclass(frozen=True, slots=True)
class MoveSettings:
    """The seed's timings, overridable (tests shorten them; the clock is injected anyway)."""

    health_check_interval: timedelta = timedelta(seconds=10)
    stall_retry_interval: timedelta = timedelta(seconds=30)
    stall_limit: timedelta = timedelta(minutes=15)
    flush_retry_interval: timedelta = timedelta(seconds=10)
    # The first CheckReplicationFlush after a roll waits this long (never more than
    # flush_retry_interval).  0: a service that waits (`wait`) and hears of the copies'
    # progress as it happens answers as soon as the flush is there; a head start (two of
    # its poll intervals) suits a service that only polls and answers at once.
    flush_first_check_after: timedelta = timedelta(0)
    flush_limit: timedelta = timedelta(minutes=30)
    # A flush asked inside the open generation (every copy in block mode) waits this long for
    # Satisfied, then the target's log is rolled and the flush asked for that generation: a
    # copy may have left block mode after the target's position was read.
    block_flush_wait: timedelta = timedelta(seconds=30)
    sync_batch: int = 500
    # Bytes per write of small items: a write is one transaction, and one of small items is
    # cut to fit in one log generation of the target (the CLI sets half the smallest
    # log_file_size of the cluster; never past the target's max_item_size: reconcile.
    # write_cut).  An item larger than the cut goes alone, in its own write.
    sync_batch_bytes: int = 256 * 1024
    # The source is read a page of this many changes at a time, the next page asked while the
    # current one is written: a mailbox is never held in memory whole.
    sync_page: int = 2000
    # ... and of bodies reaching this many bytes at most (one item at least: the node's
    # listing stops once they reach it; `page_bytes`): a move holds about two pages at a
    # time (the one it writes, and the next one read ahead, once while it is parsed:
    # `listing_bodies`), so a page of large items is one item.
    sync_page_bytes: int = 4 * 1024 * 1024
    # The bodies the movers of one process may hold (`body_budget`): past it, the next
    # page waits until bodies read are written.
    memory_budget: int = 256 * 1024 * 1024
    # Incremental passes stop when a pass finds at most this many changes (or after max).
    incremental_quiet_changes: int = 50
    incremental_max_passes: int = 5
    # Before step 8, compare the mailbox digests of source and target; a mismatch is
    # repaired and flushed again, at most this many times, then the move fails.
    verify: bool = True  # False only for bench/move.py's same-run comparison
    max_verify_rounds: int = 3
    # A move whose ends keep changing incarnation fails after this many reconciles.
    max_reconciles: int = 20


class StallStatus(StrEnum):
    """Why a move waits, by the status details of Exchange's Get-MoveRequestStatistics:
    the data guarantee of the target's copies not met (health or flush), an end's active
    copy unreachable, or a mailbox locked by another operation."""

    TARGET_REPLICATION = "StalledDueToTarget_MdbReplication"
    TARGET_AVAILABILITY = "StalledDueToTarget_MdbAvailability"
    SOURCE_AVAILABILITY = "StalledDueToSource_MdbAvailability"
    MAILBOX_LOCK = "StalledDueToMailboxLock"


class Verdict(StrEnum):
    CONTINUE = "continue"
    WAIT = "wait"
    FAIL = "fail"
    RECONCILE = "reconcile"  # the target's stream moved on: compare contents, flush again


@dataclass(frozen=True, slots=True)
class Decision:
    """What to do after a guarantee answer: go on, wait `wait` and ask again, or fail."""

    verdict: Verdict
    wait: timedelta = timedelta(0)
    reason: str = ""
    stalled_since: datetime | None = None
    status: StallStatus = StallStatus.TARGET_REPLICATION  # while waiting (or failed waiting)


def gate(
    answer: GuaranteeAnswer,
    *,
    now: datetime,
    stalled_since: datetime | None,
    settings: MoveSettings,
) -> Decision:
    """The rule of steps 1-4 (and 7) for a CheckReplicationHealth answer."""
    if answer.status is GuaranteeStatus.SATISFIED:
        return Decision(Verdict.CONTINUE, reason=answer.reason)
    since = stalled_since or now
    if over := _past_limit(since, now, settings.stall_limit):
        waiting = f"waiting for the data guarantee: {answer.status}: {answer.reason}"
        return Decision(Verdict.FAIL, reason=f"stalled for {over} {waiting}", stalled_since=since)
    wait = max(settings.stall_retry_interval, answer.retry_after)
    wait = min(wait, since + settings.stall_limit - now)
    return Decision(
        Verdict.WAIT,
        wait=max(wait, timedelta(0)),
        reason=f"{answer.status}: {answer.reason}",
        stalled_since=since,
    )


def _past_limit(since: datetime, now: datetime, limit: timedelta) -> str | None:
    """How long it has been since `since`, against `limit`, as a failure says it ("900s
    (limit 900s)"), once that is reached; None before."""
    waited = now - since
    if waited < limit:
        return None
    return f"{waited.total_seconds():.0f}s (limit {limit.total_seconds():.0f}s)"


def flush_gate(
    answer: GuaranteeAnswer,
    *,
    now: datetime,
    flush_started: datetime,
    settings: MoveSettings,
    epoch: int = 0,
) -> Decision:
    """The rule of step 6 for a CheckReplicationFlush answer about a roll made at `epoch`."""
    if answer.lost:
        return Decision(
            Verdict.RECONCILE,
            reason=f"the flush target was lost in a failover (epoch {answer.epoch}): "
            f"{answer.reason}",
        )
    if answer.status is GuaranteeStatus.SATISFIED:
        if not (answer.epoch and epoch) or answer.epoch == epoch:
            return Decision(Verdict.CONTINUE, reason=answer.reason)
        if answer.epoch > epoch:
            return Decision(
                Verdict.RECONCILE,
                reason=f"Satisfied for epoch {answer.epoch}, but the roll was made at epoch "
                f"{epoch}: the target changed incarnation since",
            )
        # The service has not seen the target's new epoch yet: its Satisfied is about
        # an older stream and proves nothing; ask again.
        answer = GuaranteeAnswer(
            GuaranteeStatus.RETRY,
            answer.retry_after,
            f"Satisfied for epoch {answer.epoch}, an older one than the roll's {epoch}",
        )
    if over := _past_limit(flush_started, now, settings.flush_limit):
        failure = f"CheckReplicationFlush not satisfied after {over}"
        reason = f"{failure}: {answer.status}: {answer.reason}"
        return Decision(Verdict.FAIL, reason=reason, stalled_since=flush_started)
    return Decision(
        Verdict.WAIT,
        wait=min(settings.flush_retry_interval, flush_started + settings.flush_limit - now),
        reason=f"waiting for replication flush: {answer.status}: {answer.reason}",
        stalled_since=flush_started,
    )


def after_reconcile(
    step: MoveStep, steps_done: int, *, target_changed: bool, unlock_survived: bool
) -> int:
    """Which steps still count as done after a reconcile during `step` (the new steps_done).

    - Steps 1-5: the step goes on (its cursors were set by the reconcile).
    - Steps 6-8: a target in a new incarnation, or rewritten by the reconcile, or whose
      flush was lost (`target_changed`) needs a new final roll and flush: back to step 6.
      A source-only change that rewrote nothing leaves the flush valid.
    - Steps 9-10 (the directory names the target): if the target kept the unlock in its
      new incarnation, every write before it survived too (a fork keeps a prefix of the
      stream): only the unlock's roll and flush are done again (step 9).  A target that is
      locked again lost the unlock, and perhaps more: it was repaired, back to step 6.
    """
    if step <= MoveStep.LOCK_SOURCE:
        return steps_done
    if step <= MoveStep.UPDATE_DIRECTORY:
        return MoveStep.LOCK_SOURCE if target_changed else steps_done
    if not target_changed:
        return steps_done
    return MoveStep.UPDATE_DIRECTORY if unlock_survived else MoveStep.LOCK_SOURCE


def health_check_due(last_check: datetime | None, now: datetime, settings: MoveSettings) -> bool:
    """During the syncs, ask the guarantee every `health_check_interval`."""
    return last_check is None or now - last_check >= settings.health_check_interval


def incremental_done(changes_in_pass: int, passes: int, settings: MoveSettings) -> bool:
    """Stop the incremental passes of step 4 once the source is quiet (or enough passes)."""
    return changes_in_pass <= settings.incremental_quiet_changes or (
        passes >= settings.incremental_max_passes
    )


def flush_point(position: LogPosition, epoch: int) -> Lsn | None:
    """A flush point past every commit answered before `position` was read, without a roll,
    in the stream of `epoch` (the target's, as the move saw it); None if only a roll makes
    one (a copy follows in file mode and replays closed logs only).

    A flush point is an `Lsn`, not a type of its own: the whole generation (offset 0,
    `Lsn.record_offset` None) or the record at a byte of the open one, which is what
    CheckReplicationFlush takes, so it goes to the service as it is.

    The open log holding nothing: its previous generation, closed already.  Every passive
    copy following in block mode: the open log's last durable byte (CheckReplicationFlush by
    LSN counts a copy holding a byte past a record's start as holding the record; a copy's
    buffer grows by whole group commits, so holding that byte holds every commit before).
    Not in a stream that has closed no generation yet (a new database): its copies claim its
    epoch when they first inspect a generation of it, so none could be counted by LSN inside
    the open log, and the flush would wait `block_flush_wait` out before rolling."""
    generation, durable = position.durable_end
    if not position.open_records:
        return Position(generation - 1).at(epoch)
    follows = set(position.block_followers)
    if position.passive_copies and follows >= set(position.passive_copies) and generation > 1:
        return Position(generation, durable - 1).at(epoch)
    return None
