"""How often each DataMoveReplicationConstraint would have been Satisfied: the guarantee
service's own rules (`dag_common.guarantee.policy.evaluate_health`) applied to every sample time of
every database in the history. Nothing here restates a rule; this module only rebuilds the
rules' inputs from history rows.

From rows to a `DatabaseView` (one per database and sample time):

- a row with a fresh status (`reachable`) becomes a `CopySnapshot` whose `CopyStatusReport`
  carries the role, status, copy and replay queues, ReplayLagTime, epoch, and the last
  inspected and replayed log times;
- a row without one becomes a `CopySnapshot` with a `problem` (the recorded reason); if the
  copy's last-known role was recorded, its report carries that role, because the service
  still takes an unreachable active's last-known role and site (SecondDatacenter); the rest of
  that report is a placeholder the rules do not read for a copy with a problem;
- `has_status` is false when no copy of the database had ever reported (Retry, as live).

What history cannot give back, and what is assumed instead:

- the caller's average copy queue (the service keeps one per caller): none is given, so the
  rules use the copy queue itself, as they do for a caller with no average;
- the measured rates (they only predict wait times, never decide Satisfied): none;
- the database's stream history of epochs (not used by CheckReplicationHealth): none;
- history written before the second schema version has no inspected log time: a copy with a
  non-zero replay queue then fails the replay queue check ("times unknown"), as the service
  itself does when it does not know the times; ReplayLagTime is then taken as 0.

The two log times enter the rules only through their difference (the span of the replay
queue), so each report anchors that span at one fixed instant: the same state of a database
then has the same inputs at every sample, and is evaluated once (`_evaluate_state` is
memoised). `tests/spark_metrics/test_constraints.py` checks this against the rules fed the
real times. The generations and the copy's error text only feed the reasons' wording, which
the pipeline does not keep, so they are left out of the reports for the same reason.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from functools import lru_cache

import numpy as np
import pandas as pd

from dag_common.guarantee.policy import evaluate_health
from dag_common.guarantee.values import CopySnapshot, DatabaseView, GuaranteeStatus, Limits
from dag_common.model import CopyRole, CopyStatus, CopyStatusReport
from dag_common.model import DataMoveReplicationConstraint as Constraint

CONSTRAINTS: tuple[Constraint, ...] = tuple(Constraint)
# Output column per constraint: the fraction of sample times at which it was Satisfied.
FRACTION_COLUMNS = {
    Constraint.NONE: "none_satisfied",
    Constraint.SECOND_COPY: "second_copy_satisfied",
    Constraint.SECOND_DATACENTER: "second_datacenter_satisfied",
    Constraint.ALL_DATACENTERS: "all_datacenters_satisfied",
    Constraint.ALL_COPIES: "all_copies_satisfied",
}
_ANCHOR = datetime(2000, 1, 1, tzinfo=UTC)

# The columns `satisfaction_counts` reads, in the order of a copy's state tuple after `copy`.
STATE_COLUMNS = (
    "copy",
    "site",
    "reachable",
    "role",
    "status",
    "copy_queue_length",
    "replay_queue_length",
    "replay_span_us",  # last inspected log time - last replayed log time; null if unknown
    "replay_lag_time_s",
    "epoch",
    "last_known_role",
    "problem",
)
INPUT_COLUMNS = ("database", "time", "window_start", *STATE_COLUMNS)
COUNTS_SCHEMA = "database string, window_start timestamp, samples long, " + ", ".join(
    f"{c} long" for c in FRACTION_COLUMNS.values()
)

# One copy at one sample: the values of STATE_COLUMNS.
CopyState = tuple[object, ...]


def _enum(kind: type, value: object) -> object | None:
    try:
        return kind(value) if value is not None else None
    except ValueError:
        return None


def copy_snapshot(database: str, state: CopyState) -> CopySnapshot:
    """One history row (as a state tuple) as the rules' `CopySnapshot`."""
    (node, site, reachable, role, status, cq, rq, span_us, lag_s, epoch, known, problem) = state
    role_v, status_v = _enum(CopyRole, role), _enum(CopyStatus, status)
    if reachable and role_v is not None and status_v is not None:
        replayed = inspected = None
        if span_us is not None:
            replayed = _ANCHOR
            inspected = _ANCHOR + timedelta(microseconds=int(span_us))
        report = CopyStatusReport(
            database=database,
            node=str(node),
            site=str(site),
            role=role_v,
            status=status_v,
            activation_preference=0,  # not read by the rules, not in history
            copy_queue_length=int(cq or 0),
            replay_queue_length=int(rq or 0),
            last_inspected_log_time=inspected,
            last_replayed_log_time=replayed,
            replay_lag_time=timedelta(seconds=float(lag_s or 0.0)),
            epoch=int(epoch or 0),
        )
        return CopySnapshot(database, str(node), str(site), report)
    why = str(problem) if problem else "status not fresh at this sample"
    if reachable and (role_v is None or status_v is None):
        why = f"unrecognised role {role!r} or status {status!r} in history"
    known_v = _enum(CopyRole, known)
    last = None
    if known_v is not None:
        last = CopyStatusReport(
            database=database,
            node=str(node),
            site=str(site),
            role=known_v,
            status=CopyStatus.FAILED,  # placeholder: not read for a copy with a problem
            activation_preference=0,
        )
    return CopySnapshot(database, str(node), str(site), last, problem=why)


