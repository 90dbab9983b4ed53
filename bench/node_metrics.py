"""The cost of the node metrics on the commit path (issue 11), same run: commits/s through
`LogStream` without metrics and with `StreamMetrics` (one observation per group commit, one
per fsync), interleaved rounds, medians; and the CPU time of the observations themselves.

    .venv/bin/python bench/node_metrics.py [--seconds 2] [--rounds 5] [--dir var]
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.log_write import SMALL, ops_of
from dag_common.clock import SystemClock
from replication_node.log.logstream import LogStream
from replication_node.log.writer import OpenLogWriter
from replication_node.metrics import NodeMetrics


async def commits_per_second(log_dir: Path, writers: int, seconds: float, metrics: bool) -> float:
    clock = SystemClock()
    open_log = OpenLogWriter.open(
        log_dir=log_dir,
        database_signature=uuid.uuid4(),
        log_signature=uuid.uuid4(),
        log_file_size=1 << 20,
        clock=clock,
    )
    stream = LogStream(writer=open_log, clock=clock)
    if metrics:
        stream.set_metrics(NodeMetrics("bench").stream("bench"))
    stream.start()
    ops = ops_of(SMALL)
    deadline, count = time.perf_counter() + seconds, 0

    async def writer() -> None:
        nonlocal count
        while time.perf_counter() < deadline:
            await stream.commit(ops, clock.now())
            count += 1

    start = time.perf_counter()
    await asyncio.gather(*(writer() for _ in range(writers)))
    elapsed = time.perf_counter() - start
    await stream.close()
    return count / elapsed


def observation_cost(n: int = 200_000) -> float:
    """Microseconds of one group commit's observations (counter, two histograms, fsync)."""
    m = NodeMetrics("bench").stream("bench")
    start = time.perf_counter()
    for i in range(n):
        m.group_commit(1 + i % 64, 0.002)
        m.fsync.observe(0.001)
    return (time.perf_counter() - start) / n * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=float, default=2.0)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--dir", default=None)
    args = parser.parse_args()
    base = Path(tempfile.mkdtemp(prefix="bench-metrics-", dir=args.dir))
    results: dict[tuple[int, bool], list[float]] = {}
    try:
        n = 0
        for round_ in range(args.rounds):
            for writers in (1, 64):
                # alternate which case goes first: the second run of a pair inherits the
                # first one's disk writeback
                for metrics in (False, True) if round_ % 2 == 0 else (True, False):
                    n += 1
                    log_dir = base / f"run-{n}"
                    rate = asyncio.run(commits_per_second(log_dir, writers, args.seconds, metrics))
                    shutil.rmtree(log_dir)
                    results.setdefault((writers, metrics), []).append(rate)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    print(f"{'4 KiB commits':<16}{'metrics':<9}{'commits/s (median)':>20}{'vs none':>9}")
    for writers in (1, 64):
        none = statistics.median(results[(writers, False)])
        for metrics in (False, True):
            rate = statistics.median(results[(writers, metrics)])
            print(f"{f'{writers} writer(s)':<16}{'on' if metrics else 'off':<9}{rate:20.0f}"
                  f"{rate / none:9.3f}")  # fmt: skip
    print(f"observations per group commit: {observation_cost():.2f} us of CPU")


if __name__ == "__main__":
    main()
