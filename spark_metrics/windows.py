"""The three aggregates as Spark transformations over history samples; no I/O here.

- `copy_windows`: per database copy and window, the queue figures and fractions;
- `constraint_windows`: per database and window, the fraction of sample times at which each
  constraint would have been Satisfied, by the guarantee service's rules run in
  `applyInPandas` (`spark_metrics.constraints`), grouped by database and hour so that each
  Python call sees thousands of rows rather than one sample;
- `site_worst`: per site and window, the copy with the highest copy queue, with its figures.

Every output carries `date` (YYYY-MM-DD, UTC, of the window's start), the partition column,
and `window_end`, both computed per window after the aggregation.
Windows are aligned to UTC midnight and divide a day, so a window never straddles dates.
"""

from __future__ import annotations

import pandas as pd
from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from dag_common.guarantee.values import Limits
from dag_common.model import CopyRole, CopyStatus
from spark_metrics.constraints import COUNTS_SCHEMA, FRACTION_COLUMNS, INPUT_COLUMNS
from spark_metrics.constraints import satisfaction_counts as _counts


def with_window(samples: DataFrame, window_s: int) -> DataFrame:
    """Add `window_start` (UTC, aligned to midnight) to history samples."""
    start = F.timestamp_seconds(F.floor(F.unix_seconds("time") / window_s) * window_s)
    return samples.withColumn("window_start", start)


def _window_columns(window_s: int) -> list[Column]:
    """`date` and `window_end`, computed once per window after aggregating (not per sample:
    formatting a date string per sample cost more than the aggregation itself)."""
    return [
        F.date_format("window_start", "yyyy-MM-dd").alias("date"),
        (F.col("window_start") + F.expr(f"INTERVAL {window_s} SECONDS")).alias("window_end"),
    ]


def _healthy() -> Column:
    """Healthy for a passive copy, Mounted for the active; false when not reachable."""
    active = F.col("role") == F.lit(CopyRole.ACTIVE.value)
    ok = F.when(active, F.col("status") == CopyStatus.MOUNTED.value).otherwise(
        F.col("status") == CopyStatus.HEALTHY.value
    )
    return F.coalesce(F.col("reachable") & ok, F.lit(False))


def _replay_span_us() -> Column:
    """Microseconds of log time in the replay queue (inspected - replayed log time); null when
    either time is unknown. The same quantity the health rule holds against ReplayLagTime."""
    return F.unix_micros("last_inspected_log_time") - F.unix_micros("last_replayed_log_time")


def _replay_lag_s() -> Column:
    """Seconds of log time in the replay queue: 0 for an empty queue, null when unknown (a
    sample that is not fresh: `greatest` alone would skip the null and say 0)."""
    span = _replay_span_us() / F.lit(1e6)
    return F.when(F.col("replay_queue_length") <= 0, F.lit(0.0)).when(
        span.isNotNull(), F.greatest(F.lit(0.0), span)
    )


def _p95(histogram: Column) -> Column:
    """The exact nearest-rank 95th percentile of a sorted array of (v, n) value counts: the
    smallest v with at least 95 % of the samples at or below it."""
    total = F.aggregate(histogram, F.lit(0).cast("long"), lambda acc, x: acc + x["n"])
    rank = F.floor((total * 95 + 99) / 100)  # ceil(0.95 n) in integers
    start = F.struct(F.lit(0).cast("long").alias("cum"), F.lit(None).cast("long").alias("v"))
    return F.aggregate(
        histogram,
        start,
        lambda acc, x: F.struct(
            (acc["cum"] + x["n"]).alias("cum"),
            F.when(acc["v"].isNull() & (acc["cum"] + x["n"] >= rank), x["v"])
            .otherwise(acc["v"])
            .alias("v"),
        ),
        lambda acc: acc["v"],
    )


def _histogram(name: str) -> Column:
    """The (value, samples) pairs of queue `name` in a group, nulls left out, sorted."""
    pairs = F.collect_list(F.struct(F.col(name).alias("v"), F.col("n").alias("n")))
    return F.array_sort(F.filter(pairs, lambda x: x["v"].isNotNull())).alias(f"{name}_hist")


