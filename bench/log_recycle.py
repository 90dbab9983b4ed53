"""Truncated generations recycled as spare log files, against unlinked: the log's CPU a MiB
and its MB/s under a sustained write, in the same run.

    .venv/bin/python bench/log_recycle.py [--mib 2000] [--rounds 2] [--dir DIR] [--keep]

One log stream (1 MiB generations, a pool of 64 spares made before each case starts, as an
idle node has them), 16 writers committing 256 KiB transactions until `--mib` MiB are
written, and a truncation pass every 50 ms deleting every closed generation but the
last 32 (a passive copy's lag): in case "unlink" with `os.unlink` (the log before issue 49's
recycling), in case "recycle" with `SparePool.retire` (the active's truncator now).  The
cases run A B B A, `--rounds` times, each in a fresh directory.  Reported per case: the
process's CPU (user + system, `getrusage`) a MiB written, MB/s, and the rolls that wrote over
a spare (`taken`) against the generations written.  No target of its own: issue 49's
benchmark is `bench/lmtp.py`; this isolates the log's part of it.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import resource
import statistics
import sys
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.workdir import add_work_dir, work_dir  # noqa: E402
from dag_common.clock import SystemClock  # noqa: E402
from replication_node.log import spares  # noqa: E402
from replication_node.log.logfile import encode_transaction  # noqa: E402
from replication_node.log.logstream import LogStream  # noqa: E402
from replication_node.log.operations import PutItem, encode_record_ops  # noqa: E402
from replication_node.log.truncation import delete_through  # noqa: E402
from replication_node.log.writer import OpenLogWriter  # noqa: E402

LOG_FILE_SIZE = 1 << 20
BODY = 256 * 1024
WRITERS = 16
SPARES = 64
KEEP = 32  # closed generations a pass leaves
PASS_EVERY = 0.05  # seconds between truncation passes (the log alone writes ~500 MB/s)


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


async def one_case(log_dir: Path, recycle: bool, mib: int) -> dict[str, float]:
    clock = SystemClock()
    writer = OpenLogWriter.open(
        log_dir=log_dir,
        database_signature=uuid.uuid4(),
        log_signature=uuid.uuid4(),
        log_file_size=LOG_FILE_SIZE,
        clock=clock,
    )
    stream = LogStream(writer=writer, clock=clock)
    stream.keep_spares(SPARES)
    pool = stream.spares
    assert pool is not None
    while pool.prepare_one():  # as an idle node has them
        pass
    stream.start()
    ops = [PutItem("bench", 1, "x", "Inbox", "", "b" * BODY)]
    record = len(encode_transaction(encode_record_ops(ops), clock.now()))
    total = mib << 20
    written = 0
    done = asyncio.Event()

    async def write() -> None:
        nonlocal written
        while written < total:
            written += record
            await stream.commit(ops, clock.now())

    async def truncate() -> None:
        while not done.is_set():
            await asyncio.sleep(PASS_EVERY)
            limit = stream.last_closed_generation - KEEP
            if limit > 0:
                await asyncio.to_thread(delete_through, log_dir, limit, pool if recycle else None)

    first = stream.generation
    cpu, start = cpu_seconds(), time.perf_counter()
    truncating = asyncio.create_task(truncate())
    await asyncio.gather(*(write() for _ in range(WRITERS)))
    elapsed, cpu = time.perf_counter() - start, cpu_seconds() - cpu
    done.set()
    await truncating
    rolls = stream.generation - first
    await stream.close()
    return {
        "cpu_ms_per_mib": cpu * 1000 / (written / (1 << 20)),
        "mb_s": written / elapsed / 1e6,
        "rolls": rolls,
        "over_spares": pool.taken,
        "recycled": pool.recycled,
    }


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mib", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=2)
    add_work_dir(parser, str(ROOT / "var" / "bench-log-recycle"))
    args = parser.parse_args()
    # The pool's own floor (1 GiB and 5% free) would leave a small test disk without spares.
    spares.FREE_FLOOR = spares.FREE_FRACTION = 0
    results: dict[str, list[dict[str, float]]] = {"unlink": [], "recycle": []}
    with work_dir(args) as base:
        n = 0
        for _ in range(args.rounds):
            for case in ("unlink", "recycle", "recycle", "unlink"):
                n += 1
                log_dir = base / f"{n}-{case}"
                got = await one_case(log_dir, case == "recycle", args.mib)
                results[case].append(got)
                print(
                    f"{case:8} {got['cpu_ms_per_mib']:6.2f} ms CPU a MiB  {got['mb_s']:7.1f} MB/s"
                    f"  {got['over_spares']}/{got['rolls']} rolls over spares"
                    f" ({got['recycled']} recycled)",
                    flush=True,
                )
                for path in log_dir.iterdir():
                    path.unlink()
                log_dir.rmdir()
    summary = {
        case: {
            "cpu_ms_per_mib": statistics.median(r["cpu_ms_per_mib"] for r in runs),
            "mb_s": statistics.median(r["mb_s"] for r in runs),
        }
        for case, runs in results.items()
    }
    ratio = summary["recycle"]["cpu_ms_per_mib"] / summary["unlink"]["cpu_ms_per_mib"]
    print(f"median CPU a MiB: recycle / unlink = {ratio:.3f}")
    print(json.dumps({"date": time.strftime("%Y-%m-%d"), "mib": args.mib, **summary}))


if __name__ == "__main__":
    asyncio.run(main())
