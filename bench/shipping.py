"""Replication throughput (issue 3): log shipping, replay, and a real cluster under load.

    .venv/bin/python bench/shipping.py --mb 64 --seconds 20 [--rounds 5]
        [--dir var/bench-shipping] [--only in-process|cluster]

One run, one process, three parts:

1. In process: an `ActiveInstance` (1 MiB logs, LLR depth 10, no truncation) serves its log
   share on loopback (aiohttp, token middleware); a passive copy is seeded from it before any
   write, so it starts at waypoint 0.  `--mb` MiB of log records are written (200 items of
   ~1 KB per transaction, 8 concurrent writers), the log is rolled, and the active's LLR
   flush that the roll starts is waited for (both sides of (a) then meet a quiet disk).
   (a) copy + inspect: a `Copier`, wired as `PassiveCopy` wires it, pulls every closed
       generation over HTTP, writes and fsyncs it, inspects it and moves it into the log
       directory; MB/s of closed log bytes, beside `pull_baseline` (GET + CRC32C + fsync per
       file) over the same files.  Target >= 0.70 of the baseline (issue 3), >= 0.9 (33).
   (b) replay: a `Replayer` (no replay lag) applies those generations to the seeded database;
       items/s, beside `upsert_baseline` (SQLite executemany upserts of the same number of
       item-shaped rows).  Target >= 0.50 of the baseline (issue 3), >= 0.8 (issue 33).
   (a) and (b) run `--rounds` times (default 5), each round into a passive copy of its own
   (all seeded before the write), each figure right before its baseline; the ratio is the
   median of the rounds' (a single round of 64 MiB lasts 0.2-0.7 s, and one round's ratio
   moved by 0.3 between runs on a quiet machine).
       (b') the same upserts with random 32-hex item ids (uuid4, as the active gave them
       before issue 33's ordered ids, and as items moved in from elsewhere may still have
       them): reported beside (b), not instead of it.
2. End to end: three `replication-node serve` processes on loopback (tests.cluster_harness;
   mbx1 and mbx2 in redmond, mbx3 in dublin), DB1 active on mbx1 with passive copies on mbx2
   and mbx3, 1 MiB logs.  16 writers POST batches of 20 items of 1 KB for `--seconds`, while
   the passives' /v1/status is sampled every 0.25 s; then the log is rolled and the run ends
   when both passives have replayed everything.  Target: the copy queue stays under 2
   generations.

MB are 10^6 bytes.  `--dir` is wiped at the start and removed at the end (`--keep` leaves it).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import math
import os
import platform
import sqlite3
import sys
import time
from collections.abc import Callable
from datetime import date, timedelta
from pathlib import Path
from statistics import fmean, median

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import aiohttp  # noqa: E402
import orjson  # noqa: E402
from aiohttp import web  # noqa: E402

from bench.baselines import pull_baseline, upsert_baseline  # noqa: E402
from bench.workdir import add_work_dir, work_dir  # noqa: E402
from dag_common.clock import SystemClock  # noqa: E402
from dag_common.cluster_store.embedded import EmbeddedClusterStore  # noqa: E402
from dag_common.store_api import ItemIn  # noqa: E402
from replication_node.active.copy import CopyPaths  # noqa: E402
from replication_node.active.instance import ActiveInstance  # noqa: E402
from replication_node.active.settings import ActiveSettings  # noqa: E402
from replication_node.http.auth import auth_middleware  # noqa: E402
from replication_node.log.logdir import list_closed_generations  # noqa: E402
from replication_node.log.logfile import OPEN_LOG_NAME, closed_log_name  # noqa: E402
from replication_node.passive.copier import Copier  # noqa: E402
from replication_node.passive.markers import Markers  # noqa: E402
from replication_node.passive.replayer import Replayer  # noqa: E402
from replication_node.passive.seeder import seed_copy  # noqa: E402
from replication_node.shipping.logshare import add_log_share_routes  # noqa: E402
from replication_node.shipping.logshare_client import HttpLogSource  # noqa: E402
from replication_node.storage.database import Database  # noqa: E402
from tests.cluster_harness import LocalCluster  # noqa: E402

DB = "DB1"
MAILBOX = "bench"
TOKEN = "bench-token-0123456789abcdef"
BODY = "x" * 1000
MIB = 1 << 20
MB = 1e6
LOCAL_WRITERS, LOCAL_BATCH = 8, 200
CLUSTER_WRITERS, CLUSTER_BATCH = 16, 20
PASSIVES = ("mbx2", "mbx3")


async def run_until(task: asyncio.Task[None], event: asyncio.Event, done: Callable[[], bool]):
    """Wait until `done()`, re-checking each time `event` is set; re-raise if `task` stops."""
    while True:
        event.clear()
        if done():
            return
        waiter = asyncio.ensure_future(event.wait())
        await asyncio.wait({task, waiter}, return_when=asyncio.FIRST_COMPLETED)
        waiter.cancel()
        if task.done():
            task.result()
            raise RuntimeError(f"{task.get_name()} stopped before the end")


async def cancel(task: asyncio.Task[None]) -> None:
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)


# ---- 1. in process: copy + inspect, and replay, against their baselines -----------------


async def in_process(base: Path, mb: int, rounds: int) -> None:
    clock = SystemClock()
    store = EmbeddedClusterStore(base / "cluster.db")
    record = await store.set_active(DB, "bench", expected_epoch=0)
    assert record is not None
    instance = ActiveInstance(
        settings=ActiveSettings(
            database=DB,
            node="bench",
            site="local",
            activation_preference=1,
            epoch=record.epoch,
            log_file_size=MIB,
            llr_depth=10,
            roll_interval=timedelta(hours=1),
        ),
        paths=CopyPaths(base / "active", DB),
        clock=clock,
        cluster_store=store,
        peer_progress=None,  # nothing is truncated under the copier
    )
    await instance.start()
    assert instance.copy is not None and instance.store is not None
    app = web.Application(middlewares=[auth_middleware(TOKEN)])
    add_log_share_routes(app, lookup=lambda db: instance.share if db == DB else None)
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=1.0)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    session = aiohttp.ClientSession()
    db: Database | None = None
    tasks: list[asyncio.Task[None]] = []
    try:
        source = HttpLogSource(f"http://127.0.0.1:{port}", DB, session=session, token=TOKEN)
        # One passive copy a round, each seeded before any write (waypoint 0).
        passives = [CopyPaths(base / f"passive-{r + 1}", DB) for r in range(rounds)]
        for paths in passives:
            seed = await seed_copy(source, paths)
            assert seed.waypoint == 0, seed

        # -- write --mb MiB of log, then roll
        await instance.store.create_mailbox(MAILBOX)

        item = ItemIn(body=BODY)  # no id: the store assigns a new one each time

        def batch() -> list[ItemIn]:
            return [item] * LOCAL_BATCH

        open_log = instance.paths.logs / OPEN_LOG_NAME
        start = time.perf_counter()
        before = open_log.stat().st_size
        await instance.store.put_items(MAILBOX, batch())  # one record, to learn its size
        written = LOCAL_BATCH
        remaining = math.ceil(mb * MIB / (open_log.stat().st_size - before)) - 1

        async def writer() -> None:
            nonlocal written, remaining
            while remaining > 0:
                remaining -= 1
                await instance.store.put_items(MAILBOX, batch())  # type: ignore[union-attr]
                written += LOCAL_BATCH

        await asyncio.gather(*(writer() for _ in range(LOCAL_WRITERS)))
        await instance.copy.roll(force=True)
        write_time = time.perf_counter() - start
        # The active's LLR writes its last generations into its file after the roll: (a)
        # and its pull baseline both start once it is done, on the same quiet disk.
        await instance.copy.llr_settled()
        gens = list_closed_generations(instance.paths.logs)
        files = [instance.paths.logs / closed_log_name(g) for g in gens]
        size = sum(f.stat().st_size for f in files)
        last = gens[-1]
        assert gens == list(range(1, last + 1)), "closed generations are not contiguous"

        # -- (a) copy + inspect, as PassiveCopy._pipeline wires the copier, each round into a
        # passive of its own, its pull baseline right after it
        copy_times: list[float] = []
        pull_rates: list[float] = []
        copied: list[Markers] = []
        for r, paths in enumerate(passives):
            for d in (paths.logs, paths.inspector, paths.ignored):
                d.mkdir(parents=True, exist_ok=True)
            with contextlib.closing(Database.open(paths.database)) as db:
                header = db.header
            markers = Markers()  # the seed's waypoint 0: copied = inspected = replayed = 0
            inspected = asyncio.Event()
            copier = Copier(
                source=source,
                paths=paths,
                markers=markers,
                header=header,
                clock=clock,
                on_inspected=inspected.set,
            )
            start = time.perf_counter()
            tasks.append(asyncio.create_task(copier.run(), name="copier"))
            await run_until(tasks[-1], inspected, lambda m=markers: m.last_log_inspected >= last)
            copy_times.append(time.perf_counter() - start)
            await cancel(tasks[-1])
            copied.append(markers)
            pull_mbps, _ = await pull_baseline(files, base / f"pull-baseline-{r + 1}")
            pull_rates.append(pull_mbps)

        # -- (b) replay into each round's seeded database, its upsert baseline right after
        replay_times: list[float] = []
        upsert_rates: list[float] = []
        for r, (paths, markers) in enumerate(zip(passives, copied, strict=True)):
            db = Database.open(paths.database)
            wakeup, replayed = asyncio.Event(), asyncio.Event()
            wakeup.set()
            replayer = Replayer(
                db=db,
                log_dir=paths.logs,
                markers=markers,
                replay_lag_time=timedelta(0),
                clock=clock,
                wakeup=wakeup,
                after_replay=replayed.set,  # no truncation: only tells the bench to look
            )
            start = time.perf_counter()
            tasks.append(asyncio.create_task(replayer.run(), name="replayer"))
            await run_until(tasks[-1], replayed, lambda m=markers: m.last_log_replayed >= last)
            replay_times.append(time.perf_counter() - start)
            await cancel(tasks[-1])
            db.close()
            db = None
            with contextlib.closing(sqlite3.connect(paths.database)) as conn:
                query = "SELECT count(*) FROM items WHERE mailbox = ?"
                (replayed_items,) = conn.execute(query, (MAILBOX,)).fetchone()
            assert replayed_items == written, (replayed_items, written)
            upsert_rates.append(
                upsert_baseline(base / f"upsert-baseline-{r + 1}.sqlite", rows=written, body=1000)
            )
        random_rate = upsert_baseline(
            base / "upsert-random-ids.sqlite", rows=written, body=1000, random_ids=True
        )
    finally:
        for task in tasks:
            await cancel(task)
        if db is not None:
            db.close()
        await session.close()
        await runner.cleanup()
        await instance.stop()
        store.close()

    copy_ratios = sorted(
        size / t / MB / pull for t, pull in zip(copy_times, pull_rates, strict=True)
    )
    replay_ratios = sorted(
        written / t / up for t, up in zip(replay_times, upsert_rates, strict=True)
    )
    copy_mbps = size * rounds / sum(copy_times) / MB
    replay_rate = written * rounds / sum(replay_times)
    print(
        f"in process: {len(gens)} closed generations, {size / MB:.1f} MB, {written:,} items "
        f"of {len(BODY)} B in transactions of {LOCAL_BATCH} ({LOCAL_WRITERS} writers); "
        f"{rounds} rounds, each a copy (a passive of its own) then its baseline\n"
    )
    print("| stage | work a round | seconds (rounds) | rate | baseline rate | vs baseline |")
    print("|---|---|---:|---:|---:|---:|")
    print(
        f"| log write on the active | {size / MB:.1f} MB | {write_time:.2f} | "
        f"{size / write_time / MB:.1f} MB/s | | |"
    )
    print(
        f"| (a) copy + inspect (Copier over HTTP) | {len(gens)} files | {seconds(copy_times)} | "
        f"{copy_mbps:.1f} MB/s | {fmean(pull_rates):.1f} MB/s | {spread(copy_ratios)} |"
    )
    print(
        f"| (b) replay (Replayer) | {written:,} items | {seconds(replay_times)} | "
        f"{replay_rate:,.0f} items/s | {fmean(upsert_rates):,.0f} rows/s | "
        f"{spread(replay_ratios)} |"
    )
    print(
        f"| (b') the upserts with random item ids (uuid4), once | {written:,} rows | | | "
        f"{random_rate:,.0f} rows/s | {replay_rate / random_rate:.2f} |"
    )
    print(
        f"\ncopy + inspect / aiohttp pull + CRC32C + fsync: {median(copy_ratios):.2f} "
        f"(median of {rounds} rounds; target >= 0.90)"
    )
    print(
        f"replay / SQLite batched upserts: {median(replay_ratios):.2f} (median of {rounds} "
        "rounds; target >= 0.80)\n"
    )


def seconds(times: list[float]) -> str:
    return ", ".join(f"{t:.2f}" for t in times)


def spread(ratios: list[float]) -> str:
    """Median of the rounds' ratios (their range)."""
    return f"{median(ratios):.2f} ({ratios[0]:.2f}-{ratios[-1]:.2f})"


