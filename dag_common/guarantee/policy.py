"""The Data Guarantee rules, pure: frozen snapshots of copy status in, an `Answer` out.

The per-copy conditions (`conditions.py`) judge each copy; here the request's constraint is
evaluated over those verdicts (SecondCopy, SecondDatacenter, AllDatacenters, AllCopies),
with the pre-checks and the wait time, and an LSN's epoch is judged against the stream's
history.  No I/O and no clock reads: the view decides freshness (a copy whose status cannot
be trusted carries a `problem`), the servicer supplies the caller's averages.

Safety invariant: `Satisfied` is returned only when the request's constraint is met by copies
whose status is fresh, or when the constraint is None, or when the database has no passive
copy. Anything unknown (unreachable node, stale status, unreported copy, no active) counts
against the guarantee, never for it.

Stream incarnations: an LSN that names its epoch is judged against the database's history of
epochs (`dag_common.incarnation`).  If a later epoch began at or below the LSN's generation,
the write was lost in that failover: NotSatisfied with `lost`, whatever the constraint and
however far the new stream has moved on; never Satisfied.  Otherwise only copies on the
current epoch count, since a copy still following an older active holds that active's
generations, not necessarily the current stream's.  An epoch the history does not know yet,
or a history that could not be read, is Retry.  An LSN without an epoch is judged by its
generation alone, as before: unsafe across failovers.  The seed's commit-time check cannot
see a fork at all.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import timedelta
from functools import partial

from dag_common.guarantee.conditions import judge_active, judge_flush, judge_health, seconds
from dag_common.guarantee.values import (
    Answer,
    CopySnapshot,
    CopyVerdict,
    DatabaseView,
    FlushTarget,
    GuaranteeStatus,
    Limits,
)
from dag_common.incarnation import current_epoch, fork_below
from dag_common.model import CopyRole, Lsn
from dag_common.model import DataMoveReplicationConstraint as Constraint


@dataclass(frozen=True, slots=True)
class _Outcome:
    satisfied: bool
    reason: str
    relevant: tuple[CopyVerdict, ...]  # the passive copies the constraint looked at
    eta_s: float | None
    eta_why: str = ""


def _best(verdicts: Iterable[CopyVerdict]) -> tuple[float | None, str]:
    """The soonest predicted copy among alternatives (any one of them would do)."""
    timed = [(v.eta_s, v) for v in verdicts if v.eta_s is not None]
    if not timed:
        return None, ""
    eta, v = min(timed, key=lambda t: t[0])
    return eta, f"{v.node}: {v.eta_why}"


def _worst(parts: list[tuple[float | None, str]]) -> tuple[float | None, str]:
    """The latest of predictions that must all come true; None if any is unpredictable."""
    if not parts or any(eta is None for eta, _ in parts):
        return None, ""
    eta, why = max(parts, key=lambda p: p[0] or 0.0)
    return eta, why


def _failures(verdicts: Iterable[CopyVerdict]) -> str:
    text = "; ".join(v.describe_failures() for v in verdicts if not v.meets)
    return text or "no such copy"


def _any_meets(label: str, verdicts: tuple[CopyVerdict, ...]) -> _Outcome:
    meeting = [v.node for v in verdicts if v.meets]
    if meeting:
        return _Outcome(True, f"met by {label} {', '.join(meeting)}", verdicts, 0.0)
    eta, why = _best(verdicts)
    return _Outcome(
        False, f"no {label} meets the conditions: {_failures(verdicts)}", verdicts, eta, why
    )


def _apply(
    constraint: Constraint, active: CopyVerdict | None, passives: tuple[CopyVerdict, ...]
) -> _Outcome:
    if constraint is Constraint.SECOND_COPY:
        return _any_meets("passive copy", passives)
    if constraint is Constraint.SECOND_DATACENTER:
        assert active is not None
        remote = tuple(v for v in passives if v.site != active.site)
        return _any_meets(f"passive copy outside site {active.site}", remote)
    # AllDatacenters and AllCopies also need the active mounted.
    if active is None or not active.meets:
        why = "no copy reports Active" if active is None else active.describe_failures()
        return _Outcome(False, f"the active copy is not mounted: {why}", passives, None)
    if constraint is Constraint.ALL_COPIES:
        bad = tuple(v for v in passives if not v.meets)
        if not bad:
            return _Outcome(True, "met by every passive copy", passives, 0.0)
        eta, why = _worst([_best([v]) for v in bad])
        return _Outcome(
            False,
            f"not every passive copy meets the conditions: {_failures(bad)}",
            passives,
            eta,
            why,
        )
    sites = sorted({v.site for v in passives})
    missing = [s for s in sites if not any(v.meets for v in passives if v.site == s)]
    if not missing:
        return _Outcome(
            True, f"met in every site holding a passive copy: {', '.join(sites)}", passives, 0.0
        )
    parts = [_best(v for v in passives if v.site == s) for s in missing]
    eta, why = _worst(parts)
    bad = tuple(v for v in passives if v.site in missing)
    return _Outcome(
        False,
        f"no passive copy meets the conditions in site(s) {', '.join(missing)}: {_failures(bad)}",
        passives,
        eta,
        why,
    )


def _clamp(seconds: float, limits: Limits) -> timedelta:
    low, high = limits.wait_min.total_seconds(), limits.wait_max.total_seconds()
    return timedelta(seconds=min(high, max(low, seconds)))


def _answer(
    method: str,
    db: str,
    constraint: Constraint,
    status: GuaranteeStatus,
    wait: timedelta,
    reason: str,
    copies: tuple[CopyVerdict, ...] = (),
    *,
    epoch: int = 0,
    lost: bool = False,
    expected_in: timedelta | None = None,
) -> Answer:
    """The answer to `method`, its reason led by what was asked and what is answered."""
    return Answer(
        db,
        constraint,
        status,
        wait,
        f"{method} {constraint} {status} for {db}: {reason}",
        copies,
        epoch=epoch,
        lost=lost,
        expected_in=expected_in,
    )


def _evaluate(
    view: DatabaseView,
    constraint: Constraint,
    limits: Limits,
    method: str,
    judge: dict[str, CopyVerdict],
) -> Answer:
    """Common frame: pre-checks, active detection, the constraint, the wait time."""
    db = view.database
    epoch = current_epoch(view.history) if view.history else 0
    answer = partial(_answer, method, db, constraint, epoch=epoch)

    if constraint is Constraint.NONE:
        return answer(GuaranteeStatus.SATISFIED, timedelta(0), "constraint None ignores copies")
    if len(view.copies) <= 1:
        return answer(GuaranteeStatus.SATISFIED, timedelta(0), "the database has no passive copy")
    if not view.has_status:
        return answer(GuaranteeStatus.RETRY, limits.wait_no_status, "no copy status collected yet")
    fresh_active = [
        c for c in view.copies if c.fresh and c.report and c.report.role is CopyRole.ACTIVE
    ]
    if len(fresh_active) > 1:
        nodes = ", ".join(c.node for c in fresh_active)
        return answer(
            GuaranteeStatus.RETRY,
            limits.wait_no_status,
            f"copies on {nodes} all report Active (switchover in progress)",
        )
    if fresh_active:
        active_copy: CopySnapshot | None = fresh_active[0]
    else:  # an unreachable active keeps its last-known role and site, and fails Mounted
        last = [c for c in view.copies if c.report and c.report.role is CopyRole.ACTIVE]
        active_copy = last[0] if len(last) == 1 else None
    if active_copy is None and constraint is Constraint.SECOND_DATACENTER:
        return answer(
            GuaranteeStatus.RETRY,
            limits.wait_no_status,
            "no copy reports Active, so the active's site is unknown",
        )
    active = judge_active(active_copy) if active_copy else None
    passives = tuple(judge[c.node] for c in view.copies if c is not active_copy)
    outcome = _apply(constraint, active, passives)
    copies = ((active,) if active else ()) + passives
    if outcome.satisfied:
        return answer(GuaranteeStatus.SATISFIED, timedelta(0), outcome.reason, copies)
    if outcome.eta_s is not None:
        wait = _clamp(outcome.eta_s, limits)
        reason = (
            f"{outcome.reason}; predicted to be met in {seconds(outcome.eta_s)} "
            f"({outcome.eta_why}), retry in {seconds(wait.total_seconds())}"
        )
        expected = timedelta(seconds=outcome.eta_s)
        return answer(GuaranteeStatus.NOT_SATISFIED, wait, reason, copies, expected_in=expected)
    if any(v.healthy for v in outcome.relevant):
        wait, why = limits.wait_behind, "a healthy copy is behind"
    else:
        wait, why = limits.wait_no_healthy_copy, "no healthy copy"
    reason = f"{outcome.reason}; {why}, retry in {seconds(wait.total_seconds())}"
    return answer(GuaranteeStatus.NOT_SATISFIED, min(wait, limits.wait_max), reason, copies)


def evaluate_health(
    view: DatabaseView,
    constraint: Constraint,
    averages: Mapping[str, float],
    limits: Limits,
    average_clears_in: Mapping[str, float] | None = None,
) -> Answer:
    """CheckReplicationHealth: `averages` maps node → this caller's average copy queue,
    `average_clears_in` node → seconds until an average over its limit falls under it."""
    clears = average_clears_in or {}
    judged = {
        c.node: judge_health(c, averages.get(c.node), limits, clears.get(c.node))
        for c in view.copies
    }
    return _evaluate(view, constraint, limits, "CheckReplicationHealth", judged)


def evaluate_flush(
    view: DatabaseView, constraint: Constraint, target: FlushTarget, limits: Limits
) -> Answer:
    """CheckReplicationFlush: have enough copies replayed past the target?"""
    method = "CheckReplicationFlush"
    if target.lsn is not None and target.lsn.epoch:
        early = _stream_answer(view, constraint, target.lsn, limits)
        if early is not None:
            return early
    epoch = current_epoch(view.history) if view.history else 0
    judged = {c.node: judge_flush(c, target, limits, epoch) for c in view.copies}
    return _evaluate(view, constraint, limits, method, judged)


def _stream_answer(
    view: DatabaseView, constraint: Constraint, lsn: Lsn, limits: Limits
) -> Answer | None:
    """The answer when the LSN's epoch settles the question before any copy is looked at:
    lost in a failover (NotSatisfied, `lost`), or not judgeable yet (Retry); else None."""
    db, where = view.database, f"generation {lsn.generation} of epoch {lsn.epoch}"
    answer = partial(_answer, "CheckReplicationFlush", db, constraint)

    if view.history is None:
        return answer(
            GuaranteeStatus.RETRY,
            limits.wait_no_status,
            f"the stream history of {db} cannot be read from the cluster store, so whether "
            f"{where} survived every failover is unknown",
        )
    epoch = current_epoch(view.history)
    fork = fork_below(view.history, lsn)
    if fork is not None:
        return answer(
            GuaranteeStatus.NOT_SATISFIED,
            timedelta(0),
            f"the write at {where} was lost: the stream forked when epoch {fork.epoch} began on "
            f"{fork.node} at generation {fork.start_generation}"
            + (
                f", keeping generation {fork.start_generation - 1} only through byte "
                f"{fork.kept_through}"
                if fork.kept_through is not None and lsn.generation == fork.start_generation - 1
                else ", at or below it"
            )
            + "; asking again will not help, the data must be written again",
            epoch=epoch,
            lost=True,
        )
    if lsn.epoch > epoch:
        return answer(
            GuaranteeStatus.RETRY,
            limits.wait_min,
            f"epoch {lsn.epoch} is newer than the history known ({epoch}); it is read "
            "from the cluster store every poll",
            epoch=epoch,
        )
    return None