def database_view(database: str, states: Sequence[CopyState]) -> DatabaseView:
    """The view of one database at one sample time, from its copies' rows."""
    copies = tuple(copy_snapshot(database, s) for s in states)
    return DatabaseView(database, copies, has_status=any(c.report for c in copies))


def evaluate_view(view: DatabaseView, limits: Limits) -> tuple[bool, ...]:
    """Satisfied or not, per constraint in CONSTRAINTS order, by `evaluate_health`."""
    return tuple(
        evaluate_health(view, constraint, {}, limits).status is GuaranteeStatus.SATISFIED
        for constraint in CONSTRAINTS
    )


@lru_cache(maxsize=1 << 16)
def _evaluate_state(
    database: str, states: tuple[CopyState, ...], limits: Limits
) -> tuple[bool, ...]:
    return evaluate_view(database_view(database, states), limits)


def _column(pdf: pd.DataFrame, name: str) -> list[object]:
    """A column as Python values, with None (not NaN) for a null."""
    col = pdf[name]
    if col.dtype.kind == "f" and name != "replay_lag_time_s":
        return [None if v != v else int(v) for v in col.tolist()]  # a nullable int as float
    return col.astype(object).where(col.notna(), None).tolist()


def satisfaction_counts(pdf: pd.DataFrame, limits: Limits) -> pd.DataFrame:
    """For `applyInPandas`: the rows of one database (any span of time) in, and per window
    the number of sample times and how many of them satisfied each constraint out."""
    out_cols = ["database", "window_start", "samples", *FRACTION_COLUMNS.values()]
    if pdf.empty:
        return pd.DataFrame(columns=out_cols)
    pdf = pdf.sort_values(["database", "time", "copy"], kind="stable")
    databases = pdf["database"].tolist()
    times = pdf["time"].astype("int64").to_numpy()  # only compared with each other
    windows = pdf["window_start"].tolist()
    states = list(zip(*(_column(pdf, c) for c in STATE_COLUMNS), strict=True))
    change = np.flatnonzero(
        (np.diff(times) != 0) | (np.array(databases[1:], dtype=object) != databases[:-1])
    )
    starts = np.concatenate(([0], change + 1)).tolist()
    ends = [*starts[1:], len(states)]
    totals: dict[tuple[str, object], list[int]] = {}
    for start, end in zip(starts, ends, strict=True):
        database = databases[start]
        satisfied = _evaluate_state(database, tuple(states[start:end]), limits)
        key = (database, windows[start])
        acc = totals.get(key)
        if acc is None:
            acc = totals[key] = [0] * (1 + len(CONSTRAINTS))
        acc[0] += 1
        for i, ok in enumerate(satisfied, start=1):
            acc[i] += ok
    return pd.DataFrame(
        [(db, window, *acc) for (db, window), acc in totals.items()], columns=out_cols
    )
