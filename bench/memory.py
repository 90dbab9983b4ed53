"""Memory of real node processes and the mover while a mailbox of large items is written,
replicated, listed and moved (issue 52): peak and resting RSS, against the targets.

    .venv/bin/python bench/memory.py [--quick] [--mailbox-mb 2000] [--dir var/bench-memory]

One cluster (bench/move.py's: three `replication-node serve` processes on loopback and
`guarantee-api serve`; DB1 active on mbx1 with passives on mbx2 and mbx3, DB2 active on mbx2),
with log_file_size 1 MiB, llr_depth 10 and max_item_size 36 MiB.  Memory is read from
`/proc/PID/status`: VmRSS (now) and VmHWM (the process's peak since it started, which the
kernel keeps, so no sampling misses it); the mover's is sampled every 20 ms while it runs
(its VmHWM is gone with it).

1. Rest: each node's RSS once DB1 and DB2 are mounted and idle.
2. Write: a mailbox of `--mailbox-mb` MB in items of 1-30 MiB (sizes drawn with a fixed seed,
   the largest always 30 MiB), written one at a time to DB1's active over HTTP (JSON text
   items, or with `--write-route message` messages as their bytes, `message/rfc822`); then
   until both passives have replayed it.  Peaks of the active (mbx1) and a passive (mbx2).
3. List: the whole mailbox in one listing without `limit`, read as it streams.  The active's
   peak after it.
4. Move: `mrs move` of the mailbox to DB2 (mbx2 active: the target's writes land on a node
   that also holds a passive copy of the source).  The mover's peak, and each node's.
5. Idle: each node's RSS after `--idle` seconds with nothing to do (a node gives memory back
   once it has written nothing for 5-10 s: `replication_node/storage/idle_memory.py`).
6. Reconcile (unless `--no-reconcile`): a second mailbox (`bob`, the same sizes) written to
   DB1, then moved to DB2 by a reconcile that repairs all of it, the worst case of the
   reconcile after a lossy failover (every item to put): `mrs move` run with a copy of the
   config giving DB2 a max_item_size of 1 MiB fails at its first page (every item is large,
   none is written), and `mrs resume` with the real config reconciles (the large items fit
   now), listing both ends and copying every item, then completes the move.  The nodes never
   read the copy of the config.  The resuming mover's peak.
7. Transport (`--transport-mb`, 200 by default, 0 skips it; `--only-transport` runs it
   alone): messages of 1-30 MiB submitted to `transport serve` for a mailbox that is locked
   (as during a move, or while its database fails over: they wait in the queue), the
   transport's peak then; unlocked, every message delivered, its peak then (its own cluster);
   its RSS once drained and after `--idle` seconds more.  `--transport-restart` restarts
   the transport once all are queued, so the delivery's peak is its own.
   `--transport-route message` (the default) posts each as the message it is
   (`Content-Type: message/rfc822`, as SMTP and LMTP hand it over: the path a message of
   mail takes); `json`, a text item in JSON (`{"subject", "body"}`), as before 2026-11-29;
   `json-message`, the message in JSON (`{"body", "format": "message"}`), whose deliveries
   go as its bytes (a text item's go as JSON items, held whole: not bounded yet).

The mover's rest is its RSS at its first line of output (connected, nothing read yet).
Targets (issue 52): a peak at most rest + 4x the largest item (every path), and back to
within 25 % of rest when idle.  Before/after: run the same script from a checkout of the
baseline (`--dir` elsewhere); bench/README.md has both, from one session.

Not measured here yet: the dumpster's redelivery after a lossy failover (it queues the
same way as phase 7's held messages).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import random
import shutil
import string
import sys
import time
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import aiohttp  # noqa: E402

from bench.move import ACTIVE, SOURCE, TARGET, databases, mrs_args, settle  # noqa: E402
from bench.workdir import add_work_dir, work_dir  # noqa: E402
from dag_common.memory import resident_memory  # noqa: E402
from tests.cluster_harness import LocalCluster, wait_until, write_cluster_config  # noqa: E402

MIB = 1 << 20
MB = 1e6
MAILBOX = "alice"
PREFIX = f"/v1/databases/{SOURCE}/mailboxes/{MAILBOX}"
LONG = aiohttp.ClientTimeout(total=600)
NODES = ("mbx1", "mbx2", "mbx3")


def item_sizes(total: int, largest: int, seed: int = 52) -> list[int]:
    """Sizes of 1 MiB .. `largest` adding up to about `total` bytes, the first `largest`."""
    rng = random.Random(seed)
    sizes = [largest]
    while sum(sizes) < total:
        sizes.append(rng.randint(MIB, largest))
    return sizes


def body(size: int, seed: int) -> str:
    rng = random.Random(seed)
    chunk = "".join(rng.choices(string.ascii_letters + string.digits, k=64 * 1024))
    return (chunk * (size // len(chunk) + 1))[:size]


def message(size: int, seed: int) -> bytes:
    """A message of about `size` bytes: headers, then `body`'s text in lines of 76 (a line
    is at most 998 octets: RFC 5322)."""
    text = body(size, seed).encode("ascii")
    lines = b"\r\n".join(text[i : i + 76] for i in range(0, len(text), 76))
    head = f"Message-ID: <m{seed}@bench>\r\nSubject: item {seed}\r\n\r\n".encode()
    return head + lines + b"\r\n"


@dataclass
class MoverRun:
    """One `mrs` process: its RSS at its first line of output, its peak, its output."""

    rest: int = 0
    peak: int = 0
    returncode: int = 0
    stdout: str = ""
    stderr: str = ""


@dataclass
class Figures:
    rest: dict[str, int] = field(default_factory=dict)
    peaks: dict[str, dict[str, int]] = field(default_factory=dict)  # phase -> node -> VmHWM
    idle: dict[str, int] = field(default_factory=dict)
    mover: MoverRun = field(default_factory=MoverRun)
    reconcile: MoverRun | None = None  # the resume that reconciled
    seconds: dict[str, float] = field(default_factory=dict)
    # What makes the figures doubtful, said beside them: a failover during the run (the
    # copies' roles moved under the phases) or a node that did not stop when told to.
    trouble: list[str] = field(default_factory=list)


def peaks(cluster: LocalCluster) -> dict[str, int]:
    return {n: resident_memory(cluster.procs[n].pid).peak for n in NODES}


def resting(cluster: LocalCluster) -> dict[str, int]:
    return {n: resident_memory(cluster.procs[n].pid).resident for n in NODES}


async def mounted(cluster: LocalCluster) -> None:
    async def ready() -> bool:
        for db, node in ACTIVE.items():
            if (await cluster.status(node))[db]["status"] != "Mounted":
                return False
        return True

    await wait_until("DB1 and DB2 mounted", ready, timeout=120, tolerate=(KeyError,))


async def write(
    cluster: LocalCluster, sizes: list[int], mailbox: str = MAILBOX, route: str = "json"
) -> None:
    """Write `sizes` items one at a time: as JSON text items, or (`route` "message") each
    a message as its bytes (`PUT …/items/{id}/message`, the transport's and the mover's
    route for mail)."""
    prefix = f"/v1/databases/{SOURCE}/mailboxes/{mailbox}"
    await cluster.ok("PUT", ACTIVE[SOURCE], prefix, json={"display_name": mailbox.title()})
    for i, size in enumerate(sizes):
        if route == "message":
            status, answer = await cluster.call(
                "PUT", ACTIVE[SOURCE], f"{prefix}/items/m{i:04d}/message",
                data=message(size, i), headers={"Content-Type": "message/rfc822"}, timeout=LONG,
            )  # fmt: skip
            assert status == 201, (status, answer)
            continue
        item = {"item_id": f"m{i:04d}", "subject": f"attachment {i}", "body": body(size, i)}
        await cluster.ok("POST", ACTIVE[SOURCE], f"{prefix}/items", json=item, timeout=LONG)
    await settle(cluster, SOURCE)


async def listing(cluster: LocalCluster) -> int:
    total = 0
    url = cluster.url(ACTIVE[SOURCE]) + f"{PREFIX}/items"
    async with cluster.session.get(url, params={"since_change": "0"}, timeout=LONG) as resp:  # type: ignore[union-attr]
        assert resp.status == 200, resp.status
        async for chunk in resp.content.iter_chunked(MIB):
            total += len(chunk)
    return total


async def mrs(cluster: LocalCluster, *args: str, config: Path | None = None) -> MoverRun:
    """An `mrs` command (`move`, `resume`); its RSS at its first line, and its peak RSS,
    sampled every 20 ms (its VmHWM is gone with it)."""
    argv = mrs_args(cluster, *args)
    if config is not None:
        argv[argv.index("--config") + 1] = str(config)
    proc = await asyncio.create_subprocess_exec(
        *argv,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=cluster.env(),
        cwd=ROOT,
    )
    assert proc.stdout is not None and proc.stderr is not None
    run = MoverRun()
    lines: list[bytes] = []

    async def read_lines() -> None:
        assert proc.stdout is not None
        async for line in proc.stdout:
            if not lines:
                with contextlib.suppress(OSError, ValueError):
                    run.rest = resident_memory(proc.pid).resident
            lines.append(line)

    reading = asyncio.create_task(read_lines())
    errors = asyncio.create_task(proc.stderr.read())
    while proc.returncode is None:
        with contextlib.suppress(OSError, ValueError):
            run.peak = max(run.peak, resident_memory(proc.pid).peak)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(proc.wait(), 0.02)
    await reading
    run.returncode = proc.returncode
    run.stdout = b"".join(lines).decode(errors="replace")
    run.stderr = (await errors).decode(errors="replace")
    return run


async def move(cluster: LocalCluster) -> MoverRun:
    """`mrs move` of the mailbox to DB2."""
    run = await mrs(cluster, "move", "--mailbox", MAILBOX, "--to", TARGET)
    if run.returncode != 0:
        raise RuntimeError(f"mrs move exited {run.returncode}: {run.stderr[-2000:]}")
    return run


async def reconcile(cluster: LocalCluster, sizes: list[int]) -> MoverRun:
    """Phase 6 (module docstring): bob written, moved by a reconcile of all of it."""
    await write(cluster, sizes, "bob")
    small = cluster.root / "cluster-small-db2.yaml"
    config = json.loads(json.dumps(cluster.config))
    for db in config["databases"]:
        if db["name"] == TARGET:
            db["max_item_size"] = "1MiB"
    write_cluster_config(small, config)
    failed = await mrs(cluster, "move", "--mailbox", "bob", "--to", TARGET, config=small)
    last = failed.stdout.strip().splitlines()[-1] if failed.stdout.strip() else ""
    if failed.returncode == 0 or "large item" not in last:
        raise RuntimeError(f"mrs move of bob did not fail on its large items: {last!r}")
    move_id = last.split()[1].rstrip(":")
    run = await mrs(cluster, "resume", move_id)
    if run.returncode != 0 or "reconciled" not in run.stdout:
        raise RuntimeError(f"mrs resume exited {run.returncode}: {run.stdout[-2000:]}")
    return run


async def run(args: argparse.Namespace) -> Figures:
    base = Path(args.dir)
    shutil.rmtree(base, ignore_errors=True)
    base.mkdir(parents=True)
    cluster = LocalCluster(
        base,
        nodes=[("mbx1", "redmond"), ("mbx2", "redmond"), ("mbx3", "dublin")],
        databases=databases(),
        defaults={"log_file_size": "1MiB", "llr_depth": 10, "max_item_size": "36MiB"},
    )
    cluster.config["guarantee_api"]["poll_interval"] = "1s"
    cluster.write_config()
    figures = Figures()
    await cluster.start()
    api = None
    try:
        api = await cluster.start_guarantee_api()
        await mounted(cluster)
        await asyncio.sleep(args.settle)  # the spares made, the first idle work done
        figures.rest = resting(cluster)

        sizes = item_sizes(int(args.mailbox_mb * MB), args.largest * MIB)
        start = time.perf_counter()
        await write(cluster, sizes, route=args.write_route)
        figures.seconds["write"] = time.perf_counter() - start
        figures.peaks["write"] = peaks(cluster)

        start = time.perf_counter()
        listed = await listing(cluster)
        figures.seconds["list"] = time.perf_counter() - start
        assert listed > sum(sizes), (listed, sum(sizes))
        figures.peaks["list"] = peaks(cluster)

        start = time.perf_counter()
        figures.mover = await move(cluster)
        figures.seconds["move"] = time.perf_counter() - start
        figures.peaks["move"] = peaks(cluster)

        await asyncio.sleep(args.idle)
        figures.idle = resting(cluster)

        if args.reconcile:
            start = time.perf_counter()
            figures.reconcile = await reconcile(cluster, sizes)
            figures.seconds["write bob, fail, resume"] = time.perf_counter() - start
    finally:
        if api is not None:
            api.terminate()
            api.wait()
        figures.trouble += failovers(base)
        try:
            await cluster.close()
        except AssertionError as exc:  # the figures are kept and printed, then the run fails
            figures.trouble.append(str(exc).splitlines()[0])
    figures.seconds["largest"] = args.largest
    return figures


def failovers(base: Path) -> list[str]:
    """The failovers the nodes' logs tell of (none is expected: each moves a copy's role
    under the phases being measured)."""
    said = []
    for node in NODES:
        path = base / f"{node}.log"
        for line in path.read_text(errors="replace").splitlines() if path.exists() else ():
            if "replication_node.cluster.failover" in line and " mounted on " in line:
                said.append(f"{node}: {line.split(' failover: ', 1)[-1][:160]}")
    return said


@dataclass
class TransportFigures:
    rest: int = 0
    queued: int = 0  # the peak once every message is queued, its mailbox locked
    delivered: int = 0  # the peak once every message is delivered
    # The transport restarted once all are queued (its VmHWM starts over), then delivering:
    delivery_rest: int = 0  # its RSS once restarted
    delivering: int = 0  # its peak once every message is delivered, delivery alone
    drained: int = 0  # RSS once every message is delivered
    idle: int = 0  # RSS after `--idle` seconds more with nothing to do
    messages: int = 0
    seconds: float = 0.0


async def transport_phase(args: argparse.Namespace) -> TransportFigures:
    """7. The transport: `--transport-mb` of messages of 1-30 MiB submitted for a mailbox
    that is locked (as by a move, or its database failing over: they wait in the queue), the
    transport's peak then; the mailbox unlocked, every message delivered, its peak then.  A
    cluster of its own (DB1 on two nodes) and one `transport serve`."""
    from tests.replication_node.e2e import two_nodes
    from tests.transport.harness import Hubs

    base = Path(args.dir) / "transport"
    shutil.rmtree(base, ignore_errors=True)
    base.mkdir(parents=True)
    cluster = two_nodes(base, log_file_size="1MiB", llr_depth=10, max_item_size="36MiB")
    hubs = Hubs(cluster, "hub1", max_dumpster_size_per_database="1GB")
    figures = TransportFigures()
    await cluster.start()
    try:
        await cluster.wait_status("mbx1", "DB1", "Mounted")
        box = "/v1/databases/DB1/mailboxes/carol"
        await cluster.ok("PUT", "mbx1", box, json={})
        await hubs.start("hub1")
        pid = hubs.procs["hub1"].pid
        await asyncio.sleep(args.settle)
        figures.rest = resident_memory(pid).resident
        await cluster.ok("POST", "mbx1", box + "/lock")
        sizes = item_sizes(int(args.transport_mb * MB), args.largest * MIB, seed=7)
        start = time.perf_counter()
        for i, size in enumerate(sizes):
            if args.transport_route == "json":
                status, answer = await hubs.submit(
                    "hub1", f"<m{i}@bench>", "carol", body=body(size, i)
                )
            elif args.transport_route == "json-message":
                status, answer = await hubs.call(
                    "POST", "hub1", "/v1/messages",
                    json={"message_id": f"<m{i}@bench>", "recipients": ["carol"],
                          "body": message(size, i).decode(), "format": "message"},
                )  # fmt: skip
            else:
                status, answer = await hubs.call(
                    "POST", "hub1", "/v1/messages", params={"to": "carol"},
                    data=message(size, i), headers={"Content-Type": "message/rfc822"},
                )  # fmt: skip
            assert status == 201, (status, answer)
        figures.messages = len(sizes)
        figures.queued = resident_memory(pid).peak
        if args.transport_restart:  # what delivering costs alone: its peak starts over
            hubs.stop_all()
            await hubs.start("hub1")
            pid = hubs.procs["hub1"].pid
            await asyncio.sleep(args.settle)
            figures.delivery_rest = resident_memory(pid).resident
        await cluster.ok("POST", "mbx1", box + "/unlock")
        await hubs.drained("hub1", timeout=600)
        figures.seconds = time.perf_counter() - start
        figures.delivered = resident_memory(pid).peak
        if args.transport_restart:
            figures.delivering, figures.delivered = figures.delivered, 0
        figures.drained = resident_memory(pid).resident
        await asyncio.sleep(args.idle)
        figures.idle = resident_memory(pid).resident
    finally:
        hubs.stop_all()
        await cluster.close()
    return figures


def transport_report(args: argparse.Namespace, t: TransportFigures) -> None:
    mb = lambda n: f"{n / MB:.0f}"  # noqa: E731
    print(
        f"transport ({args.transport_route}): {t.messages} messages, {args.transport_mb} MB "
        f"of 1-{args.largest} MiB; "
        f"rest {mb(t.rest)} MB, peak with all queued {mb(t.queued)} MB, "
        + (
            f"restarted: rest {mb(t.delivery_rest)} MB, peak delivering {mb(t.delivering)} MB, "
            if args.transport_restart
            else f"after delivering {mb(t.delivered)} MB, "
        )
        + f"target (rest + 4x item) {mb(t.rest + 4 * args.largest * MIB)} "
        f"MB; RSS drained {mb(t.drained)} MB, idle {args.idle:g} s after {mb(t.idle)} MB, "
        f"idle target (1.25x rest) {mb(1.25 * t.rest)} MB; {t.seconds:.1f} s"
    )


def report(args: argparse.Namespace, f: Figures) -> None:
    largest = args.largest * MIB
    mb = lambda n: f"{n / MB:.0f}"  # noqa: E731
    print(f"## memory ({date.today()}, {platform.node()}, {os.cpu_count()} cpus)")
    print(
        f"mailbox {args.mailbox_mb} MB in items of 1-{args.largest} MiB, written as "
        f"{args.write_route}; MB = 10^6 bytes"
    )
    print(
        "| node | rest | peak after write | after list | after move | "
        "target (rest + 4x item) | idle after | idle target (1.25x rest) |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for n in NODES:
        rest = f.rest[n]
        print(
            f"| {n} | {mb(rest)} | {mb(f.peaks['write'][n])} | {mb(f.peaks['list'][n])} | "
            f"{mb(f.peaks['move'][n])} | {mb(rest + 4 * largest)} | {mb(f.idle[n])} | "
            f"{mb(1.25 * rest)} |"
        )
    for what, run in (("move", f.mover), ("reconcile (resume)", f.reconcile)):
        if run is not None:
            print(
                f"mover, {what}: rest {mb(run.rest)} MB, peak {mb(run.peak)} MB, "
                f"target (rest + 4x item) {mb(run.rest + 4 * largest)} MB"
            )
    print("seconds: " + ", ".join(f"{k} {v:.1f}" for k, v in f.seconds.items() if k != "largest"))
    for line in f.trouble:
        print(f"NOT A CLEAN RUN: {line}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--mailbox-mb", type=float, default=2000)
    parser.add_argument("--largest", type=int, default=30, help="the largest item, MiB")
    parser.add_argument("--idle", type=float, default=30, help="seconds idle before the last RSS")
    parser.add_argument("--settle", type=float, default=5, help="seconds idle before rest")
    add_work_dir(parser, str(ROOT / "var" / "bench-memory"))
    parser.add_argument("--quick", action="store_true", help="a 100 MB mailbox, short waits")
    parser.add_argument(
        "--no-reconcile", dest="reconcile", action="store_false", help="skip phase 6"
    )
    parser.add_argument(
        "--transport-mb", type=float, default=200, help="phase 7's messages, MB (0: skip it)"
    )
    parser.add_argument("--only-transport", action="store_true", help="phase 7 alone")
    parser.add_argument(
        "--write-route", choices=("json", "message"), default="json",
        help="phase 2's writes: JSON text items, or messages as their bytes (message/rfc822)",
    )  # fmt: skip
    parser.add_argument(
        "--transport-route", choices=("message", "json", "json-message"), default="message",
        help="phase 7's submissions: message/rfc822 (as mail comes), a JSON text item, or "
        "a message as JSON (format message)",
    )  # fmt: skip
    parser.add_argument(
        "--transport-restart", action="store_true",
        help="phase 7: restart the transport once all are queued (the delivery's peak alone)",
    )  # fmt: skip
    args = parser.parse_args()
    if args.quick:
        args.mailbox_mb, args.idle, args.settle, args.transport_mb = 100, 15, 1, 100
    with work_dir(args) as base:
        args.dir = str(base)
        if not args.only_transport:
            figures = asyncio.run(run(args))
            report(args, figures)
            if figures.trouble:
                sys.exit(1)
        if args.transport_mb > 0:
            transport_report(args, asyncio.run(transport_phase(args)))


if __name__ == "__main__":
    main()
