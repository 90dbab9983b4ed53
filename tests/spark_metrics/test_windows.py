"""The three aggregates on small DataFrames built in code, against figures worked out by hand
(copies, sites) and against the guarantee rules themselves (constraints)."""

from __future__ import annotations

from datetime import datetime, timedelta

from pyspark.sql import Row
from pyspark.testing import assertDataFrameEqual

from dag_common.guarantee.values import Limits
from spark_metrics.aggregate import SPARK_SCHEMA
from spark_metrics.windows import constraint_windows, copy_windows, site_worst, with_window
from tests.spark_metrics.history import T0, row
from tests.spark_metrics.scenarios import reference_fractions, sample_rows

W0 = T0.replace(tzinfo=None)  # Spark hands back session-time (UTC) timestamps without a zone
W1 = W0 + timedelta(minutes=1)
W2 = W0 + timedelta(minutes=2)


def frame(spark, rows):
    return spark.createDataFrame(rows, SPARK_SCHEMA)


def _copy_row(**kw):
    base = dict(date="2026-11-22", window_start=W0, window_end=W1, database="DB1")
    return Row(**{**base, **kw})


def _q(queue: str, mean: float, most: int, p95: int) -> dict[str, object]:
    name = f"{queue}_queue_length"
    return {f"{name}_mean": mean, f"{name}_max": most, f"{name}_p95": p95}


def test_copy_windows_figures(spark):
    at = [T0 + timedelta(seconds=s) for s in (0, 15, 30, 45)]
    rows = [
        row(at[0], "mbx2", cq=2, rq=1, span_s=20),
        row(at[1], "mbx2", cq=4, rq=3, span_s=50),
        row(at[2], "mbx2", status="Resynchronizing", cq=6),
        row(at[3], "mbx2", reachable=False),
        row(at[0], "mbx1", role="Active"),
        row(at[1], "mbx1", role="Active", status="Dismounted"),
        row(T0 + timedelta(minutes=1), "mbx1", role="Active", cq=1),
        row(T0 + timedelta(minutes=1), "mbx3", reachable=False),  # no fresh sample: no figure
    ]
    got = copy_windows(with_window(frame(spark, rows), 60), 60)
    expected = [
        _copy_row(copy="mbx2", site="redmond", samples=4, **_q("copy", 4.0, 6, 6),
                  **_q("replay", 4 / 3, 3, 3), healthy_fraction=0.5, reachable_fraction=0.75,
                  replay_lag_max_s=50.0),
        _copy_row(copy="mbx1", site="redmond", samples=2, **_q("copy", 0.0, 0, 0),
                  **_q("replay", 0.0, 0, 0), healthy_fraction=0.5, reachable_fraction=1.0,
                  replay_lag_max_s=0.0),
        _copy_row(window_start=W1, window_end=W2, copy="mbx1", site="redmond", samples=1,
                  **_q("copy", 1.0, 1, 1), **_q("replay", 0.0, 0, 0), healthy_fraction=1.0,
                  reachable_fraction=1.0, replay_lag_max_s=0.0),
        _copy_row(window_start=W1, window_end=W2, copy="mbx3", site="dublin", samples=1,
                  **_q("copy", None, None, None), **_q("replay", None, None, None),
                  healthy_fraction=0.0, reachable_fraction=0.0, replay_lag_max_s=None),
    ]  # fmt: skip
    assertDataFrameEqual(got, expected)


def test_site_worst_picks_the_highest_copy_queue(spark):
    rows = [
        row(T0, "mbx1", role="Active", cq=0),
        row(T0, "mbx2", cq=7),
        row(T0, "mbx2", database="DB2", cq=7, rq=5),  # tie on max: DB1 before DB2
        row(T0, "mbx3", cq=3),
    ]
    worst = site_worst(copy_windows(with_window(frame(spark, rows), 60), 60))
    got = worst.select("site", "copies_in_site", "database", "copy", "copy_queue_length_max")
    assertDataFrameEqual(
        got,
        [Row(site="redmond", copies_in_site=3, database="DB1", copy="mbx2",
             copy_queue_length_max=7),
         Row(site="dublin", copies_in_site=1, database="DB1", copy="mbx3",
             copy_queue_length_max=3)],
    )  # fmt: skip


def test_constraint_fractions_equal_the_guarantee_rules(spark):
    rows = sample_rows(40, step=timedelta(seconds=11))  # crosses an hour: two pandas groups
    rows += [{**r, "database": "DB2"} for r in sample_rows(3)]
    got = constraint_windows(with_window(frame(spark, rows), 60), Limits(), 60)
    expected = [Row(**r) for r in reference_fractions(rows, 60)]
    assert len(expected) >= 8
    assertDataFrameEqual(got, expected)


def test_windows_are_utc_and_partitioned_by_date(spark):
    late = datetime.fromisoformat("2026-11-22T23:59:59+00:00")
    rows = [row(late, "mbx2"), row(late + timedelta(seconds=2), "mbx2")]
    windows = copy_windows(with_window(frame(spark, rows), 3600), 3600)
    got = windows.select("date", "window_start")
    assertDataFrameEqual(
        got,
        [Row(date="2026-11-22", window_start=datetime(2026, 11, 22, 23)),
         Row(date="2026-11-23", window_start=datetime(2026, 11, 23, 0))],
    )  # fmt: skip
