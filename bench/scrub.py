"""The background scrub (issue 21): how fast it reads and checks a copy's file, and what it
costs the active's commit path on the same machine, in the same run.

    .venv/bin/python bench/scrub.py [--mb 200] [--seconds 5] [--writers 16] [--dir DIR]

1. A database file of about `--mb` MB (mailbox items of 4 KB) is scrubbed once
   (`scrub.scrub_file`: PRAGMA quick_check on a read-only connection): MB/s.
2. An active log stream takes commits from `--writers` concurrent writers for `--seconds`,
   alone, then with the scrub reading that file in a loop in a worker thread, then alone
   again: p50 and p99 commit latency, commits/s, and the ratio with/without.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import sqlite3
import statistics
import tempfile
import threading
import time
import uuid
from pathlib import Path

from dag_common.clock import SystemClock
from replication_node.log.logstream import LogStream
from replication_node.log.operations import PutItem
from replication_node.log.writer import OpenLogWriter
from replication_node.storage.scrub import scrub_file, scrub_throttled


def build_file(path: Path, mb: int) -> None:
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("CREATE TABLE item(id TEXT PRIMARY KEY, folder TEXT, subject TEXT, body TEXT)")
    body = "x" * 4000
    rows = mb * 1_000_000 // 4100
    conn.executemany(
        "INSERT INTO item VALUES (?, 'Inbox', ?, ?)",
        ((uuid.uuid4().hex, f"s{i}", body) for i in range(rows)),
    )
    conn.commit()
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()


async def commit_load(log_dir: Path, seconds: float, writers: int) -> tuple[list[float], int]:
    clock = SystemClock()
    open_log = OpenLogWriter.open(
        log_dir=log_dir,
        database_signature=uuid.uuid4(),
        log_signature=uuid.uuid4(),
        log_file_size=1024 * 1024,
        clock=clock,
    )
    stream = LogStream(writer=open_log, clock=clock)
    stream.start()
    latencies: list[float] = []
    deadline = time.perf_counter() + seconds
    op = [PutItem("m", 1, "i", "Inbox", "", "y" * 4000)]

    async def writer() -> None:
        while time.perf_counter() < deadline:
            started = time.perf_counter()
            await stream.commit(op, SystemClock().now())
            latencies.append(time.perf_counter() - started)

    await asyncio.gather(*(writer() for _ in range(writers)))
    await stream.close()
    return latencies, len(latencies)


def pct(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=100)[q - 1] * 1000


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mb", type=int, default=200)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--writers", type=int, default=16)
    parser.add_argument("--dir", type=Path, default=None)
    args = parser.parse_args()
    if args.dir is not None:
        args.dir.mkdir(parents=True, exist_ok=True)
    root = Path(tempfile.mkdtemp(dir=args.dir, prefix="scrub-bench-"))
    db = root / "copy.sqlite"
    build_file(db, args.mb)
    started = time.perf_counter()
    size, problem = scrub_file(db)
    took = time.perf_counter() - started
    assert problem is None, problem
    print(f"scrub: {size / 1e6:.0f} MB in {took:.2f}s = {size / 1e6 / took:.0f} MB/s")

    stop = threading.Event()
    passes = [0]

    def scrub_loop() -> None:  # passes back to back, as the node runs one (throttled)
        while not stop.is_set():
            asyncio.run(scrub_throttled(db))
            passes[0] += 1

    rows = []
    for label, scrubbing in (("alone", False), ("with scrub", True), ("alone again", False)):
        thread = threading.Thread(target=scrub_loop) if scrubbing else None
        if thread:
            stop.clear()
            thread.start()
        lat, n = await commit_load(root / f"logs-{len(rows)}", args.seconds, args.writers)
        if thread:
            stop.set()
            thread.join()
        rows.append((label, n / args.seconds, pct(lat, 50), pct(lat, 99)))
    print(f"{args.writers} writers, 4 KB commits, {args.seconds:g}s each:")
    print("| case | commits/s | p50 ms | p99 ms |")
    print("|---|---:|---:|---:|")
    for label, rate, p50, p99 in rows:
        print(f"| {label} | {rate:,.0f} | {p50:.2f} | {p99:.2f} |")
    base = [r for r in rows if r[0] != "with scrub"]
    with_ = next(r for r in rows if r[0] == "with scrub")
    mean = statistics.mean(r[1] for r in base)
    shutil.rmtree(root, ignore_errors=True)
    print(
        f"commits/s with the scrub running: {with_[1] / mean:.2f} of without (mean of the two "
        f"runs alone); p99 {with_[3]:.2f} ms vs {statistics.mean(r[3] for r in base):.2f} ms; "
        f"{passes[0]} scrub pass(es) during the load"
    )


if __name__ == "__main__":
    asyncio.run(main())
