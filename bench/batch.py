"""Moves at fleet scale (issue 30): a batch run by two `mrs serve` workers against a plain
parallel copy of the same items, the overhead of one move, and one worker holding a long
queue.

    .venv/bin/python bench/batch.py [--mailboxes 200] [--mb 10] [--concurrency 8]
        [--overhead-moves 40] [--queue 1000] [--running 50] [--dir var/bench-batch]

One cluster: three `replication-node serve` processes and `guarantee-api serve` on loopback,
log_file_size 1 MiB and llr_depth 10 (the config's defaults), the service polling every 1 s.
DB1 and DB2 are sources (active on mbx1, passive on mbx2), DB3 and DB4 targets (active on
mbx2 and mbx3, a passive each on mbx3 and mbx1; constraint SecondCopy).

1. Fill: `--mailboxes` mailboxes of `--mb` MB each (items of 100 kB), half in DB1, half in
   DB2, over the node API; both sources settled (rolled and replayed by their passives).
2. Plain parallel copy (the baseline): every mailbox's items read from its source's active
   (one GET) and POSTed to its target's active (DB1's to DB3, DB2's to DB4) into a mailbox
   of another name, in the mover's write cuts, `--concurrency` mailboxes at once; no
   guarantee, no lock, no flush, no verification.
3. The batch: `mrs batch create` of the same mailboxes (CSV), run by two `mrs serve`
   workers whose limits let `--concurrency` moves run at once over the two targets
   (`--max-per-target-database concurrency/2`), from `batch create` to the last move
   Completed.  Ratio = plain seconds / batch seconds (target >= 0.7).
4. Overhead of a move: a batch of `--overhead-moves` mailboxes of one 1 kB item each, same
   workers: its time from `batch create` returning to the last Completed, x concurrency /
   moves, is what one move costs beyond its copy (start, lease, gates, lock, flush,
   verification, directory, soft delete); target < 0.3 s.  Then half as many, one at a time
   (one worker, `--max-moves 1`): a move's own time with nothing beside it.
5. A long queue: `--queue` one-item mailboxes queued in one batch, one worker with
   `--max-moves --running`: its CPU (user + system, from /proc) over the time it runs them,
   as cores, and its RSS with the whole queue waiting and at the end.

Every moved mailbox is checked (its items on the target equal the source's, the source
soft-deleted), so a broken batch cannot be reported.  MB are 10^6 bytes of item bodies.
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
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.workdir import add_work_dir, work_dir  # noqa: E402
from mrs_client.move_store.embedded import EmbeddedMoveStore  # noqa: E402
from tests.cluster_harness import LocalCluster, wait_until  # noqa: E402

SOURCES = {"DB1": "DB3", "DB2": "DB4"}
ACTIVE = {"DB1": "mbx1", "DB2": "mbx1", "DB3": "mbx2", "DB4": "mbx3"}
PASSIVE = {"DB1": "mbx2", "DB2": "mbx2", "DB3": "mbx3", "DB4": "mbx1"}
ITEM = 100_000
HALF_LOG = 512 * 1024


def databases() -> list[dict[str, Any]]:
    return [
        {
            "name": db,
            **({} if db in SOURCES else {"data_move_replication_constraint": "SecondCopy"}),
            "copies": [
                {"node": ACTIVE[db], "activation_preference": 1},
                {"node": PASSIVE[db], "activation_preference": 2},
            ],
        }
        for db in ("DB1", "DB2", "DB3", "DB4")
    ]


def cuts(items: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """The mover's write cuts: at most half a log file of bodies per write."""
    out: list[list[dict[str, Any]]] = [[]]
    size = 0
    for item in items:
        cost = len(item["body"]) + 200
        if out[-1] and size + cost > HALF_LOG:
            out.append([])
            size = 0
        out[-1].append(item)
        size += cost
    return [c for c in out if c]


