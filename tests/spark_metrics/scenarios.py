"""Database states at sample times, and what the guarantee rules say of them when fed the
real reports (with real log times) directly: the reference the pipeline is checked against."""

from __future__ import annotations

from datetime import datetime, timedelta

import pandas as pd

from dag_common.guarantee.policy import evaluate_health
from dag_common.guarantee.values import CopySnapshot, DatabaseView, GuaranteeStatus, Limits
from dag_common.model import CopyRole, CopyStatus, CopyStatusReport
from spark_metrics.constraints import CONSTRAINTS, FRACTION_COLUMNS, INPUT_COLUMNS
from tests.spark_metrics.history import T0, row


def _state(at: datetime, i: int) -> list[dict[str, object]]:
    """DB1 on mbx1 (active, redmond), mbx2 (redmond), mbx3 (dublin) at sample `i`."""
    kind = i % 7
    active = row(at, "mbx1", role="Active")
    mbx2, mbx3 = row(at, "mbx2", cq=i % 4), row(at, "mbx3", rq=2, span_s=30)
    if kind == 1:  # the remote copy is behind
        mbx3 = row(at, "mbx3", cq=12)
    elif kind == 2:  # the active's node is unreachable: judged by its last-known role and site
        active = row(at, "mbx1", role="Active", reachable=False)
    elif kind == 3:  # the remote copy's replay queue spans more than ReplayLagTime + 10 min
        mbx3 = row(at, "mbx3", rq=40, span_s=900, lag_s=120)
    elif kind == 4:  # a lagged copy within its ReplayLagTime + 10 min
        mbx3 = row(at, "mbx3", rq=40, span_s=900, lag_s=600)
    elif kind == 5:  # nobody reachable, nobody ever reported
        active, mbx2, mbx3 = (
            {**row(at, c, reachable=False), "last_known_role": None}
            for c in ("mbx1", "mbx2", "mbx3")
        )
    elif kind == 6:  # the local passive failed, the remote one is fine
        mbx2 = row(at, "mbx2", status="FailedAndSuspended")
    return [active, mbx2, mbx3]


def sample_rows(n: int, step: timedelta = timedelta(seconds=7)) -> list[dict[str, object]]:
    """`n` sample times of DB1 (three copies each), cycling through the states above."""
    return [r for i in range(n) for r in _state(T0 + i * step, i)]


def _reference_snapshot(r: dict[str, object]) -> CopySnapshot:
    """A history row as the live service would have held it: the real report, real times."""
    if r["reachable"]:
        report = CopyStatusReport(
            database=r["database"], node=r["copy"], site=r["site"], role=CopyRole(r["role"]),
            status=CopyStatus(r["status"]), activation_preference=1,
            last_log_generated=r["last_log_generated"], last_log_inspected=r["last_log_inspected"],
            last_log_replayed=r["last_log_replayed"], copy_queue_length=r["copy_queue_length"],
            replay_queue_length=r["replay_queue_length"],
            last_inspected_log_time=r["last_inspected_log_time"],
            last_replayed_log_time=r["last_replayed_log_time"],
            replay_lag_time=timedelta(seconds=r["replay_lag_time_s"]), epoch=r["epoch"],
        )  # fmt: skip
        return CopySnapshot(r["database"], r["copy"], r["site"], report)
    last = None
    if r["last_known_role"]:
        last = CopyStatusReport(
            database=r["database"], node=r["copy"], site=r["site"],
            role=CopyRole(r["last_known_role"]), status=CopyStatus.HEALTHY, activation_preference=1,
        )  # fmt: skip
    return CopySnapshot(r["database"], r["copy"], r["site"], last, problem=r["problem"])


def reference_satisfied(rows: list[dict[str, object]], limits: Limits | None = None) -> dict:
    """(database, time) -> Satisfied per constraint, by evaluate_health on the real reports."""
    by_time: dict[tuple, list] = {}
    for r in rows:
        by_time.setdefault((r["database"], r["time"]), []).append(r)
    out = {}
    for key, group in by_time.items():
        copies = tuple(_reference_snapshot(r) for r in sorted(group, key=lambda r: r["copy"]))
        view = DatabaseView(key[0], copies, has_status=any(c.report for c in copies))
        out[key] = tuple(
            evaluate_health(view, c, {}, limits or Limits()).status is GuaranteeStatus.SATISFIED
            for c in CONSTRAINTS
        )
    return out


def reference_fractions(rows: list[dict[str, object]], window_s: int) -> list[dict[str, object]]:
    """Per (database, window): sample times and the Satisfied fraction per constraint."""
    sums: dict[tuple, list[int]] = {}
    for (db, at), ok in reference_satisfied(rows).items():
        start = datetime.fromtimestamp(int(at.timestamp()) // window_s * window_s, at.tzinfo)
        acc = sums.setdefault((db, start), [0] * (1 + len(ok)))
        acc[0] += 1
        for i, v in enumerate(ok, 1):
            acc[i] += v
    return [
        {
            "date": start.strftime("%Y-%m-%d"),
            "window_start": start.replace(tzinfo=None),
            "window_end": (start + timedelta(seconds=window_s)).replace(tzinfo=None),
            "database": db,
            "samples": acc[0],
            **{c: acc[i] / acc[0] for i, c in enumerate(FRACTION_COLUMNS.values(), 1)},
        }
        for (db, start), acc in sorted(sums.items())
    ]


def pandas_input(rows: list[dict[str, object]], window_s: int) -> pd.DataFrame:
    """The rows as `satisfaction_counts` receives them from Spark."""
    out = []
    for r in rows:
        at = r["time"]
        start = datetime.fromtimestamp(int(at.timestamp()) // window_s * window_s, at.tzinfo)
        inspected, replayed = r["last_inspected_log_time"], r["last_replayed_log_time"]
        span = (
            (inspected - replayed) // timedelta(microseconds=1) if inspected and replayed else None
        )
        out.append({**r, "window_start": start, "replay_span_us": span})
    return pd.DataFrame(out)[list(INPUT_COLUMNS)]
