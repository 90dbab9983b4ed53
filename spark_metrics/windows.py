"""The three aggregates as Spark transformations over history samples; no I/O here.

- `copy_windows`: per database copy and window, the queue figures and fractions;
- `constraint_windows`: per database and window, the fraction of sample times at which each
  constraint would have been Satisfied, by the guarantee service's rules run in
  `applyInPandas` (`spark_metrics.constraints`), grouped by database and hour so that each
  Python call sees thousands of rows rather than one sample;
- `site_worst`: per site and window, the copy with the highest copy queue, with its figures.

Every output carries `date` (YYYY-MM-DD, UTC, of the window's start), the partition column.
Windows are aligned to UTC midnight and divide a day, so a window never straddles dates.
"""

from __future__ import annotations

import pandas as pd
from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from guarantee_api.values import Limits
from spark_metrics.constraints import COUNTS_SCHEMA, FRACTION_COLUMNS, INPUT_COLUMNS
from spark_metrics.constraints import satisfaction_counts as _counts

# percentile_approx's accuracy: exact for groups of up to about this many samples (a 1 h
# window of 1 s polls is 3,600), a relative rank error of 1/accuracy beyond.
PERCENTILE_ACCURACY = 10_000


def with_window(samples: DataFrame, window_s: int) -> DataFrame:
    """Add `window_start`, `window_end` and `date` to history samples."""
    start = F.timestamp_seconds(F.floor(F.unix_seconds("time") / window_s) * window_s)
    return (
        samples.withColumn("window_start", start)
        .withColumn("window_end", F.col("window_start") + F.expr(f"INTERVAL {window_s} SECONDS"))
        .withColumn("date", F.date_format("window_start", "yyyy-MM-dd"))
    )


def _healthy() -> Column:
    """Healthy for a passive copy, Mounted for the active; false when not reachable."""
    active = F.col("role") == F.lit("Active")
    ok = F.when(active, F.col("status") == "Mounted").otherwise(F.col("status") == "Healthy")
    return F.coalesce(F.col("reachable") & ok, F.lit(False))


def _replay_span_us() -> Column:
    """Microseconds of log time in the replay queue (inspected - replayed log time); null when
    either time is unknown. The same quantity the health rule holds against ReplayLagTime."""
    return F.unix_micros("last_inspected_log_time") - F.unix_micros("last_replayed_log_time")


def _replay_lag_s() -> Column:
    span = F.greatest(F.lit(0.0), _replay_span_us() / F.lit(1e6))
    return F.when(F.col("replay_queue_length") <= 0, F.lit(0.0)).otherwise(span)


def _queue(name: str) -> list[Column]:
    return [
        F.avg(name).alias(f"{name}_mean"),
        F.max(name).alias(f"{name}_max"),
        F.percentile_approx(name, 0.95, PERCENTILE_ACCURACY).alias(f"{name}_p95"),
    ]


COPY_KEYS = ("date", "window_start", "window_end", "database", "copy", "site")


def copy_windows(windowed: DataFrame) -> DataFrame:
    """Per copy and window: samples, queue mean/max/p95, healthy and reachable fractions, the
    largest replay lag (seconds of log time waiting in the replay queue)."""
    return windowed.groupBy(*COPY_KEYS).agg(
        F.count(F.lit(1)).alias("samples"),
        *_queue("copy_queue_length"),
        *_queue("replay_queue_length"),
        F.avg(_healthy().cast("double")).alias("healthy_fraction"),
        F.avg(F.coalesce(F.col("reachable"), F.lit(False)).cast("double")).alias(
            "reachable_fraction"
        ),
        F.max(_replay_lag_s()).alias("replay_lag_max_s"),
    )


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
    have been Satisfied by `guarantee_api.policy.evaluate_health`."""
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
    return summed.select(
        F.date_format("window_start", "yyyy-MM-dd").alias("date"),
        "window_start",
        (F.col("window_start") + F.expr(f"INTERVAL {window_s} SECONDS")).alias("window_end"),
        "database",
        "samples",
        *[(F.col(c) / F.col("samples")).alias(c) for c in FRACTION_COLUMNS.values()],
    )
