"""Where an LMTP phase's server CPU goes, process by process (issue 49).

    .venv/bin/python bench/lmtp_costs.py [--small] [--sizes 1024] [--count N] [--copies 2]
        [--sessions 16] [--mailboxes 100] [--dir var/bench-lmtp-costs]

Our side of bench/lmtp.py alone, as it runs there (the same cluster of two nodes and a
transport, the same client, messages and warm-up), a phase of messages of each of `--sizes`
KiB (1 MiB: lmtp.py's message; another size: its attachment shorter or longer), `--count`
each (as many as make 600 MiB, 3,000 at most).  For each server process (hub1 the transport,
mbx1 DB1's active, mbx2 its passive, none with `--copies 1`; "all" the processes together),
from a phase's first message to its last one durable on the active, per MiB delivered:

- CPU ms, user and system (`/proc/PID/stat`);
- context switches, voluntary (the thread waited: a lock, a queue, I/O) and involuntary (the
  scheduler preempted it), summed over the process's threads (`/proc/PID/task/*/status`; a
  thread that ended within the phase is not counted);
- MiB read and written through system calls, sockets included (`rchar`, `wchar` of
  `/proc/PID/io`), and MiB the process sent to the disk (`write_bytes`);
- page faults, minor and major.

With two sizes (`--sizes 128,1024`), each process's CPU a message is split into what a
message costs whatever its size and what each MiB of it costs (`CPU = a + b * MiB`,
through the two phases): the two call for different cuts.  Sizes start at 64 KiB: a
smaller message goes to the active in a batch (`transport.delivery.RAW_FROM`), another path.

Beside them, what one hop into a worker thread and back costs on this machine
(`asyncio.to_thread` of a function that does nothing, CPU µs in this process, before the
cluster starts): the price of each thread hand-off on the path.  On the 2-vCPU VM of
bench/README.md it is tens of microseconds, against a few on bare metal, so that a hop per
slice of a message shows in its CPU a MiB.

bench/lmtp.py is the benchmark (ours against Dovecot, the ratios); this script is its
accounting, so that the next cut is chosen from figures anyone can take again rather than
from a one-off trace.  Checked at the end as lmtp.py checks (every message Delivered once,
none poisoned, every 25th read back from DB1's active as sent).

`--small`: 40 messages a phase, to check the script in seconds (the figures mean nothing).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import sys
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
    stat_fields,
)
from bench.workdir import add_work_dir, run_and_report  # noqa: E402

HOPS = 2000  # worker-thread round trips timed
ALL = "all"  # the server processes together (the transport and each copy)
HEAD = (
    "| process | CPU ms a MiB (user + sys) | context switches a MiB (vol. / invol.) "
    "| MiB read / written a MiB (syscalls) | MiB to disk a MiB | faults a MiB |"
)


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

    @property
    def switches(self) -> int:
        return self.voluntary + self.involuntary

    def __sub__(self, other: Counters) -> Counters:
        return Counters(*(getattr(self, f.name) - getattr(other, f.name) for f in fields(self)))


def counters(pid: int) -> Counters:
    """Process `pid`'s counters now (Linux: /proc)."""
    stat = stat_fields(pid)
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


@dataclass(frozen=True)
class Phase:
    """One phase's messages and what each process spent on them."""

    size: int  # bytes of a message
    count: int
    seconds: float  # the first message sent to the last durable on the active
    load: str  # at its start
    spent: dict[str, Counters]  # by process, and ALL (the server processes together)

    @property
    def mib(self) -> float:
        return self.count * self.size / MIB

    @property
    def mb_s(self) -> float:
        return self.mib * MIB / self.seconds / 1e6

    def cpu_ms(self, process: str, per: str = "message") -> float:
        c = self.spent[process]
        return (c.user + c.system) * 1e3 / (self.count if per == "message" else self.mib)


async def run(base: Path, args: argparse.Namespace) -> dict[str, Any]:
    sizes = [(kib, count_for(args, kib)) for kib in args.sizes]
    hop = await hop_cost()
    ours = Ours(base / "cluster", args, sum(kib * KIB * n for kib, n in sizes), args.copies)
    phases: list[Phase] = []
    try:
        await ours.start()
        warm = Batch("cowu", (small_template(0),), args.mailboxes, args.mailboxes)
        deliver(ours.port, warm, args.sessions)
        await ours.durable(warm)
        batches = [warm]
        pids = {HUB: ours.hubs.procs[HUB].pid, **{n: p.pid for n, p in ours.cluster.procs.items()}}
        for k, (kib, count) in enumerate(sizes):
            templates = tuple(large_template(s, kib * KIB) for s in range(min(TEMPLATES, 8)))
            batch = Batch(f"co{k:02d}", templates, args.mailboxes, count)
            os.sync()  # no phase pays the writeback of the one before
            before = {name: counters(pid) for name, pid in pids.items()}
            started_load = load()
            sent = await asyncio.to_thread(deliver, ours.port, batch, args.sessions)
            times = await ours.durable(batch)
            spent = {name: counters(pid) - before[name] for name, pid in pids.items()}
            spent[ALL] = Counters(
                *(sum(getattr(c, f.name) for c in spent.values()) for f in fields(Counters))
            )
            phases.append(Phase(len(templates[0]), count, max(times.values()) - sent.start,
                                started_load, spent))  # fmt: skip
            batches.append(batch)
        checked = await ours.check(batches)
    finally:
        await ours.stop()
    return {"hop_us": hop, "phases": phases, "checked": checked}


