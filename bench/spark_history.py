"""The history pipeline on Spark (issue 10): rows/s of the copy windows beside pyarrow.

    .venv/bin/python bench/spark_history.py [--sizes 10,50] [--cluster-sizes 10]
                                            [--dir var/bench-spark]

1. Synthetic history in the shared schema (`dag_common.history_schema`), laid out as the
   guarantee service writes it (one zstd Parquet file per hour, `date=/hour=` directories):
   20 databases x 3 copies on 6 nodes in 2 sites, one sample per copy per second, so 10 M
   samples are ~46 hours and 50 M ~9.6 days. Queues are 0 or 1 most of the time, with
   episodes of falling behind (up to 30 logs) that drain a log a second; statuses other than
   Healthy, and unreachable nodes, come in episodes too; log times step by generation (20 s).
   Made once per size and kept under `--dir` (delete it to regenerate): one run at a time in
   it (bench/workdir.py's lock, without its wipe), a second given the same `--dir` refused.
2. Spark `local[2]`, one session, warmed up once on the smallest size, then per size:
   (a) the copy windows (1 min; count, mean, max, p95 of both queues, the fractions, the
       largest replay lag), executed to the end into Spark's `noop` sink;
   (b) the whole `spark-metrics aggregate` (copies, sites, constraints by the guarantee
       rules in applyInPandas, written as Parquet), from an empty output directory.
3. The baseline in the same run: the same copy windows with pyarrow compute (Acero's hash
   aggregate, t-digest p95), one hourly file per task on two threads, so it holds one file
   at a time, as an operator's script would.
4. Then a standalone cluster (a master and two 1-core workers from the pyspark wheel, on
   loopback) runs `spark-metrics aggregate --master spark://…` over `--cluster-sizes`.

Prints rows/s of each and the ratio Spark / pyarrow for (a). Target: (a) >= 1 M rows/s.
"""

from __future__ import annotations

import argparse
import io
import os
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402
import pyarrow as pa  # noqa: E402
import pyarrow.compute as pc  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402

from bench.workdir import work_dir  # noqa: E402
from dag_common.history_schema import SCHEMA  # noqa: E402

START = datetime(2026, 11, 1, tzinfo=UTC)
NODES = ["mbx1", "mbx2", "mbx3", "mbx4", "mbx5", "mbx6"]
SITE = {n: ("redmond" if i < 3 else "dublin") for i, n in enumerate(NODES)}
DATABASES = [f"DB{i:02d}" for i in range(1, 21)]
# Each database on three nodes, the first active; both sites hold a copy of each.
COPIES = [
    (db, NODES[i % 6], NODES[(i + 1) % 6], NODES[(i + 3) % 6]) for i, db in enumerate(DATABASES)
]
ROWS_PER_SECOND = 3 * len(DATABASES)
PASSIVE_STATUSES = np.array(["Healthy", "Initializing", "Resynchronizing", "FailedAndSuspended"])


def _strings(values: list[str], index: np.ndarray) -> pa.Array:
    return pa.DictionaryArray.from_arrays(pa.array(index, pa.int32()), pa.array(values)).cast(
        pa.string()
    )


def _episodes(
    rng: np.random.Generator, shape: tuple[int, int], rate: float, low: int, high: int
) -> np.ndarray:
    """Per copy (rows) and second (columns): episodes starting at `rate` per second with a
    height in [low, high] that falls by one a second (a queue that builds up and drains, or
    the seconds left of an outage); 0 outside them."""
    seconds = shape[1]
    start = np.where(rng.random(shape) < rate, rng.integers(low, high + 1, shape), 0)
    t = np.arange(seconds)
    lifted = np.where(start > 0, start + t, -1)
    return np.maximum(np.maximum.accumulate(lifted, axis=1) - t, 0)


