"""Where a 1 MiB LMTP phase's server CPU goes, process by process (issue 49).

    .venv/bin/python bench/lmtp_costs.py [--small] [--count 600] [--size-kib 1024]
        [--sessions 16] [--mailboxes 100] [--dir var/bench-lmtp-costs]

Our side of bench/lmtp.py alone, as it runs there (the same cluster of two nodes and a
transport, the same client, messages and warm-up), one phase of `--count` 1 MiB messages.
For each server process (hub1 the transport, mbx1 DB1's active, mbx2 its passive), from the
phase's first message to its last one durable on the active, per MiB delivered:

- CPU ms, user and system (`/proc/PID/stat`);
- context switches, voluntary (the thread waited: a lock, a queue, I/O) and involuntary (the
  scheduler preempted it), summed over the process's threads (`/proc/PID/task/*/status`; a
  thread that ended within the phase is not counted);
- MiB read and written through system calls, sockets included (`rchar`, `wchar` of
  `/proc/PID/io`), and MiB the process sent to the disk (`write_bytes`);
- page faults, minor and major.

Run at two sizes, the CPU a message splits into what a message costs whatever its size and
what each MiB of it costs (`CPU = a + b * MiB`): the two call for different cuts.

Beside them, what one hop into a worker thread and back costs on this machine
(`asyncio.to_thread` of a function that does nothing, CPU µs in this process, before the
cluster starts): the price of each thread hand-off on the path.  On the 2-vCPU VM of
bench/README.md it is tens of microseconds, against a few on bare metal, so that a hop per
slice of a message shows in its CPU a MiB.

bench/lmtp.py is the benchmark (ours against Dovecot, the ratios); this script is its
accounting, so that the next cut is chosen from figures anyone can take again rather than
from a one-off trace.  Checked at the end as lmtp.py checks (every message Delivered once,
none poisoned, every 25th read back from DB1's active as sent).

`--small`: 40 messages, to check the script in seconds (the figures mean nothing).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import sys
import time
from dataclasses import dataclass, fields
from datetime import date
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.lmtp import (  # noqa: E402
    HUB,
    KIB,
    MIB,
    TEMPLATES,
    Batch,
    Ours,
    deliver,
    large_template,
    load,
    own_cpu,
    small_template,
)
from bench.workdir import add_work_dir, work_dir  # noqa: E402

HOPS = 2000  # worker-thread round trips timed


@dataclass(frozen=True)
class Counters:
    """One process's counters at one moment (see the module)."""

    user: float  # CPU seconds
    system: float
    voluntary: int  # context switches, over its threads
    involuntary: int
    rchar: int  # bytes through system calls
    wchar: int
    write_bytes: int  # bytes sent to the disk
    faults: int

    def __sub__(self, other: Counters) -> Counters:
        return Counters(*(getattr(self, f.name) - getattr(other, f.name) for f in fields(self)))


def counters(pid: int) -> Counters:
    """Process `pid`'s counters now (Linux: /proc)."""
    stat = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    tick = os.sysconf("SC_CLK_TCK")
    voluntary = involuntary = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(OSError):  # the thread ended meanwhile
            for line in (task / "status").read_text().splitlines():
                key, _, value = line.partition(":")
                if key == "voluntary_ctxt_switches":
                    voluntary += int(value)
                elif key == "nonvoluntary_ctxt_switches":
                    involuntary += int(value)
    io = dict(line.split(": ", 1) for line in Path(f"/proc/{pid}/io").read_text().splitlines())
    return Counters(
        user=int(stat[11]) / tick,
        system=int(stat[12]) / tick,
        voluntary=voluntary,
        involuntary=involuntary,
        rchar=int(io["rchar"]),
        wchar=int(io["wchar"]),
        write_bytes=int(io["write_bytes"]),
        faults=int(stat[7]) + int(stat[9]),
    )


async def hop_cost(hops: int = HOPS) -> float:
    """CPU µs of one `asyncio.to_thread` round trip of a function that does nothing."""

    def nothing() -> None:
        return None

    for _ in range(100):  # the executor's thread started
        await asyncio.to_thread(nothing)
    start = own_cpu()
    for _ in range(hops):
        await asyncio.to_thread(nothing)
    return (own_cpu() - start) / hops * 1e6