def body(name: str, i: int, size: int) -> str:
    text = f"{name} item {i}: lorem ipsum dolor sit amet, consectetur. "
    return (text * (size // len(text) + 1))[:size]


async def fill(cluster: LocalCluster, names: dict[str, str], items: int, size: int) -> None:
    """Each mailbox in its source database with `items` items of `size` bytes."""
    gate = asyncio.Semaphore(4)

    async def one(name: str, db: str) -> None:
        async with gate:
            path = f"/v1/databases/{db}/mailboxes/{name}"
            await cluster.ok("PUT", ACTIVE[db], path, json={"display_name": name})
            entries = [
                {
                    "item_id": f"m{i}",
                    "folder": "Inbox",
                    "subject": f"s{i}",
                    "body": body(name, i, size),
                }
                for i in range(items)
            ]
            for cut in cuts(entries):
                await cluster.ok("POST", ACTIVE[db], f"{path}/items", json={"items": cut})

    await asyncio.gather(*(one(n, db) for n, db in names.items()))
    for db in SOURCES:
        await settle(cluster, db)


async def settle(cluster: LocalCluster, db: str) -> None:
    rolled = await cluster.ok("POST", ACTIVE[db], f"/v1/databases/{db}/roll-log")
    generation = rolled["closed_generation"]

    async def replayed() -> bool:
        copy = (await cluster.status(PASSIVE[db]))[db]
        return copy["status"] == "Healthy" and copy["last_log_replayed"] >= generation

    await cluster.wait_for(f"{db} replayed through {generation}", replayed, timeout=600)


async def plain_copy(cluster: LocalCluster, names: dict[str, str], concurrency: int) -> float:
    gate = asyncio.Semaphore(concurrency)

    async def one(name: str, db: str) -> None:
        async with gate:
            target = SOURCES[db]
            items = await cluster.items(ACTIVE[db], db, name)
            entries = [
                {k: v[k] for k in ("item_id", "folder", "subject", "body")}
                for v in items.values()
                if not v["deleted"]
            ]
            path = f"/v1/databases/{target}/mailboxes/{name}-copy"
            await cluster.ok("PUT", ACTIVE[target], path, json={"display_name": name})
            for cut in cuts(entries):
                await cluster.ok("POST", ACTIVE[target], f"{path}/items", json={"items": cut})

    start = time.perf_counter()
    await asyncio.gather(*(one(n, db) for n, db in names.items()))
    return time.perf_counter() - start


def mrs(cluster: LocalCluster, *args: str) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(
        [sys.executable, "-m", "mrs_client.cli", *args, "--config", str(cluster.config_path)],
        capture_output=True,
        text=True,
        env=cluster.env(),
        cwd=ROOT,
        timeout=600,
    )
    if result.returncode != 0:
        raise RuntimeError(f"mrs {' '.join(args)}: {result.stdout}{result.stderr}")
    return result


created: dict[str, float] = {}  # seconds `mrs batch create` took, by batch


def serve(cluster: LocalCluster, name: str, per_target: int, most: int) -> subprocess.Popen[bytes]:
    log = open(cluster.root / f"{name}.log", "ab")  # noqa: SIM115 - the child owns it
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "mrs_client.cli",
            "serve",
            "--config",
            str(cluster.config_path),
            "--poll",
            "200ms",
            "--flush-retry-interval",
            "1s",
            "--max-moves",
            str(most),
            "--max-per-target-database",
            str(per_target),
            "--max-per-source-database",
            str(most),
            "--max-per-target-node",
            str(most),
            "--max-per-source-node",
            str(most),
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        env=cluster.env(),
        cwd=ROOT,
    )


def stop(procs: list[subprocess.Popen[bytes]]) -> None:
    for p in procs:
        p.terminate()
    for p in procs:
        p.wait(timeout=120)


async def run_batch(
    cluster: LocalCluster, batch: str, names: dict[str, str], watch: Any = None
) -> float:
    """`mrs batch create` to the last move Completed, in seconds."""
    csv = cluster.root / f"{batch}.csv"
    csv.write_text(
        "mailbox,target_database\n" + "".join(f"{n},{SOURCES[db]}\n" for n, db in names.items())
    )
    store = EmbeddedMoveStore(cluster.root / "cluster.db")
    start = time.perf_counter()
    await asyncio.to_thread(mrs, cluster, "batch", "create", batch, "--csv", str(csv))
    created[batch] = time.perf_counter() - start

    def done() -> bool:
        records = store.call(store._list, None, batch)
        failed = [r for r in records if r.state == "Failed"]
        if failed:
            raise RuntimeError(f"move {failed[0].id} failed: {failed[0].failure}")
        if watch is not None:
            watch(records)
        return len(records) == len(names) and all(r.state == "Completed" for r in records)

    await wait_until(f"batch {batch} completed", done, timeout=7200, every=0.2)
    seconds = time.perf_counter() - start
    await store.aclose()
    return seconds


async def check_moved(cluster: LocalCluster, names: dict[str, str]) -> None:
    for name, db in names.items():
        source = await cluster.items(ACTIVE[db], db, name)
        target = await cluster.items(ACTIVE[SOURCES[db]], SOURCES[db], name)
        live = {k: v["body"] for k, v in source.items() if not v["deleted"]}
        moved = {k: v["body"] for k, v in target.items() if not v["deleted"]}
        assert live == moved, f"{name}: the target differs from the source"
        box = await cluster.ok("GET", ACTIVE[db], f"/v1/databases/{db}/mailboxes/{name}")
        assert box["soft_deleted"], f"{name}: the source is not soft-deleted"


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def own_cpu() -> float:
    t = os.times()
    return t.user + t.system


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def names_of(prefix: str, n: int) -> dict[str, str]:
    return {f"{prefix}{i:04d}": ("DB1" if i % 2 == 0 else "DB2") for i in range(n)}


async def bench(args: argparse.Namespace, base: Path) -> dict[str, Any]:
    cluster = LocalCluster(
        base,
        nodes=[("mbx1", "redmond"), ("mbx2", "redmond"), ("mbx3", "dublin")],
        databases=databases(),
        defaults={"log_file_size": "1MiB", "llr_depth": 10, "failover_after": None},
    )
    cluster.config["guarantee_api"]["poll_interval"] = "1s"
    cluster.write_config()
    out: dict[str, Any] = {}
    api = None
    workers: list[subprocess.Popen[bytes]] = []
    try:
        await cluster.start()
        api = await cluster.start_guarantee_api()
        per_mailbox = int(args.mb * 1e6) // ITEM
        big = names_of("user", args.mailboxes)
        t = time.perf_counter()
        await fill(cluster, big, per_mailbox, ITEM)
        out["fill_s"] = time.perf_counter() - t
        mb = args.mailboxes * per_mailbox * ITEM / 1e6
        out["mb"] = mb
        nodes = {n: p.pid for n, p in cluster.procs.items()}
        before = {n: cpu_seconds(pid) for n, pid in nodes.items()} | {"bench": own_cpu()}
        out["plain_s"] = await plain_copy(cluster, big, args.concurrency)
        out["plain_cpu"] = {n: cpu_seconds(pid) - before[n] for n, pid in nodes.items()} | {
            "bench": own_cpu() - before["bench"]
        }
        t = time.perf_counter()
        for db in SOURCES.values():
            await settle(cluster, db)
        out["plain_settle_s"] = time.perf_counter() - t
        per_target = max(1, args.concurrency // 2)
        workers = [serve(cluster, f"worker-{w}", per_target, args.concurrency) for w in "ab"]
        before = {n: cpu_seconds(pid) for n, pid in nodes.items()}
        spies = [
            subprocess.Popen(
                ["py-spy", "record", "--pid", str(p.pid), "--format", "raw", "--nonblocking",
                 "-o", str(base / f"profile-{w}.txt")],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            )
            for w, p in zip("ab", workers, strict=True)
        ] if os.environ.get("BENCH_PROFILE") else []  # fmt: skip
        most = {"running": 0}

        def watch(records: list[Any]) -> None:
            most["running"] = max(
                most["running"], sum(r.state in ("InProgress", "Stalled") for r in records)
            )

        out["batch_s"] = await run_batch(cluster, "big", big, watch)
        for spy in spies:
            spy.send_signal(2)
            spy.wait(timeout=60)
        out["batch_cpu"] = {n: cpu_seconds(pid) - before[n] for n, pid in nodes.items()} | {
            f"worker-{w}": cpu_seconds(p.pid) for w, p in zip("ab", workers, strict=True)
        }
        out["batch_most_running"] = most["running"]
        await check_moved(cluster, big)
        small = names_of("tiny", args.overhead_moves)
        await fill(cluster, small, 1, 1000)
        procs = (
            {n: p.pid for n, p in cluster.procs.items()}
            | {"guarantee-api": api.pid}
            | {f"worker-{w}": p.pid for w, p in zip("ab", workers, strict=True)}
        )
        before = {n: cpu_seconds(pid) for n, pid in procs.items()}
        out["overhead_batch_s"] = await run_batch(cluster, "tiny", small)
        out["overhead_cpu"] = {n: cpu_seconds(pid) - before[n] for n, pid in procs.items()}
        await check_moved(cluster, small)
        stop(workers)
        # the same, one move at a time: each one-item move's own time, no other beside it
        single = names_of("one", args.overhead_moves // 2)
        await fill(cluster, single, 1, 1000)
        workers = [serve(cluster, "worker-single", 1, 1)]
        out["single_batch_s"] = await run_batch(cluster, "single", single)
        await check_moved(cluster, single)
        stop(workers)
        workers = []
        # 5. one worker, a long queue
        queue = names_of("q", args.queue)
        await fill(cluster, queue, 1, 1000)
        csv = cluster.root / "queue.csv"
        csv.write_text(
            "mailbox,target_database\n" + "".join(f"{n},{SOURCES[db]}\n" for n, db in queue.items())
        )
        await asyncio.to_thread(mrs, cluster, "batch", "create", "queue", "--csv", str(csv))
        one = serve(cluster, "worker-queue", args.running // 2, args.running)
        workers = [one]
        store = EmbeddedMoveStore(cluster.root / "cluster.db")
        await wait_until(
            "the worker runs its moves",
            lambda: len(store.call(store._holders)) >= min(args.running, args.queue) // 2,
            timeout=300,
        )
        out["queue_rss_start_mb"] = rss_mb(one.pid)
        cpu0, t0 = cpu_seconds(one.pid), time.perf_counter()
        samples: list[int] = []

        def queue_done() -> bool:
            records = store.call(store._list, None, "queue")
            samples.append(len(store.call(store._holders)))
            return all(r.state == "Completed" for r in records)

        await wait_until("the queue is done", queue_done, timeout=7200, every=0.5)
        wall = time.perf_counter() - t0
        out["queue_cpu_cores"] = (cpu_seconds(one.pid) - cpu0) / wall
        out["queue_s"] = wall
        out["queue_rss_end_mb"] = rss_mb(one.pid)
        out["queue_running_median"] = sorted(samples)[len(samples) // 2]
        await store.aclose()
        await check_moved(cluster, queue)
    finally:
        stop(workers)
        if api is not None:
            api.terminate()
            api.wait(timeout=30)
        await cluster.close()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--mailboxes", type=int, default=200)
    parser.add_argument("--mb", type=float, default=10.0)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--overhead-moves", type=int, default=40)
    parser.add_argument("--queue", type=int, default=1000)
    parser.add_argument("--running", type=int, default=50)
    add_work_dir(parser, "var/bench-batch")
    args = parser.parse_args()
    with work_dir(args) as base:
        out = asyncio.run(bench(args, base))
    ratio = out["plain_s"] / out["batch_s"]
    out["created_s"] = created
    running = out["overhead_batch_s"] - created["tiny"]
    overhead = running * args.concurrency / args.overhead_moves
    print(f"\n{date.today()} on {platform.node()} ({os.cpu_count()} cores)")
    print(f"batch of {args.mailboxes} mailboxes x {args.mb:g} MB ({out['mb']:,.0f} MB), "
          f"DB1,DB2 -> DB3,DB4, two workers, {args.concurrency} at once")  # fmt: skip
    print("| what | seconds | MB/s |\n|---|---:|---:|")
    print(f"| plain parallel copy ({args.concurrency} at once) | {out['plain_s']:.1f} | "
          f"{out['mb'] / out['plain_s']:.1f} |")  # fmt: skip
    print(f"| batch (mrs batch create to the last Completed; at most "
          f"{out['batch_most_running']} running) | {out['batch_s']:.1f} | "
          f"{out['mb'] / out['batch_s']:.1f} |")  # fmt: skip
    print(f"ratio plain / batch: **{ratio:.2f}** (target >= 0.7); the plain copy's passives "
          f"then caught up in {out['plain_settle_s']:.1f} s more (not counted)")  # fmt: skip
    for phase in ("plain", "batch"):
        cpu = ", ".join(f"{n} {v:.1f}" for n, v in out[f"{phase}_cpu"].items())
        print(f"CPU seconds during the {phase} phase: {cpu}")
    print(f"`mrs batch create` (validation of every line against the nodes, one store "
          f"write): {created['big']:.2f} s for {args.mailboxes}, {created['tiny']:.2f} s for "
          f"{args.overhead_moves}")  # fmt: skip
    print(f"overhead per move: {args.overhead_moves} one-item moves run in "
          f"{running:.1f} s after their batch was created, {args.concurrency} at once: "
          f"**{overhead:.2f} s** per move (target < 0.3 s)")  # fmt: skip
    cpu = ", ".join(f"{n} {v:.2f}" for n, v in out["overhead_cpu"].items())
    print(f"CPU seconds while the {args.overhead_moves} one-item moves ran: {cpu}")
    single = (out["single_batch_s"] - created["single"]) / (args.overhead_moves // 2)
    print(f"one at a time (one worker, --max-moves 1): {args.overhead_moves // 2} one-item "
          f"moves, **{single:.2f} s** each")  # fmt: skip
    print(f"one worker, {args.queue} queued, at most {args.running} running (median "
          f"{out['queue_running_median']}): {out['queue_s']:.1f} s, "
          f"**{out['queue_cpu_cores']:.2f} cores** of CPU; RSS {out['queue_rss_start_mb']:.0f} MB "
          f"with the queue waiting, {out['queue_rss_end_mb']:.0f} MB at the end")  # fmt: skip
    print(json.dumps(out))


if __name__ == "__main__":
    main()
