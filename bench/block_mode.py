"""What block mode and a synchronous copy buy and cost (issue 13): acknowledged writes lost
at a kill -9 of the active, and commit latency and throughput at 16 writers, for file mode,
block mode and one synchronous copy, in one run.

    .venv/bin/python bench/block_mode.py [--runs 3] [--seconds 5] [--dir var/bench-block]
        [--keep]

Each run starts a fresh cluster of three `replication-node serve` processes on loopback
(DB1 active on mbx1, passive copies on mbx2 and mbx3, 1 MiB logs, failover_after 2 s, lease
2 s), then 16 concurrent writers put one item per request to mbx1 for `--seconds`: the
latency of each acknowledged write (HTTP round trip included) and the commits per second.
Then, the writers still writing, mbx1 is killed (SIGKILL); automatic failover mounts a copy
(BestAvailability, or Lossless with the synchronous copy), and the run counts the
acknowledged items the new active does not have.

- file: `block_mode: false` (Exchange 2010 RTM: whole closed generations only);
- block: block mode (the default), no synchronous copy;
- sync1: block mode, `synchronous_copies: 1`, the Lossless dial.

Each run's cluster is in its own directory under `--dir`; `--dir` is wiped at the start and
removed at the end unless `--keep` (`bench/workdir.py`: one run at a time in it).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import shutil
import statistics
import sys
import time
from datetime import date
from pathlib import Path

import aiohttp

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.workdir import add_work_dir, work_dir  # noqa: E402
from tests.cluster_harness import THREE_NODES, LocalCluster  # noqa: E402
from tests.replication_node.e2e import in_block_mode, mounted_on  # noqa: E402

ITEMS = "/v1/databases/DB1/mailboxes/m/items"
MODES = {
    "file": {"block_mode": False, "auto_database_mount_dial": "BestAvailability"},
    "block": {"auto_database_mount_dial": "BestAvailability"},
    "sync1": {"synchronous_copies": 1, "auto_database_mount_dial": "Lossless"},
}


def cluster_for(root: Path, mode: str) -> LocalCluster:
    return LocalCluster(
        root,
        nodes=THREE_NODES,
        databases=[
            {
                "name": "DB1",
                **MODES[mode],
                "copies": [
                    {"node": "mbx1", "activation_preference": 1},
                    {"node": "mbx2", "activation_preference": 2},
                    {"node": "mbx3", "activation_preference": 3},
                ],
            }
        ],
        defaults={"failover_after": "2s", "lease_ttl": "2s", "log_file_size": "1MiB"},
    )


async def one_run(root: Path, mode: str, seconds: float) -> dict[str, float]:
    shutil.rmtree(root, ignore_errors=True)
    cluster = cluster_for(root, mode)
    await cluster.start()
    try:
        await cluster.wait_status("mbx1", "DB1", "Mounted")
        if mode != "file":
            await in_block_mode(cluster, "DB1", ["mbx2", "mbx3"])
        await cluster.ok("PUT", "mbx1", "/v1/databases/DB1/mailboxes/m")
        acked: list[str] = []
        latencies: list[float] = []
        measuring = True
        timeout = aiohttp.ClientTimeout(total=15)

        async def writer(w: int) -> None:
            i = 0
            while True:
                item, started = f"w{w}-{i}", time.perf_counter()
                try:
                    code, _ = await cluster.call(
                        "POST", "mbx1", ITEMS, json={"items": [{"item_id": item}]}, timeout=timeout
                    )
                except (aiohttp.ClientError, TimeoutError):
                    return
                if code < 300:
                    acked.append(item)
                    if measuring:
                        latencies.append(time.perf_counter() - started)
                i += 1

        tasks = [asyncio.create_task(writer(w)) for w in range(16)]
        began = time.perf_counter()
        await asyncio.sleep(seconds)  # the measuring window: a duration, not a readiness wait
        measuring = False
        elapsed = time.perf_counter() - began
        measured = len(latencies)
        cluster.kill("mbx1")
        await asyncio.gather(*tasks)
        active = await mounted_on(cluster, "DB1", ["mbx2", "mbx3"], timeout=120)
        items = await cluster.items(active, "DB1", "m")
        lost = sum(1 for item in acked if item not in items)
        ms = sorted(v * 1000 for v in latencies)
        return {
            "p50": statistics.median(ms),
            "p99": ms[min(len(ms) - 1, int(len(ms) * 0.99))],
            "per_s": measured / elapsed,
            "lost": lost,
            "acked": len(acked),
        }
    finally:
        await cluster.close()


async def main_async(args: argparse.Namespace, base: Path) -> int:
    print(f"# bench/block_mode.py, {date.today()}, {platform.node()}, {os.cpu_count()} cores")
    print(f"# 16 writers, {args.seconds:g}s measured, then kill -9; {args.runs} runs per mode")
    for mode in args.modes.split(","):
        results = []
        for i in range(args.runs):
            r = await one_run(base / f"{mode}-{i}", mode, args.seconds)
            results.append(r)
            print(
                f"{mode} run {i + 1}: p50 {r['p50']:.2f}ms p99 {r['p99']:.2f}ms "
                f"{r['per_s']:.0f} commits/s; lost {r['lost']:.0f} of {r['acked']:.0f} "
                "acknowledged at the kill",
                flush=True,
            )
        print(
            f"{mode}: p50 {statistics.median(r['p50'] for r in results):.2f}ms "
            f"p99 {statistics.median(r['p99'] for r in results):.2f}ms "
            f"{statistics.median(r['per_s'] for r in results):.0f} commits/s; lost at kill "
            f"{[int(r['lost']) for r in results]}",
            flush=True,
        )
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--modes", default="file,block,sync1")
    add_work_dir(parser, str(ROOT / "var" / "bench-block"))
    args = parser.parse_args()
    with work_dir(args) as base:
        return asyncio.run(main_async(args, base))


if __name__ == "__main__":
    sys.exit(main())