def _hour(rng: np.random.Generator, hour: int, seconds: int) -> pa.Table:
    """One hourly file: every copy sampled once a second for `seconds` seconds."""
    n = seconds * ROWS_PER_SECOND
    copy_index = np.tile(np.arange(ROWS_PER_SECOND), seconds)
    db_index, slot = copy_index // 3, copy_index % 3
    node_of = np.array([NODES.index(c[1 + s]) for c in COPIES for s in range(3)])[copy_index]
    t0 = int((START + timedelta(hours=hour)).timestamp() * 1e6)
    times = t0 + np.repeat(np.arange(seconds, dtype=np.int64), ROWS_PER_SECOND) * 1_000_000
    active = slot == 0
    shape = (ROWS_PER_SECOND, seconds)

    def series(values: np.ndarray) -> np.ndarray:  # (copy, second) -> row order
        return values.T.reshape(-1)

    # Queues as real copies show them: 0 or 1 most of the time, with episodes of falling
    # behind (up to 30 logs) that drain; statuses other than Healthy and unreachable nodes in
    # episodes of minutes and seconds.
    cq = series(_episodes(rng, shape, 0.002, 2, 30) + (rng.random(shape) < 0.1))
    rq = series(_episodes(rng, shape, 0.003, 2, 14) + (rng.random(shape) < 0.1))
    cq[active], rq[active] = 0, 0
    unhealthy = series(_episodes(rng, shape, 0.0002, 60, 600)) > 0
    kind = series(np.repeat(rng.integers(1, 4, (ROWS_PER_SECOND, 1)), seconds, axis=1))
    status = np.where(active, "Mounted", PASSIVE_STATUSES[np.where(unhealthy, kind, 0)])
    reachable = series(_episodes(rng, shape, 0.0002, 5, 60)) == 0
    # Log times are generations' close times: they step by 20 s, and the replay queue spans
    # its generations.
    gen_time = (times // 20_000_000) * 20_000_000
    inspected = gen_time - 20_000_000
    replayed = inspected - rq * 20_000_000
    status_values = sorted(set(status.tolist()))
    status_idx = np.searchsorted(np.array(status_values), status)
    ts = pa.timestamp("us", tz="UTC")

    def nullable(values: np.ndarray, kind: pa.DataType) -> pa.Array:
        return pa.array(values, kind, mask=~reachable)

    columns = {
        "time": pa.array(times, ts),
        "database": _strings(DATABASES, db_index),
        "copy": _strings(NODES, node_of),
        "site": _strings([SITE[x] for x in NODES], node_of),
        "role": pa.array(np.where(active, "Active", "Passive"), mask=~reachable),
        "status": pa.array(np.array(status_values)[status_idx], mask=~reachable),
        "reachable": pa.array(reachable),
        "copy_queue_length": nullable(cq, pa.int64()),
        "replay_queue_length": nullable(rq, pa.int64()),
        "last_log_replayed": nullable(times // 20_000_000 - rq, pa.int64()),
        "last_replayed_log_time": nullable(replayed, ts),
        "last_log_generated": nullable(times // 20_000_000 + cq, pa.int64()),
        "last_log_inspected": nullable(times // 20_000_000, pa.int64()),
        "last_inspected_log_time": nullable(inspected, ts),
        "replay_lag_time_s": nullable(np.zeros(n), pa.float64()),
        "epoch": nullable(np.ones(n, dtype=np.int64), pa.int64()),
        "error": pa.nulls(n, pa.string()),
        "last_known_role": pa.array(np.where(active, "Active", "Passive")),
        "problem": pa.array(np.where(reachable, None, "node unreachable")),
    }
    return pa.table(columns, schema=SCHEMA)


def make_history(root: Path, rows: int) -> Path:
    """`rows` samples under `root`, made once (a `.complete` marker says it is whole)."""
    if (root / ".complete").exists():
        return root
    shutil.rmtree(root, ignore_errors=True)
    rng = np.random.default_rng(10)
    seconds_total = rows // ROWS_PER_SECOND
    hour = 0
    started = time.perf_counter()
    while seconds_total > 0:
        seconds = min(3600, seconds_total)
        at = START + timedelta(hours=hour)
        path = root / f"date={at:%Y-%m-%d}" / f"hour={at:%H}" / f"part-{at:%Y%m%dT%H%M%S}.parquet"
        path.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(_hour(rng, hour, seconds), path, compression="zstd")
        seconds_total -= seconds
        hour += 1
    (root / ".complete").write_text("")
    print(
        f"  made {rows / 1e6:.0f} M samples in {hour} files, {time.perf_counter() - started:.1f}s"
    )
    return root


# --- the baseline: pyarrow compute, one hourly file per task ---------------------------------

_BASE_COLUMNS = [
    "time", "database", "copy", "site", "role", "status", "reachable", "copy_queue_length",
    "replay_queue_length", "last_inspected_log_time", "last_replayed_log_time",
]  # fmt: skip


def _arrow_windows(path: Path, window_s: int) -> pa.Table:
    t = pq.read_table(path, columns=_BASE_COLUMNS)
    us = pc.cast(t["time"], pa.int64())
    start = pc.multiply(pc.divide(us, window_s * 1_000_000), window_s * 1_000_000)
    is_active = pc.equal(t["role"], "Active")
    ok = pc.if_else(is_active, pc.equal(t["status"], "Mounted"), pc.equal(t["status"], "Healthy"))
    healthy = pc.fill_null(pc.and_(t["reachable"], ok), False)
    span = pc.divide(
        pc.subtract(
            pc.cast(t["last_inspected_log_time"], pa.int64()),
            pc.cast(t["last_replayed_log_time"], pa.int64()),
        ),
        1e6,
    )
    lag = pc.if_else(
        pc.less_equal(t["replay_queue_length"], 0), 0.0, pc.max_element_wise(span, 0.0)
    )
    q95 = pc.TDigestOptions(q=0.95)
    table = pa.table(
        {
            "window_start": start, "database": t["database"], "copy": t["copy"],
            "site": t["site"], "cq": t["copy_queue_length"], "rq": t["replay_queue_length"],
            "healthy": pc.cast(healthy, pa.float64()),
            "reachable": pc.cast(t["reachable"], pa.float64()), "lag": lag,
        }
    )  # fmt: skip
    return table.group_by(["window_start", "database", "copy", "site"]).aggregate(
        [
            ([], "count_all"),
            ("cq", "mean"),
            ("cq", "max"),
            ("cq", "tdigest", q95),
            ("rq", "mean"),
            ("rq", "max"),
            ("rq", "tdigest", q95),
            ("healthy", "mean"),
            ("reachable", "mean"),
            ("lag", "max"),
        ],
    )


def arrow_baseline(root: Path, window_s: int = 60) -> tuple[float, int]:
    files = sorted(root.rglob("*.parquet"))
    started = time.perf_counter()
    with ThreadPoolExecutor(max_workers=2) as pool:
        groups = sum(t.num_rows for t in pool.map(lambda p: _arrow_windows(p, window_s), files))
    return time.perf_counter() - started, groups


# --- Spark -------------------------------------------------------------------------------


def spark_copy_windows(spark, root: Path, window_s: int = 60) -> float:
    from spark_metrics.aggregate import SPARK_SCHEMA
    from spark_metrics.windows import copy_windows, with_window

    started = time.perf_counter()
    df = spark.read.schema(SPARK_SCHEMA).parquet(str(root))
    windows = copy_windows(with_window(df, window_s), window_s)
    windows.write.format("noop").mode("overwrite").save()
    return time.perf_counter() - started


def spark_aggregate(spark, root: Path, out: Path) -> float:
    from spark_metrics.aggregate import aggregate
    from spark_metrics.options import AggregateOptions
    from spark_metrics.progress import Progress

    shutil.rmtree(out, ignore_errors=True)
    started = time.perf_counter()
    summary = aggregate(spark, AggregateOptions(input=root, output=out), Progress(io.StringIO()))
    assert not summary.skipped, summary.skipped
    return time.perf_counter() - started


def cluster_aggregate(root: Path, out: Path, base: Path) -> float:
    from tests.spark_metrics.standalone import StandaloneCluster

    shutil.rmtree(out, ignore_errors=True)
    with StandaloneCluster(base, workers=2, cores=1, memory="3g") as master:
        started = time.perf_counter()
        done = subprocess.run(
            [sys.executable, "-m", "spark_metrics.cli", "aggregate", "--input", str(root),
             "--output", str(out), "--master", master, "--conf", "spark.driver.host=127.0.0.1",
             "--conf", "spark.executor.memory=2500m", "--conf", "spark.ui.enabled=false"],
            capture_output=True, text=True, check=False,
        )  # fmt: skip
        elapsed = time.perf_counter() - started
    if done.returncode:
        raise SystemExit(f"cluster run failed:\n{done.stderr[-3000:]}")
    return elapsed


def run(args: argparse.Namespace, base: Path) -> int:
    sizes = [int(s) for s in args.sizes.split(",") if s]
    cluster_sizes = [int(s) for s in args.cluster_sizes.split(",") if s]
    print(f"machine: {os.cpu_count()} cores; {time.strftime('%Y-%m-%d')}")
    data = {m: make_history(base / f"history-{m}m", m * 1_000_000) for m in sizes}

    from spark_metrics.session import build_session

    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    spark = build_session(
        master="local[2]",
        conf={"spark.driver.memory": "4g", "spark.ui.enabled": "false"},
        app_name="bench-spark-history",
    )
    spark_copy_windows(spark, data[min(sizes)])  # warm-up: JIT, Python workers, caches
    results = []
    for m in sizes:
        rows = m * 1_000_000
        copies_s = spark_copy_windows(spark, data[m])
        arrow_s, groups = arrow_baseline(data[m])
        full_s = spark_aggregate(spark, data[m], base / f"out-{m}m")
        results.append(
            (m, rows / copies_s, rows / arrow_s, rows / full_s, copies_s, arrow_s, full_s)
        )
        print(
            f"{m:>3} M: spark copy windows {copies_s:6.1f}s "
            f"{rows / copies_s / 1e6:5.2f} M rows/s | "
            f"pyarrow {arrow_s:6.1f}s {rows / arrow_s / 1e6:5.2f} M rows/s ({groups:,} windows) | "
            f"ratio {arrow_s / copies_s:4.2f} | whole aggregate {full_s:6.1f}s "
            f"{rows / full_s / 1e6:5.2f} M rows/s",
            flush=True,
        )
    spark.stop()
    for m in cluster_sizes:
        if m not in data:
            data[m] = make_history(base / f"history-{m}m", m * 1_000_000)
        took = cluster_aggregate(data[m], base / f"out-cluster-{m}m", base / f"cluster-{m}m")
        rows = m * 1_000_000
        print(
            f"{m:>3} M on the standalone cluster (2 workers x 1 core): whole aggregate "
            f"{took:6.1f}s {rows / took / 1e6:5.2f} M rows/s (process start to exit)",
            flush=True,
        )
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="10,50", help="millions of samples, comma-separated")
    parser.add_argument("--cluster-sizes", default="10", help="sizes also run on the cluster")
    parser.add_argument(
        "--dir", default="var/bench-spark", type=Path, help="kept between runs, one at a time"
    )
    args = parser.parse_args()
    with work_dir(args, wipe=False) as base:  # the history made in it is kept for the next run
        return run(args, base)


if __name__ == "__main__":
    sys.exit(main())