def count_for(args: argparse.Namespace, kib: int) -> int:
    """Messages of `kib` KiB in a phase: `--count`, or as many as 600 MiB (3,000 at most;
    `--small`: 40)."""
    if args.count is not None:
        return int(args.count)
    return 40 if args.small else min(3000, 600 * 1024 // kib)


def report(args: argparse.Namespace, out: dict[str, Any]) -> None:
    phases: list[Phase] = out["phases"]
    print(
        f"\n{date.today()} - nproc {os.cpu_count()}, {platform.platform()}, Python "
        f"{platform.python_version()}; {args.sessions} LMTP sessions, {args.mailboxes} "
        f"mailboxes; one worker-thread hop here: {out['hop_us']:.0f} µs of CPU"
    )
    for phase in phases:
        print(
            f"\n{phase.count} messages of {phase.size} B ({phase.load} at the start): "
            f"{phase.mib:.0f} MiB durable on DB1's active in {phase.seconds:.2f} s, "
            f"{phase.mb_s:.2f} MB/s; the server processes "
            f"{phase.cpu_ms(ALL):.2f} ms of CPU a message\n"
        )
        print(HEAD)
        print("|---|---:|---:|---:|---:|---:|")
        mib = phase.mib
        for name, c in phase.spent.items():
            print(
                f"| {name} | {phase.cpu_ms(name, 'MiB'):.1f} ({c.user * 1e3 / mib:.1f} + "
                f"{c.system * 1e3 / mib:.1f}) | {c.switches / mib:.0f} "
                f"({c.voluntary / mib:.0f} / {c.involuntary / mib:.0f}) | "
                f"{c.rchar / MIB / mib:.2f} / {c.wchar / MIB / mib:.2f} | "
                f"{c.write_bytes / MIB / mib:.2f} | {c.faults / mib:.1f} |"
            )
    split = split_costs(phases) if len(phases) == 2 else {}
    if split:
        small, large = sorted(phases, key=lambda p: p.size)
        print(f"\nCPU a message = a + b * its MiB, from the phases of {small.size} and "
              f"{large.size} B:\n")  # fmt: skip
        print("| process | a: ms a message | b: ms a MiB | a's share of a message of the larger |")
        print("|---|---:|---:|---:|")
        for name, (a, b) in split.items():
            share = a / large.cpu_ms(name) if large.cpu_ms(name) else 0.0
            print(f"| {name} | {a:.2f} | {b:.2f} | {share:.0%} |")
    print(f"\nchecked: the transport's queue and messages read back from DB1's active "
          f"(every 25th, as sent): {out['checked']}")  # fmt: skip
    summary = {
        "date": str(date.today()),
        "small": args.small,
        "hop_us": out["hop_us"],
        "phases": [
            {
                "size": p.size,
                "count": p.count,
                "mb_s": p.mb_s,
                "cpu_ms_a_mib": {n: p.cpu_ms(n, "MiB") for n in p.spent},
                "switches_a_mib": {n: c.switches / p.mib for n, c in p.spent.items()},
            }
            for p in phases
        ],
        "split": {n: {"a_ms": a, "b_ms_a_mib": b} for n, (a, b) in split.items()},
    }
    print(json.dumps(summary))


def split_costs(phases: list[Phase]) -> dict[str, tuple[float, float]]:
    """By process: (a, b) of CPU ms a message = a + b * MiB, through the two phases' points
    (none if their sizes are the same)."""
    small, large = sorted(phases, key=lambda p: p.size)
    dx = (large.size - small.size) / MIB
    if dx <= 0:
        return {}
    out = {}
    for name in small.spent:
        b = (large.cpu_ms(name) - small.cpu_ms(name)) / dx
        out[name] = (small.cpu_ms(name) - b * small.size / MIB, b)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int,
                        help="messages a phase (as many as 600 MiB, 3,000 at most)")  # fmt: skip
    parser.add_argument("--sizes", default="1024",
                        help="a phase's message size in KiB, comma-separated (1024; 128,1024 "
                             "splits the CPU a message into a + b * MiB)")  # fmt: skip
    parser.add_argument("--copies", type=int, choices=(1, 2), default=2,
                        help="DB1's copies: 2 (a passive on mbx2, as bench/lmtp.py's transport "
                        "side) or 1 (the active alone, its alone side)")  # fmt: skip
    parser.add_argument("--sessions", type=int, default=16, help="LMTP sessions at once")
    parser.add_argument("--mailboxes", type=int, default=100, help="recipients, round-robin")
    add_work_dir(parser, "var/bench-lmtp-costs")
    parser.add_argument("--small", action="store_true", help="40 messages a phase: seconds")
    args = parser.parse_args()
    try:
        args.sizes = [int(k) for k in args.sizes.split(",") if k.strip()]
    except ValueError:
        parser.error(f"--sizes: KiB, comma-separated, not {args.sizes!r}")
    if not args.sizes or min(args.sizes) < 64:
        parser.error("--sizes: each 64 KiB or more (a smaller message is delivered in a batch)")
    if min(args.sessions, args.mailboxes) < 1 or (args.count is not None and args.count < 1):
        parser.error("--sessions, --mailboxes, --count: >= 1")
    run_and_report(args, run, report)


if __name__ == "__main__":
    main()
