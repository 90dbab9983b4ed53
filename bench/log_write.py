"""Log write throughput: commits/s and MB/s with fsync, at 1, 16 and 64 concurrent writers,
beside a raw fsync'd append of the same bytes (one write + one fsync per record) in the
same run.

    .venv/bin/python bench/log_write.py [--seconds 3] [--dir DIR]

Targets (issue 2): 64 writers >= 10x the commits/s of 1 writer; large transactions >= 50%
of the raw fsync'd append MB/s.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import tempfile
import time
import uuid
from pathlib import Path

from dag_common.clock import SystemClock
from replication_node.logfile import encode_transaction
from replication_node.logstream import LogStream

SMALL = 4 * 1024 - 120  # a ~4 KiB record on disk, to compare with a 4 KiB fsync'd append
LARGE = 256 * 1024


def ops_of(size: int) -> list[dict]:
    return [
        {
            "op": "put_item",
            "mailbox": "bench",
            "item_id": "x",
            "folder": "Inbox",
            "subject": "",
            "body": "b" * size,
            "cn": 1,
        }
    ]


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
    log_dir: Path, size: int, writers: int, seconds: float
) -> tuple[float, float, float]:
    """Commits/s, MB/s and commits per fsync through the log stream."""
    stream = LogStream.create_or_open(
        log_dir=log_dir,
        database_signature=uuid.uuid4(),
        log_signature=uuid.uuid4(),
        log_file_size=1 << 20 if size < LARGE else 8 << 20,
        clock=SystemClock(),
    )
    stream.start()
    clock = SystemClock()
    ops = ops_of(size)
    record_size = len(encode_transaction(ops, clock.now()))
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--dir", default=None, help="where to write (default: a temp dir)")
    args = parser.parse_args()
    base = Path(tempfile.mkdtemp(prefix="bench-log-", dir=args.dir))
    try:
        record_small = encode_transaction(ops_of(SMALL), SystemClock().now())
        record_large = encode_transaction(ops_of(LARGE), SystemClock().now())
        raw_small = raw_append(base / "raw-small", record_small, args.seconds)
        raw_large = raw_append(base / "raw-large", record_large, args.seconds)
        print(f"record sizes: small {len(record_small)} B, large {len(record_large)} B")
        print(f"raw fsync'd append, small: {raw_small[0]:9.0f} /s {raw_small[1]:8.1f} MB/s")
        print(f"raw fsync'd append, large: {raw_large[0]:9.0f} /s {raw_large[1]:8.1f} MB/s")
        print(f"{'case':<22}{'commits/s':>12}{'MB/s':>9}{'commits/fsync':>15}{'vs raw':>9}")
        results = {}
        for label, size, raw in (("small", SMALL, raw_small), ("large", LARGE, raw_large)):
            for writers in (1, 16, 64):
                log_dir = base / f"{label}-{writers}"
                rate, mbps, per_fsync = asyncio.run(
                    stream_commits(log_dir, size, writers, args.seconds)
                )
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
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