# ---- 2. end to end over three node processes ---------------------------------------------


async def end_to_end(base: Path, seconds: float) -> None:
    cluster = LocalCluster(
        base,
        nodes=[("mbx1", "redmond"), ("mbx2", "redmond"), ("mbx3", "dublin")],
        databases=[
            {
                "name": DB,
                "copies": [
                    {"node": "mbx1", "activation_preference": 1},
                    {"node": "mbx2", "activation_preference": 2},
                    {"node": "mbx3", "activation_preference": 3},
                ],
            }
        ],
        defaults={"log_file_size": "1MiB", "llr_depth": 10},
    )
    prefix = f"/v1/databases/{DB}"
    try:
        await cluster.start()

        async def passives_healthy() -> bool:
            for node in PASSIVES:
                if (await cluster.status(node))[DB]["status"] != "Healthy":
                    return False
            return True

        await cluster.ok("PUT", "mbx1", f"{prefix}/mailboxes/{MAILBOX}")
        await cluster.wait_for("healthy passive copies", passives_healthy)
        first_gen = (await cluster.status("mbx1"))[DB]["last_log_generated"]
        payload = orjson.dumps({"items": [{"body": BODY} for _ in range(CLUSTER_BATCH)]})
        json_header = {"Content-Type": "application/json"}
        items_path = f"{prefix}/mailboxes/{MAILBOX}/items"
        commits = 0
        samples: dict[str, dict[str, list[int]]] = {n: {"copy": [], "replay": []} for n in PASSIVES}
        loading = True

        async def writer(deadline: float) -> None:
            nonlocal commits
            while time.perf_counter() < deadline:
                await cluster.ok("POST", "mbx1", items_path, data=payload, headers=json_header)
                commits += 1

        async def sample(node: str) -> None:
            copy = (await cluster.status(node))[DB]
            samples[node]["copy"].append(copy["copy_queue_length"])
            samples[node]["replay"].append(copy["replay_queue_length"])

        async def sampler() -> None:
            while loading:
                await asyncio.gather(*(sample(n) for n in PASSIVES))
                await asyncio.sleep(0.25)

        start = time.perf_counter()
        sampling = asyncio.create_task(sampler())
        await asyncio.gather(*(writer(start + seconds) for _ in range(CLUSTER_WRITERS)))
        load_time = time.perf_counter() - start
        loading = False
        await sampling
        load_gens = (await cluster.status("mbx1"))[DB]["last_log_generated"] - first_gen
        await cluster.ok("POST", "mbx1", f"{prefix}/roll-log")
        generated = (await cluster.status("mbx1"))[DB]["last_log_generated"]
        while True:
            copies = [(await cluster.status(n))[DB] for n in PASSIVES]
            if all(c["last_log_replayed"] >= generated for c in copies):
                break
            if time.perf_counter() - start > seconds + 600:
                raise TimeoutError(f"passives did not replay through {generated}: {copies}")
            await asyncio.sleep(0.05)
        total_time = time.perf_counter() - start
    except BaseException:
        for node in cluster.ports:
            print(f"--- {node} log (tail) ---\n{cluster.log(node)[-3000:]}", file=sys.stderr)
        raise
    finally:
        await cluster.close()

    items = commits * CLUSTER_BATCH
    total_gens = generated - first_gen
    print(
        f"end to end: 3 node processes, {CLUSTER_WRITERS} writers x {load_time:.1f} s, "
        f"{CLUSTER_BATCH} items of {len(BODY)} B per transaction; generations "
        f"{first_gen + 1}-{generated}\n"
    )
    print("| measure | value |")
    print("|---|---:|")
    print(f"| transactions/s during the load | {commits / load_time:,.0f} |")
    print(f"| items/s during the load | {items / load_time:,.0f} |")
    print(f"| item body MB/s during the load | {items * len(BODY) / load_time / MB:.1f} |")
    print(f"| log MB/s generated during the load (~) | {load_gens * MIB / load_time / MB:.1f} |")
    print(
        f"| end-to-end log MB/s, first write to replayed on both passives (~) | "
        f"{total_gens * MIB / total_time / MB:.1f} |"
    )
    print(f"| first write to replayed on both passives, s | {total_time:.2f} |")
    for node in PASSIVES:
        for kind in ("copy", "replay"):
            values = samples[node][kind]
            print(
                f"| {node} {kind} queue, generations: max / mean ({len(values)} samples) | "
                f"{max(values, default=0)} / {fmean(values) if values else 0:.2f} |"
            )
    print(
        "\n(~) log MB = closed generations x 1 MiB: the active truncates what every copy has "
        "replayed, so its closed files cannot be summed; the last generation of each phase is "
        "not full, so this slightly overstates the bytes."
    )
    worst = max(max(samples[n]["copy"], default=0) for n in PASSIVES)
    print(
        f"max copy queue with {CLUSTER_WRITERS} writers: "
        + ", ".join(f"{n} {max(samples[n]['copy'], default=0)}" for n in PASSIVES)
        + f" generations (target < 2: {'met' if worst < 2 else 'NOT met'})"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=int, default=64, help="MiB of log for the in-process part")
    parser.add_argument(
        "--rounds", type=int, default=5, help="in-process rounds of (a) and (b), interleaved"
    )
    parser.add_argument("--seconds", type=float, default=20.0, help="end-to-end load duration")
    add_work_dir(parser, "var/bench-shipping")
    parser.add_argument(
        "--only", choices=("in-process", "cluster"), help="run one part (default: both)"
    )
    args = parser.parse_args()
    print(
        f"{date.today().isoformat()} - nproc {os.cpu_count()}, {platform.platform()}, "
        f"Python {platform.python_version()}; --mb {args.mb} --rounds {args.rounds} "
        f"--seconds {args.seconds:g}"
        f"{f' --only {args.only}' if args.only else ''}\n"
    )
    with work_dir(args) as base:
        if args.only != "cluster":
            asyncio.run(in_process(base / "in-process", args.mb, args.rounds))
        if args.only != "in-process":
            asyncio.run(end_to_end(base / "cluster", args.seconds))


if __name__ == "__main__":
    main()
