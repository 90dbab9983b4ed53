"""`spark-metrics aggregate`: wires the stages together; the rules live elsewhere.

    1. discover  list the history, examine new or changed files (`discover`), reuse what the
                 manifest knows about the others, name every file skipped and why;
    2. plan      which dates to rewrite and which files to read (`incremental`);
    3. copies    per copy and window, and per site the worst copy (`windows`), written;
    4. constraints  per database and window, by the guarantee service's rules, written;
    5. record    the manifest and the run's summary (`manifest`), only after the output.

Output, Parquet under OUT_DIR, each partitioned by `date`: `copies/`, `sites/`,
`constraints/`. Each run replaces whole date partitions (dynamic partition overwrite), so a
re-run writes the same rows. A file that Spark cannot read although its footer looked fine
(a damaged data page) fails the job naming it; it is then skipped like any other damaged
file and the dates are computed again without it, at most `MAX_RETRIES` times.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import UTC, date, datetime, time, timedelta
from pathlib import Path

from py4j.protocol import Py4JError
from pyspark.errors import PySparkException
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import from_arrow_schema

from dag_common.history_schema import SCHEMA
from spark_metrics import manifest as state
from spark_metrics.discover import FileInfo, Skipped, examine_all, list_history
from spark_metrics.errors import BadInputError, PipelineError
from spark_metrics.incremental import Plan, plan_run
from spark_metrics.manifest import LastRun, SkippedFile
from spark_metrics.options import AggregateOptions
from spark_metrics.progress import Progress, StageWatcher
from spark_metrics.windows import constraint_windows, copy_windows, site_worst, with_window

OUTPUTS = ("copies", "sites", "constraints")
MAX_RETRIES = 3
SPARK_SCHEMA = from_arrow_schema(SCHEMA)


@dataclass(frozen=True, slots=True)
class RunSummary:
    """What one run did, as the CLI prints it and `_state/last_run.json` keeps it."""

    files_seen: int
    files_read: int
    rows_read: int
    dates: tuple[str, ...]
    skipped: tuple[Skipped, ...]
    window_s: int
    seconds: float = 0.0
    rows_written: dict[str, int] = field(default_factory=dict)

    def last_run(self, finished: datetime) -> LastRun:
        """The run as `_state/last_run.json` keeps it."""
        return LastRun(
            finished=finished,
            window_s=self.window_s,
            files_seen=self.files_seen,
            files_read=self.files_read,
            rows_read=self.rows_read,
            dates_written=list(self.dates),
            rows_written=self.rows_written,
            skipped=[SkippedFile(path=s.path, reason=s.reason) for s in self.skipped],
            seconds=round(self.seconds, 3),
        )


def _discover(
    options: AggregateOptions, known: state.Manifest, progress: Progress
) -> tuple[list[FileInfo], list[Skipped], int]:
    listing = list_history(options.input)
    good: list[FileInfo] = []
    skipped: list[Skipped] = [
        Skipped(p, "empty partition: no history file") for p in listing.empty_partitions
    ]
    fresh = []
    for path, size, mtime_ns in listing.files:
        done, bad = known.done.get(path), known.skipped.get(path)
        if done is not None and done.stamp == (size, mtime_ns):
            good.append(done)
        elif bad is not None and (bad.size, bad.mtime_ns) == (size, mtime_ns):
            skipped.append(bad)
        else:
            fresh.append((path, size, mtime_ns))
    progress.say(
        f"[1/5] discover: {len(listing.files)} history files under {options.input}, "
        f"{len(fresh)} new or changed to examine"
    )
    for result in examine_all(options.input, fresh):
        if isinstance(result, FileInfo):
            good.append(result)
        else:
            skipped.append(result)
    for s in skipped:
        progress.say(f"      skipped {s.path}: {s.reason}")
    return good, skipped, len(listing.files)


def _within_dates(dates: tuple[date, ...]) -> Column:
    """`time` falls on one of `dates` (UTC): a few ranges of timestamps, which Parquet's row
    group statistics can answer, rather than a date string formatted per sample."""
    ranges: list[list[date]] = []
    for d in sorted(dates):
        if ranges and ranges[-1][1] + timedelta(days=1) == d:
            ranges[-1][1] = d
        else:
            ranges.append([d, d])
    cond = F.lit(False)
    for first, last in ranges:
        low = datetime.combine(first, time(), UTC)
        high = datetime.combine(last + timedelta(days=1), time(), UTC)
        cond = cond | ((F.col("time") >= F.lit(low)) & (F.col("time") < F.lit(high)))
    return cond


def _samples(spark: SparkSession, options: AggregateOptions, plan: Plan) -> DataFrame:
    paths = [str(options.input / f.path) for f in plan.read]
    df = spark.read.schema(SPARK_SCHEMA).parquet(*paths)
    df = df.where(_within_dates(plan.dates))
    if options.since is not None:
        df = df.where(F.col("time") >= F.lit(options.since))
    if options.until is not None:
        df = df.where(F.col("time") < F.lit(options.until))
    return df.where(F.col("time").isNotNull() & F.col("database").isNotNull())


def _write(df: DataFrame, path: Path) -> None:
    (
        df.repartition("date")
        .sortWithinPartitions(
            *[c for c in ("window_start", "database", "site", "copy") if c in df.columns]
        )
        .write.mode("overwrite")
        .option("partitionOverwriteMode", "dynamic")
        .partitionBy("date")
        .parquet(str(path))
    )


def _run_spark(
    spark: SparkSession, options: AggregateOptions, plan: Plan, progress: Progress
) -> dict[str, int]:
    windowed = with_window(_samples(spark, options, plan), options.window_s)
    dates = [d.isoformat() for d in plan.dates]
    progress.say("[3/5] copies: per copy and window, then the worst copy per site")
    _write(copy_windows(windowed, options.window_s), options.output / "copies")
    # The sites come from the copy windows just written (only the dates of this run): no
    # second pass over the samples, and no cache to hold.
    copies = spark.read.parquet(str(options.output / "copies")).where(F.col("date").isin(dates))
    copies = copies.withColumn("date", F.date_format("date", "yyyy-MM-dd"))
    _write(site_worst(copies), options.output / "sites")
    progress.say("[4/5] constraints: evaluate_health per database and sample time")
    constraints = constraint_windows(windowed, options.limits, options.window_s)
    _write(constraints, options.output / "constraints")
    return {"copy_windows": copies.count()}


def _named_file(exc: BaseException, plan: Plan, root: Path) -> FileInfo | None:
    text = str(exc)
    for f in plan.read:
        if str(root / f.path) in text:
            return f
    return None


def aggregate(spark: SparkSession, options: AggregateOptions, progress: Progress) -> RunSummary:
    """Run the aggregation into `options.output`; see the module docstring."""
    if not options.input.is_dir():
        raise BadInputError(f"--input {options.input}: no such directory")
    known = state.load_manifest(options.output)
    if known.window_s is not None and known.window_s != options.window_s:
        raise BadInputError(
            f"--output {options.output} holds {known.window_s}s windows, not "
            f"{options.window_s}s: use another output directory for another window"
        )
    good, skipped, seen = _discover(options, known, progress)
    written: dict[str, int] = {}
    for attempt in range(MAX_RETRIES + 1):
        plan = plan_run(
            good, known.done, since=options.since, until=options.until, full=options.full
        )
        rows = sum(f.rows for f in plan.read)
        progress.say(
            f"[2/5] plan: {plan.pending} new or changed files; rewrite {len(plan.dates)} dates "
            f"from {len(plan.read)} files, {rows:,} rows; {len(skipped)} files skipped"
        )
        if not plan.dates:
            break
        try:
            with StageWatcher(spark.sparkContext, progress):
                written = _run_spark(spark, options, plan, progress)
            break
        except (PySparkException, Py4JError) as exc:
            bad = _named_file(exc, plan, options.input)
            if bad is None or attempt == MAX_RETRIES:
                raise PipelineError(f"Spark failed: {_first_line(exc)}") from exc
            reason = f"damaged data: {_first_line(exc)}"
            progress.say(f"      skipped {bad.path}: {reason}; computing its dates again")
            skipped.append(Skipped(bad.path, reason, bad.size, bad.mtime_ns))
            good = [f for f in good if f.path != bad.path]
    summary = RunSummary(
        files_seen=seen,
        files_read=len(plan.read),
        rows_read=sum(f.rows for f in plan.read),
        dates=tuple(d.isoformat() for d in plan.dates),
        skipped=tuple(skipped),
        window_s=options.window_s,
        seconds=progress.elapsed,
        rows_written=written,
    )
    progress.say(f"[5/5] record: {len(plan.completes)} files done, manifest and run summary")
    done = {**known.done, **{f.path: f for f in plan.completes}}
    on_disk = {f.path for f in good} | {f.path for f in plan.read}
    manifest = replace(
        known,
        window_s=options.window_s,
        done={p: f for p, f in done.items() if p in on_disk},
        skipped={s.path: s for s in skipped if s.size or s.mtime_ns},
    )
    try:
        state.save_manifest(options.output, manifest)
        state.save_run(options.output, summary.last_run(datetime.now(UTC)))
    except OSError as exc:
        raise PipelineError(f"cannot record the run under {options.output}: {exc}") from exc
    return summary


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0][:500] if text else type(exc).__name__
