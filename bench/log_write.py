"""Log write throughput: commits/s and MB/s with fsync, at 1, 16 and 64 concurrent writers,
beside a raw fsync'd append of the same bytes (one write + one fsync per record) in the
same run.

    .venv/bin/python bench/log_write.py [--seconds 3] [--dir DIR] [--announce-only]

Targets (issue 2): 64 writers >= 10x the commits/s of 1 writer; large transactions >= 50%
of the raw fsync'd append MB/s.

Issue 17 adds the cost of the open log's announcement on the commit path, in the same run:
the stream without an announcer, with a no-op announcer (the await alone), and announcing
to a real embedded cluster store (one SQLite write with fsync per generation), each case
run in `--rounds` interleaved rounds (the median is reported).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path

from dag_common.clock import SystemClock
from dag_common.cluster_store.embedded import EmbeddedClusterStore
from replication_node.log.logfile import encode_transaction
from replication_node.log.logstream import LogStream
from replication_node.log.operations import PutItem, encode_record_ops
from replication_node.log.writer import OpenLogWriter

SMALL = 4 * 1024 - 120  # a ~4 KiB record on disk, to compare with a 4 KiB fsync'd append
LARGE = 256 * 1024


def ops_of(size: int) -> list[PutItem]:
    return [PutItem("bench", 1, "x", "Inbox", "", "b" * size)]


def raw_append(path: Path, record: bytes, seconds: float) -> tuple[float, float]:
    """Records/s and MB/s of write + fsync per record, one writer."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    n, start = 0, time.perf_counter()
    try:
        while time.perf_counter() - start < seconds:
            os.write(fd, record)
            os.fsync(fd)
            n += 1
    finally:
        os.close(fd)
    elapsed = time.perf_counter() - start
    return n / elapsed, n * len(record) / elapsed / 1e6


async def stream_commits(
    log_dir: Path,
    size: int,
    writers: int,
    seconds: float,
    announce: Callable[[int], Awaitable[bool]] | None = None,
    log_file_size: int | None = None,
) -> tuple[float, float, float]:
    """Commits/s, MB/s and commits per fsync through the log stream."""
    clock = SystemClock()
    open_log = OpenLogWriter.open(
        log_dir=log_dir,
        database_signature=uuid.uuid4(),
        log_signature=uuid.uuid4(),
        log_file_size=log_file_size or (1 << 20 if size < LARGE else 8 << 20),
        clock=clock,
    )
    stream = LogStream(writer=open_log, clock=clock)
    if announce is not None:
        stream.set_announcer(announce)
    stream.start()
    ops = ops_of(size)
    record_size = len(encode_transaction(encode_record_ops(ops), clock.now()))
    deadline = time.perf_counter() + seconds
    count = 0

    async def writer() -> None:
        nonlocal count
        while time.perf_counter() < deadline:
            await stream.commit(ops, clock.now())
            count += 1

    start = time.perf_counter()
    await asyncio.gather(*(writer() for _ in range(writers)))
    elapsed = time.perf_counter() - start
    fsyncs = stream.fsyncs
    await stream.close()
    return count / elapsed, count * record_size / elapsed / 1e6, count / max(fsyncs, 1)


async def announce_cases(
    base: Path, seconds: float, rounds: int
) -> dict[tuple[str, str], list[tuple[float, float, float]]]:
    """Commits/s without an announcer, with a no-op one and with the embedded store, for
    4 KiB records in 1 MiB logs and in 64 KiB logs (16x the announcements), 1 and 64
    writers; `rounds` interleaved runs of each.  Also the store writes per run."""
    store = EmbeddedClusterStore(base / "cluster.db")
    await store.set_active("bench", "bench", expected_epoch=0, start_generation=1)
    writes = 0
    stalled = 0.0

    async def to_store(generation: int) -> bool:
        nonlocal writes, stalled
        writes += 1
        start = time.perf_counter()
        try:
            return await store.publish_open_generation("bench", "bench", 1, generation, generation)
        finally:
            stalled += time.perf_counter() - start

    async def no_op(generation: int) -> bool:
        return True

    announcers: dict[str, Callable[[int], Awaitable[bool]] | None] = {
        "none": None,
        "no-op": no_op,
        "embedded store": to_store,
    }
    out: dict[tuple[str, str], list[tuple[float, float, float]]] = {}
    n = 0
    for _ in range(rounds):
        for log_size in (1 << 20, 64 << 10):
            for writers in (1, 64):
                case = f"{log_size >> 10} KiB logs x{writers}"
                for label, announce in announcers.items():
                    n += 1
                    log_dir = base / f"announce-{n}"
                    before, stalled_before = writes, stalled
                    rate, _, _ = await stream_commits(
                        log_dir, SMALL, writers, seconds, announce, log_size
                    )
                    shutil.rmtree(log_dir)
                    out.setdefault((case, label), []).append(
                        (rate, writes - before, (stalled - stalled_before) / seconds)
                    )
    store.close()
    return out