def _queue(name: str) -> list[Column]:
    counted = F.when(F.col(name).isNotNull(), F.col("n"))
    return [
        (F.sum(F.col(name) * F.col("n")) / F.sum(counted)).alias(f"{name}_mean"),
        F.max(name).alias(f"{name}_max"),
        _histogram(name),
    ]


KEYS = ("window_start", "database", "copy", "site")
COPY_COLUMNS = (
    "date", "window_start", "window_end", "database", "copy", "site", "samples",
    "copy_queue_length_mean", "copy_queue_length_max", "copy_queue_length_p95",
    "replay_queue_length_mean", "replay_queue_length_max", "replay_queue_length_p95",
    "healthy_fraction", "reachable_fraction", "replay_lag_max_s",
)  # fmt: skip


def _finish(name: str, window_s: int) -> Column:
    if name.endswith("_p95"):
        return _p95(F.col(name.replace("_p95", "_hist"))).alias(name)
    if name in ("date", "window_end"):
        return dict(zip(("date", "window_end"), _window_columns(window_s), strict=True))[name]
    return F.col(name)


def copy_windows(windowed: DataFrame, window_s: int) -> DataFrame:
    """Per copy and window: samples, queue mean/max/p95, healthy and reachable fractions, the
    largest replay lag (seconds of log time waiting in the replay queue).

    Two hash aggregations rather than one with percentile_approx (an object aggregate, about
    4x slower here): first per window and (copy queue, replay queue) pair, whose few distinct
    values collapse the samples; then per window, where the value counts give the exact p95."""
    queues = ("copy_queue_length", "replay_queue_length")
    counted = windowed.groupBy(*KEYS, *queues).agg(
        F.count(F.lit(1)).alias("n"),
        F.sum(_healthy().cast("long")).alias("healthy"),
        F.sum(F.coalesce(F.col("reachable"), F.lit(False)).cast("long")).alias("reachable"),
        F.max(_replay_lag_s()).alias("lag"),
    )
    per_window = counted.groupBy(*KEYS).agg(
        F.sum("n").alias("samples"),
        *_queue("copy_queue_length"),
        *_queue("replay_queue_length"),
        (F.sum("healthy") / F.sum("n")).alias("healthy_fraction"),
        (F.sum("reachable") / F.sum("n")).alias("reachable_fraction"),
        F.max("lag").alias("replay_lag_max_s"),
    )
    return per_window.select(*[_finish(c, window_s) for c in COPY_COLUMNS])


def site_worst(copies: DataFrame) -> DataFrame:
    """Per site and window, the copy with the highest copy queue (ties: highest mean, then by
    name, so that every run picks the same copy) and its figures."""
    keys = ["date", "window_start", "window_end", "site"]
    order = Window.partitionBy(*keys).orderBy(
        F.col("copy_queue_length_max").desc_nulls_last(),
        F.col("copy_queue_length_mean").desc_nulls_last(),
        "database",
        "copy",
    )
    return (
        copies.withColumn("copies_in_site", F.count(F.lit(1)).over(Window.partitionBy(*keys)))
        .withColumn("rank", F.row_number().over(order))
        .where(F.col("rank") == 1)
        .drop("rank")
        .select(*keys, "copies_in_site", *[c for c in copies.columns if c not in keys])
    )


def constraint_windows(windowed: DataFrame, limits: Limits, window_s: int) -> DataFrame:
    """Per database and window: sample times, and the fraction at which each constraint would
    have been Satisfied by `dag_common.guarantee.policy.evaluate_health`."""
    prepared = windowed.withColumn("replay_span_us", _replay_span_us()).withColumn(
        "hour", F.floor(F.unix_seconds("time") / 3600)
    )

    def counts_of(pdf: pd.DataFrame) -> pd.DataFrame:
        return _counts(pdf, limits)

    counts = (
        prepared.select(*INPUT_COLUMNS, "hour")
        .groupBy("database", "hour")
        .applyInPandas(counts_of, schema=COUNTS_SCHEMA)
    )
    summed = counts.groupBy("database", "window_start").agg(
        F.sum("samples").alias("samples"),
        *[F.sum(c).alias(c) for c in FRACTION_COLUMNS.values()],
    )
    date, window_end = _window_columns(window_s)
    return summed.select(
        date,
        "window_start",
        window_end,
        "database",
        "samples",
        *[(F.col(c) / F.col("samples")).alias(c) for c in FRACTION_COLUMNS.values()],
    )