async def run(base: Path, args: argparse.Namespace) -> dict[str, Any]:
    large = tuple(large_template(s, args.size_kib * KIB) for s in range(min(TEMPLATES, 8)))
    hop = await hop_cost()
    ours = Ours(base / "cluster", args, args.count * len(large[0]))
    try:
        await ours.start()
        warm = Batch("cowu", (small_template(0),), args.mailboxes, args.mailboxes)
        deliver(ours.port, warm, args.sessions)
        await ours.durable(warm)
        batch = Batch("co1m", large, args.mailboxes, args.count)
        pids = {HUB: ours.hubs.procs[HUB].pid, **{n: p.pid for n, p in ours.cluster.procs.items()}}
        os.sync()  # no phase pays the warm-up's writeback
        before = {name: counters(pid) for name, pid in pids.items()}
        started_load = load()
        sent = await asyncio.to_thread(deliver, ours.port, batch, args.sessions)
        times = await ours.durable(batch)
        spent = {name: counters(pid) - before[name] for name, pid in pids.items()}
        seconds = max(times.values()) - sent.start
        checked = await ours.check([warm, batch])
    finally:
        await ours.stop()
    return {
        "size": len(large[0]),
        "mib": args.count * len(large[0]) / MIB,
        "seconds": seconds,
        "hop_us": hop,
        "load": started_load,
        "spent": spent,
        "checked": checked,
    }


def report(args: argparse.Namespace, out: dict[str, Any]) -> None:
    mib: float = out["mib"]
    spent: dict[str, Counters] = out["spent"]
    spent["all three"] = Counters(
        *(sum(getattr(c, f.name) for c in spent.values()) for f in fields(Counters))
    )
    print(
        f"\n{date.today()} - nproc {os.cpu_count()}, {platform.platform()}, Python "
        f"{platform.python_version()}; {args.count} messages of {out['size']} B, "
        f"{args.sessions} LMTP sessions, {args.mailboxes} mailboxes; {out['load']} at the "
        "phase's start"
    )
    print(
        f"{mib:.0f} MiB durable on DB1's active in {out['seconds']:.2f} s, "
        f"{mib * MIB / out['seconds'] / 1e6:.2f} MB/s; one worker-thread hop here: "
        f"{out['hop_us']:.0f} µs of CPU; all three processes "
        f"{(spent['all three'].user + spent['all three'].system) * 1e3 / args.count:.2f} ms a "
        "message\n"
    )
    print("| process | CPU ms a MiB (user + sys) | context switches a MiB (vol. / invol.) "
          "| MiB read / written a MiB (syscalls) | MiB to disk a MiB | faults a MiB |")  # fmt: skip
    print("|---|---:|---:|---:|---:|---:|")
    for name, c in spent.items():
        cpu = (c.user + c.system) * 1e3 / mib
        print(
            f"| {name} | {cpu:.1f} ({c.user * 1e3 / mib:.1f} + {c.system * 1e3 / mib:.1f}) "
            f"| {(c.voluntary + c.involuntary) / mib:.0f} ({c.voluntary / mib:.0f} / "
            f"{c.involuntary / mib:.0f}) | {c.rchar / MIB / mib:.2f} / {c.wchar / MIB / mib:.2f} "
            f"| {c.write_bytes / MIB / mib:.2f} | {c.faults / mib:.1f} |"
        )
    print(f"\nchecked: the transport's queue and messages read back from DB1's active "
          f"(every 25th, as sent): {out['checked']}")  # fmt: skip
    summary = {
        "date": str(date.today()),
        "small": args.small,
        "count": args.count,
        "size": out["size"],
        "mb_s": mib * MIB / out["seconds"] / 1e6,
        "hop_us": out["hop_us"],
        "cpu_ms_a_mib": {n: (c.user + c.system) * 1e3 / mib for n, c in spent.items()},
        "switches_a_mib": {n: (c.voluntary + c.involuntary) / mib for n, c in spent.items()},
    }
    print(json.dumps(summary))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, help="messages (600)")
    parser.add_argument("--size-kib", type=int, default=1024, help="a message's size (1024)")
    parser.add_argument("--sessions", type=int, default=16, help="LMTP sessions at once")
    parser.add_argument("--mailboxes", type=int, default=100, help="recipients, round-robin")
    add_work_dir(parser, "var/bench-lmtp-costs")
    parser.add_argument("--small", action="store_true", help="40 messages: seconds")
    args = parser.parse_args()
    if args.count is None:
        args.count = 40 if args.small else 600
    if min(args.sessions, args.mailboxes, args.count) < 1 or args.size_kib < 64:
        parser.error("--sessions, --mailboxes, --count: >= 1; --size-kib: >= 64")
    started = time.perf_counter()
    with work_dir(args) as base:
        out = asyncio.run(run(base, args))
    report(args, out)
    print(f"(whole run: {time.perf_counter() - started:.1f} s)")


if __name__ == "__main__":
    main()