def print_announce(
    results: dict[tuple[str, str], list[tuple[float, float, float]]], seconds: float
) -> None:
    """Medians over the rounds; 'stalled' is the share of the run the writer spent waiting
    for the store (an upper bound of the cost that machine noise does not blur)."""
    print(
        f"{'announcement, 4 KiB':<22}{'announcer':<16}{'commits/s':>11}{'store writes':>14}"
        f"{'commits/write':>15}{'stalled':>9}{'vs none':>9}"
    )
    cases = sorted({case for case, _ in results}, key=lambda c: (-int(c.split()[0]), c))
    for case in cases:
        base = statistics.median(r[0] for r in results[(case, "none")])
        for label in ("none", "no-op", "embedded store"):
            runs = results[(case, label)]
            rate = statistics.median(r[0] for r in runs)
            writes = statistics.median(r[1] for r in runs)
            stalled = statistics.median(r[2] for r in runs)
            per_write = f"{rate * seconds / writes:.0f}" if writes else "-"
            print(
                f"{case:<22}{label:<16}{rate:11.0f}{writes:14.0f}{per_write:>15}"
                f"{stalled:9.2%}{rate / base:9.3f}"
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--dir", default=None, help="where to write (default: a temp dir)")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds (announce)")
    parser.add_argument("--announce-only", action="store_true", help="only the issue-17 cases")
    args = parser.parse_args()
    base = Path(tempfile.mkdtemp(prefix="bench-log-", dir=args.dir))
    try:
        if not args.announce_only:
            issue_2(base, args.seconds)
        print_announce(asyncio.run(announce_cases(base, args.seconds, args.rounds)), args.seconds)
    finally:
        shutil.rmtree(base, ignore_errors=True)


def issue_2(base: Path, seconds: float) -> None:
    """Group commit and large transactions against the raw fsync'd append (issue 2)."""
    record_small = encode_transaction(encode_record_ops(ops_of(SMALL)), SystemClock().now())
    record_large = encode_transaction(encode_record_ops(ops_of(LARGE)), SystemClock().now())
    raw_small = raw_append(base / "raw-small", record_small, seconds)
    raw_large = raw_append(base / "raw-large", record_large, seconds)
    print(f"record sizes: small {len(record_small)} B, large {len(record_large)} B")
    print(f"raw fsync'd append, small: {raw_small[0]:9.0f} /s {raw_small[1]:8.1f} MB/s")
    print(f"raw fsync'd append, large: {raw_large[0]:9.0f} /s {raw_large[1]:8.1f} MB/s")
    print(f"{'case':<22}{'commits/s':>12}{'MB/s':>9}{'commits/fsync':>15}{'vs raw':>9}")
    results = {}
    for label, size, raw in (("small", SMALL, raw_small), ("large", LARGE, raw_large)):
        for writers in (1, 16, 64):
            log_dir = base / f"{label}-{writers}"
            rate, mbps, per_fsync = asyncio.run(stream_commits(log_dir, size, writers, seconds))
            shutil.rmtree(log_dir)
            results[(label, writers)] = (rate, mbps)
            print(
                f"{label + ' x' + str(writers) + ' writers':<22}{rate:12.0f}{mbps:9.1f}"
                f"{per_fsync:15.1f}{mbps / raw[1]:9.2f}"
            )
    small_ratio = results[("small", 64)][0] / results[("small", 1)][0]
    large_ratio = max(results[("large", w)][1] for w in (1, 16, 64)) / raw_large[1]
    print(f"group commit: 64 writers / 1 writer = {small_ratio:.1f}x (target >= 10x)")
    print(
        f"large transactions: best MB/s / raw fsync'd append MB/s = {large_ratio:.2f} "
        "(target >= 0.50)"
    )


if __name__ == "__main__":
    main()
