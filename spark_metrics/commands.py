"""`spark-metrics aggregate` and `report` (`spark_metrics.cli` says the exit codes): their
options read and checked before Spark starts; Spark itself imported by `aggregate` alone."""

from __future__ import annotations

import argparse
from pathlib import Path

from dag_common.cli import ExitCode
from dag_common.config import load_config
from dag_common.errors import ConfigError
from dag_common.guarantee.values import Limits
from spark_metrics.errors import BadInputError, MetricsError
from spark_metrics.options import (
    AggregateOptions,
    check_range,
    parse_conf,
    parse_time,
    parse_window,
)


def _options(args: argparse.Namespace) -> AggregateOptions:
    since = parse_time(args.since, "--since") if args.since else None
    until = parse_time(args.until, "--until") if args.until else None
    check_range(since, until)
    limits = Limits()
    if args.config is not None:
        try:
            limits = Limits.from_config(load_config(args.config).guarantee_api.limits)
        except ConfigError as exc:
            raise BadInputError(str(exc)) from exc
    return AggregateOptions(
        input=args.input.resolve(),
        output=args.output.resolve(),
        window_s=parse_window(args.window),
        since=since,
        until=until,
        master=args.master,
        conf=parse_conf(args.conf),
        limits=limits,
        full=args.full,
    )


def _aggregate(options: AggregateOptions) -> int:
    # Imported here: `report` and argument errors need no JVM.
    from spark_metrics.aggregate import aggregate
    from spark_metrics.progress import Progress
    from spark_metrics.session import build_session

    if not options.input.is_dir():
        raise BadInputError(f"--input {options.input}: no such directory")
    progress = Progress()
    progress.say(f"starting Spark ({options.master or 'local[*] or spark-submit master'})")
    spark = build_session(master=options.master, conf=options.conf, app_name="spark-metrics")
    try:
        summary = aggregate(spark, options, progress)
    finally:
        spark.stop()
    print(
        f"aggregated {summary.rows_read:,} rows from {summary.files_read} files into "
        f"{len(summary.dates)} dates under {options.output} in {summary.seconds:.1f}s; "
        f"{len(summary.skipped)} files skipped",
        flush=True,
    )
    for s in summary.skipped:
        print(f"skipped {options.input / s.path}: {s.reason}", flush=True)
    return ExitCode.OK


def _report(input_dir: Path, output: Path) -> int:
    from spark_metrics.report import write_report

    page = write_report(input_dir, output)
    print(f"report written to {page}", flush=True)
    return ExitCode.OK


def _aggregate_command(args: argparse.Namespace) -> int:
    try:
        return _aggregate(_options(args))
    except (BadInputError, MetricsError):
        raise
    except Exception as exc:  # Spark's own failures (JVM, Python workers) arrive as anything
        raise MetricsError(f"spark-metrics failed: {type(exc).__name__}: {exc}") from exc


def _report_command(args: argparse.Namespace) -> int:
    return _report(args.input, args.output)


def build_aggregate(agg: argparse.ArgumentParser) -> None:
    """`spark-metrics aggregate`."""
    agg.add_argument("--input", required=True, type=Path, help="history directory")
    agg.add_argument("--output", required=True, type=Path, help="output directory")
    agg.add_argument("--window", default="1m", help="window width, dividing a day (default 1m)")
    agg.add_argument("--since", help="first sample time to use (ISO 8601, UTC by default)")
    agg.add_argument("--until", help="sample time to stop before (ISO 8601)")
    agg.add_argument("--master", help="Spark master URL (default local[*], or spark-submit's)")
    agg.add_argument(
        "--conf", action="append", default=[], metavar="K=V", help="Spark setting, repeatable"
    )
    agg.add_argument("--config", type=Path, help="cluster config: its guarantee_api.limits")
    agg.add_argument("--full", action="store_true", help="recompute every date")
    agg.set_defaults(func=_aggregate_command)


def build_report(rep: argparse.ArgumentParser) -> None:
    """`spark-metrics report`."""
    rep.add_argument("--input", required=True, type=Path, help="aggregate's output directory")
    rep.add_argument("--output", required=True, type=Path, help="HTML file to write")
    rep.set_defaults(func=_report_command)
