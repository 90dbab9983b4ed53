"""How long a database is without an active that takes writes, after its active's node dies
or hangs (issue 12): `replication-node serve` processes on loopback, the harness's three
nodes (mbx1 and mbx2 in redmond, mbx3 in dublin), DB1 active on mbx1 with passive copies on
mbx2 and mbx3, `failover_after` 4 s (as a new user would set it) and the config's default
log size.

    .venv/bin/python bench/failover.py [--runs 20] [--events kill,stop] [--dir var/bench-fo]

Each run starts a fresh cluster, writes 200 items and waits until both copies replayed
them, then at time 0 either kills mbx1 (`kill`: SIGKILL, the node is gone and its port
refuses) or freezes it (`stop`: SIGSTOP, as a long GC pause or a hung disk: its port still
accepts connections, nothing answers).  The time measured is until a write to DB1 is
acknowledged by the new active (found from the surviving nodes' status, polled every 50 ms).
A frozen node is then let go (SIGCONT) and the cluster stopped.  p50 and p99 over the runs
(p99 of 20 runs is the slowest but one... of 20: the 19.8th by linear interpolation).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import shutil
import signal
import statistics
import sys
import time
from datetime import date
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.cluster_harness import wait_until  # noqa: E402
from tests.replication_node.e2e import converged, three_nodes, write  # noqa: E402

FAILOVER_AFTER = "4s"


async def one_run(root: Path, event: str) -> float:
    shutil.rmtree(root, ignore_errors=True)
    cluster = three_nodes(
        root, defaults={"failover_after": FAILOVER_AFTER, "log_file_size": "1MiB"}
    )
    await cluster.start()
    frozen = None
    try:
        await cluster.ok("PUT", "mbx1", "/v1/databases/DB1/mailboxes/m")
        await write(cluster, "mbx1", "DB1", "m", 0, 200)
        await converged(cluster, "DB1", "mbx1", ["mbx2", "mbx3"])
        started = time.monotonic()
        if event == "kill":
            cluster.kill("mbx1")
        else:
            frozen = cluster.procs["mbx1"]
            frozen.send_signal(signal.SIGSTOP)

        async def new_active_takes_a_write() -> bool:
            for node in ("mbx2", "mbx3"):
                status, _ = await cluster.call(
                    "POST",
                    node,
                    "/v1/databases/DB1/mailboxes/m/items",
                    json={"item_id": f"after-{event}", "body": "x"},
                )
                if status < 300:
                    return True
            return False

        await wait_until(
            "a write acknowledged by a new active", new_active_takes_a_write, timeout=300,
            every=0.05, tolerate=(OSError,),
        )  # fmt: skip
        return time.monotonic() - started
    finally:
        if frozen is not None:
            frozen.send_signal(signal.SIGCONT)
        await cluster.close()


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    if len(ordered) == 1:
        return ordered[0]
    pos = q * (len(ordered) - 1)
    low = int(pos)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (pos - low)


async def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--events", default="kill,stop")
    parser.add_argument("--dir", type=Path, default=ROOT / "var" / "bench-failover")
    args = parser.parse_args()
    print(f"# bench/failover.py, {date.today()}, {platform.node()}, {os.cpu_count()} cores")
    print(f"# failover_after {FAILOVER_AFTER}, {args.runs} runs per event")
    for event in args.events.split(","):
        times = []
        for i in range(args.runs):
            seconds = await one_run(args.dir / f"{event}-{i}", event)
            times.append(seconds)
            print(f"{event} run {i + 1}: {seconds:.2f}s", flush=True)
        print(
            f"{event}: p50 {percentile(times, 0.5):.2f}s p99 {percentile(times, 0.99):.2f}s "
            f"min {min(times):.2f}s max {max(times):.2f}s mean {statistics.mean(times):.2f}s",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
