"""The replay's stages one by one (issue 51): what a passive spends per item to read a batch
(`read_batch`: verify, decode, `put_rows`) and to write it (`Database.apply`: the rows,
the commit made durable), on bench/shipping.py part 1's log.

    PYTHONPATH=TREE python bench/replay_stages.py write DIR [--mb 64]
    PYTHONPATH=TREE python bench/replay_stages.py time DIR [--rounds 3]
    PYTHONPATH=TREE valgrind --tool=callgrind --collect-atstart=no \\
        --toggle-collect=functools_reduce python bench/replay_stages.py stage DIR read|puts|apply

`write`: part 1's write (64 MiB of log, 200 items of ~1 KB a transaction, 8 writers) by an
`ActiveInstance`, its closed generations kept in DIR/logs and a passive copy seeded before
it in DIR/seed.  `time`: the log replayed a 16-generation batch at a time into a fresh copy
of the seed, each stage's thread CPU in µs an item, the least over the full batches and the
rounds (a batch read, then applied: no read ahead, so that each stage is its own), and the
commit's share of the apply.  `stage`: the second batch's one stage called through
`functools.reduce` (nothing else in a stage calls it), so that callgrind collects that
stage alone: its instructions an item are the total over the batch's 12,800 items.

The script imports whatever tree PYTHONPATH names (not its own): to measure an older commit,
`git archive` it into a directory of its own, copy this script into its bench/, and point
PYTHONPATH there (bench/README.md, "issue 51: the replay against the base").
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import math
import shutil
import tempfile
import threading
import time
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

BATCH = 16  # generations a replay batch reads at most (`Replayer`)


async def write(out: Path, mb: int) -> None:
    """bench/shipping.py part 1's write into `out` (wiped): `logs`, `seed`."""
    import aiohttp
    from aiohttp import web

    from bench.shipping import BODY, DB, LOCAL_BATCH, LOCAL_WRITERS, MAILBOX, MIB, TOKEN
    from dag_common.clock import SystemClock
    from dag_common.cluster_store.embedded import EmbeddedClusterStore
    from dag_common.store_api import ItemIn
    from replication_node.active.copy import CopyPaths
    from replication_node.active.instance import ActiveInstance
    from replication_node.http.auth import auth_middleware
    from replication_node.log.logdir import list_closed_generations
    from replication_node.log.logfile import OPEN_LOG_NAME, closed_log_name
    from replication_node.passive.seeder import seed_copy
    from replication_node.shipping.logshare import add_log_share_routes
    from replication_node.shipping.logshare_client import HttpLogSource

    shutil.rmtree(out, ignore_errors=True)
    work = out / "work"
    store = EmbeddedClusterStore(work / "cluster.db")
    record = await store.set_active(DB, "bench", expected_epoch=0)
    assert record is not None
    instance = ActiveInstance(
        database=DB,
        node="bench",
        site="local",
        activation_preference=1,
        paths=CopyPaths(work / "active", DB),
        log_file_size=MIB,
        llr_depth=10,
        roll_interval=timedelta(hours=1),
        clock=SystemClock(),
        cluster_store=store,
        epoch=record.epoch,
        peer_progress=None,
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
    try:
        source = HttpLogSource(f"http://127.0.0.1:{port}", DB, session=session, token=TOKEN)
        passive = CopyPaths(work / "passive", DB)
        assert (await seed_copy(source, passive)).waypoint == 0
        await instance.store.create_mailbox(MAILBOX)
        batch = [ItemIn(body=BODY)] * LOCAL_BATCH
        open_log = instance.paths.logs / OPEN_LOG_NAME
        before = open_log.stat().st_size
        await instance.store.put_items(MAILBOX, batch)
        remaining = math.ceil(mb * MIB / (open_log.stat().st_size - before)) - 1

        async def writer() -> None:
            nonlocal remaining
            while remaining > 0:
                remaining -= 1
                await instance.store.put_items(MAILBOX, batch)  # type: ignore[union-attr]

        await asyncio.gather(*(writer() for _ in range(LOCAL_WRITERS)))
        await instance.copy.roll(force=True)
        await instance.copy.llr_settled()
        (out / "logs").mkdir(parents=True)
        for gen in list_closed_generations(instance.paths.logs):
            name = closed_log_name(gen)
            shutil.copy(instance.paths.logs / name, out / "logs" / name)
    finally:
        await session.close()
        await runner.cleanup()
        await instance.stop()
        store.close()
    shutil.copytree(passive.root, out / "seed")
    shutil.rmtree(work)


def _rows_of(put_rows: Callable[[Any], Any], transactions: Any) -> list[Any]:
    return [put_rows(t) for t in transactions]


class _Committing(threading.Event):
    """`Database.apply`'s `committing`, with the thread CPU at which it was set."""

    at = 0.0

    def set(self) -> None:
        self.at = time.thread_time()
        super().set()


def replay(data: Path, stage: str | None = None) -> list[tuple[int, float, float, float, float]]:
    """Replay DIR's log into a fresh copy of its seed; per batch: items, thread CPU of the
    read, of `put_rows` (again, alone), of the rows' writes and of the commit.  With a
    `stage`, the second batch's stage runs through `functools.reduce`, and the replay stops
    after it."""
    from replication_node.log.operations import PutItem
    from replication_node.passive.replayer import read_batch
    from replication_node.storage.database import Database
    from replication_node.storage.tables import put_rows

    def alone(run: Callable[[], Any]) -> Any:
        return functools.reduce(lambda _, f: f(), [run], None)

    gens = sorted(int(p.name[1:9], 16) for p in (data / "logs").glob("E*.log"))
    batches = [gens[i : i + BATCH] for i in range(0, len(gens), BATCH)]
    tmp = Path(tempfile.mkdtemp(prefix="replay-stages-"))
    out = []
    try:
        shutil.copytree(data / "seed", tmp / "copy")
        db = Database.open(tmp / "copy" / "DB1.sqlite")
        prev = pending = None
        for n, gens_of in enumerate(batches):
            measured = stage if n == 1 else None
            read = functools.partial(
                read_batch,
                data / "logs",
                gens_of,
                prev=prev,
                log_signature=db.header.log_signature,
                pending=pending,
            )
            t0 = time.thread_time()
            batch = alone(read) if measured == "read" else read()
            t1 = time.thread_time()
            rows = functools.partial(_rows_of, put_rows, batch.transactions)
            if measured == "puts":
                alone(rows)
            elif stage is None:
                rows()
            t2 = time.thread_time()
            committing = _Committing()
            apply = functools.partial(
                db.apply,
                batch.transactions,
                waypoint=gens_of[-1],
                committed=gens_of[-1],
                last_log_time=batch.close_time,
                digests={},
                puts=batch.puts,
                committing=committing,
            )
            alone(apply) if measured == "apply" else apply()
            t3 = time.thread_time()
            prev, pending = batch.last_header, batch.pending
            items = sum(type(op) is PutItem for t in batch.transactions for op in t.ops)
            out.append((items, t1 - t0, t2 - t1, committing.at - t2, t3 - committing.at))
            if measured:
                break
        db.close()
    finally:
        shutil.rmtree(tmp)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("what", choices=("write", "time", "stage"))
    parser.add_argument("dir", type=Path)
    parser.add_argument("stage", nargs="?", choices=("read", "puts", "apply"))
    parser.add_argument("--mb", type=int, default=64, help="MiB of log to write")
    parser.add_argument("--rounds", type=int, default=3, help="replays to take the least of")
    args = parser.parse_args()
    if args.what == "write":
        asyncio.run(write(args.dir, args.mb))
    elif args.what == "stage":
        if args.stage is None:
            parser.error("stage: name read, puts or apply")
        print(f"{args.stage}: batch 2, {replay(args.dir, args.stage)[1][0]} items")
    else:
        names = ("read_batch", "of it put_rows", "rows", "commit")
        best = [math.inf] * 4
        for _ in range(args.rounds):
            full = replay(args.dir)[1:-1]  # the first creates the mailbox, the last is short
            if not full:
                parser.error("time: the log is under three batches (write it with --mb 48 or more)")
            for i in range(4):
                best[i] = min([best[i], *(b[i + 1] / b[0] * 1e6 for b in full)])
        print(", ".join(f"{n} {v:.2f}" for n, v in zip(names, best, strict=True)), "µs/item")


if __name__ == "__main__":
    main()
