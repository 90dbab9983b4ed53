"""Backup from a passive copy (issue 15): its rate beside a plain copy of the same files,
and what it costs the active's commits.

    .venv/bin/python bench/backup.py --mb 100 [--dir var/bench-backup] [--keep]

Two `replication-node serve` processes on loopback (tests.cluster_harness): DB1 active on
mbx1, a passive copy on mbx2, 1 MiB logs, LLR depth 10, circular logging off.  `--mb` MB of
items (4 KB, 50 a request) are written and the copy has replayed them; then, in the same run:

1. commit latency alone: one writer of single 1 KB items on the active for `--seconds`;
2. a full backup from the passive (`replication-node db backup DB1 --from mbx2`, the CLI
   an operator runs, timed from the command's start to its end) while the same writer runs:
   backup MB/s (the manifest's bytes over the command's time) and the commit latencies
   while it ran;
3. the plain copy: `cp` of the same files (the passive's database file and the logs the
   backup holds) into a new directory, then an fsync of each file and of the directory;
   MB/s over the same bytes.

MB are 10^6 bytes.  `--dir` is wiped at the start and removed at the end unless `--keep`
(`bench/workdir.py`: one run at a time in it).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import subprocess
import sys
import time
from datetime import date
from pathlib import Path
from statistics import median, quantiles

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.workdir import add_work_dir, work_dir  # noqa: E402
from tests.cluster_harness import LocalCluster  # noqa: E402
from tests.replication_node.e2e import converged  # noqa: E402

DB = "/v1/databases/DB1"


class CommitProbe:
    """One writer of single small items; the latency of each commit while it runs."""

    def __init__(self, c: LocalCluster) -> None:
        self.c = c
        self.latencies: list[tuple[float, float]] = []  # (start, seconds)
        self._stop = asyncio.Event()
        self._n = 0

    async def run(self) -> None:
        while not self._stop.is_set():
            self._n += 1
            t0 = time.perf_counter()
            await self.c.ok(
                "POST",
                "mbx1",
                f"{DB}/mailboxes/probe/items",
                json={"items": [{"item_id": f"p{self._n}", "body": "p" * 1000}]},
            )
            self.latencies.append((t0, time.perf_counter() - t0))

    def stop(self) -> None:
        self._stop.set()

    def between(self, start: float, end: float) -> list[float]:
        return [s for t, s in self.latencies if start <= t <= end]


def ms(values: list[float]) -> tuple[float, float]:
    """(p50, p99) in ms."""
    if len(values) < 2:
        return (values[0] * 1000 if values else 0.0,) * 2  # type: ignore[return-value]
    return median(values) * 1000, quantiles(values, n=100)[98] * 1000


def plain_copy(files: list[Path], to: Path) -> float:
    """`cp` of `files` into `to`, then fsync of each and of the directory: seconds."""
    to.mkdir(parents=True)
    t0 = time.perf_counter()
    subprocess.run(["cp", *map(str, files), str(to)], check=True)
    for f in files:
        fd = os.open(to / f.name, os.O_RDONLY)
        os.fsync(fd)
        os.close(fd)
    fd = os.open(to, os.O_RDONLY | os.O_DIRECTORY)
    os.fsync(fd)
    os.close(fd)
    return time.perf_counter() - t0


async def main(mb: int, seconds: float, root: Path) -> None:
    c = LocalCluster(
        root,
        nodes=[("mbx1", "redmond"), ("mbx2", "redmond")],
        databases=[
            {
                "name": "DB1",
                "copies": [
                    {"node": "mbx1", "activation_preference": 1},
                    {"node": "mbx2", "activation_preference": 2},
                ],
            }
        ],
        defaults={
            "failover_after": None,
            "circular_logging": False,
            "log_file_size": "1MiB",
            "llr_depth": 10,
        },
    )
    await c.start()
    try:
        for mailbox in ("bulk", "probe"):
            await c.ok("PUT", "mbx1", f"{DB}/mailboxes/{mailbox}")
        body = "b" * 4000
        n = 0
        while n * 4000 < mb * 1_000_000:
            await c.ok(
                "POST",
                "mbx1",
                f"{DB}/mailboxes/bulk/items",
                json={"items": [{"item_id": f"i{n + k}", "body": body} for k in range(50)]},
            )
            n += 50
        await converged(c, "DB1", "mbx1", ["mbx2"])

        probe = CommitProbe(c)
        task = asyncio.create_task(probe.run())
        await asyncio.sleep(seconds)  # the writer alone, for the stated time
        alone_end = time.perf_counter()
        t0 = time.perf_counter()
        done = await asyncio.to_thread(
            c.node_cli, "db", "backup", "DB1", "--from", "mbx2", "--to", str(root / "backup"),
            "--json", timeout=3600,
        )  # fmt: skip
        t1 = time.perf_counter()
        probe.stop()
        await task
        assert done.returncode == 0, done.stderr
        manifest = json.loads(done.stdout)
        backup_s = t1 - t0
        alone = probe.between(0, alone_end)
        during = probe.between(t0, t1)

        passive = c.root / "mbx2" / "DB1"
        files = [passive / "DB1.sqlite"] + [passive / "logs" / e["name"] for e in manifest["logs"]]
        files = [f for f in files if f.exists()]
        copied = sum(f.stat().st_size for f in files)
        cp_s = plain_copy(files, root / "plain")
    finally:
        await c.close()

    a50, a99 = ms(alone)
    d50, d99 = ms(during)
    print(f"## backup (issue 15) — {date.today()}")
    print(
        f"\nMachine: {platform.machine()}, {os.cpu_count()} CPU, Python {platform.python_version()}"
    )
    print(f"load average {os.getloadavg()[0]:.1f}\n")
    print("| what | MB | seconds | MB/s |")
    print("|---|---:|---:|---:|")
    print(
        f"| full backup from the passive (CLI, end to end) | {manifest['bytes'] / 1e6:.1f} | "
        f"{backup_s:.2f} | {manifest['bytes'] / 1e6 / backup_s:.0f} |"
    )
    node_s = manifest["seconds"]
    print(
        f"| the same backup on the node (without the CLI's start) | "
        f"{manifest['bytes'] / 1e6:.1f} | {node_s:.2f} | {manifest['bytes'] / 1e6 / node_s:.0f} |"
    )
    print(
        f"| `cp` + fsync of the same files | {copied / 1e6:.1f} | {cp_s:.2f} | "
        f"{copied / 1e6 / cp_s:.0f} |"
    )
    print(f"\nbackup / plain copy: {(manifest['bytes'] / backup_s) / (copied / cp_s):.2f}")
    print("\n| commits on the active | n | p50 ms | p99 ms |")
    print("|---|---:|---:|---:|")
    print(f"| alone ({seconds:g} s) | {len(alone)} | {a50:.2f} | {a99:.2f} |")
    print(f"| during the backup | {len(during)} | {d50:.2f} | {d99:.2f} |")
    print(
        f"\nbackup: generations {manifest['after_generation'] + 1}-{manifest['last_generation']} "
        f"({len(manifest['logs'])} logs), database file "
        f"{manifest['database_file']['size'] / 1e6:.1f} MB"
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=int, default=100, help="MB of items written first")
    parser.add_argument("--seconds", type=float, default=5.0, help="commit probe alone")
    add_work_dir(parser, str(ROOT / "var" / "bench-backup"))
    args = parser.parse_args()
    with work_dir(args) as base:
        asyncio.run(main(args.mb, args.seconds, base))
