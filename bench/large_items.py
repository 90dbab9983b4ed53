"""Items larger than a log generation (issue 29): each target against its baseline, same run.

    .venv/bin/python bench/large_items.py [--quick] [--parts 1,2,3,4] [--dir var/bench-large-items]

MB are 10^6 bytes of item bodies (text, 1 byte a character, that does not compress to a
pattern).  Logs are 1 MiB (`log_file_size`'s default) and LLR depth 10 throughout.  `--dir` is
wiped at the start and removed at the end (`--keep` leaves it).

1. Commits of 8 MiB items.  In process: an `ActiveCopy` mounted with 1 MiB logs and
   `MailboxStore.put_items` of one 8 MiB item at a time (staged across nine generations,
   then committed); MB/s against a raw append of the same bytes to one file, `write` +
   `fsync` per item.  Interleaved rounds (raw, log, raw, log, ...), totals over the rounds,
   after a warm-up past the LLR depth (at most 10); each side starts on a quiet disk (the
   log's background work done: the LLR writes its rolls started, and the spare log files its
   rolls used made again, as a node's active makes them while its log is idle,
   `log_spare_files`, `--spares`; then `sync`), so that neither pays the other's writeback.
   A round rolls 64 generations, as many as the default pool holds: each is written over a
   spare (with `--spares 32`, half of them; a burst longer than the pool goes on in new
   files, at 0 spares' speed).  15 rounds of 8 items
   (`--rounds`): a round's ratio moves between 0.5 and 1.3 on the bench's virtio disk, and
   with 5 rounds a run's ratio moved by 0.1 between identical code (bench/README.md
   large_items run 8).  Every `os.fsync`, `os.fdatasync` and `os.write` of the process, the
   writer's batches and rolls, the store's reads on the event loop and the LLR writes into
   the database file are timed meanwhile (`Timers`): where the log's time goes.  Target
   >= 0.8.
2. Small commits beside large ones.  The same kind of copy; a steady stream of one-item
   commits of 1 KB (open loop, `--rate` a second, each commit's latency counted from the
   moment it was due, so a stalled loop is not hidden), alone and with a writer committing
   8 MiB items back to back beside it, in alternating phases (ABAB), each on a new copy.
   p99 with / p99 alone, pooled over the two phases of each.  The same stages are timed
   (the longest wait of each says what a p99 commit waited for).  Target <= 3x.
3. Shipping + inspection + replay of a 200 MB mailbox of 1-30 MiB items.  In process: a real
   `ActiveInstance` serving its log share over HTTP on loopback, and a real `PassiveCopy`
   (copier, inspector, replayer, block mode, as a node wires them).  The passive is seeded
   and stopped, the mailbox written and the log rolled, then the passive started again and
   timed until it has replayed the last generation.  In process rather than over node
   processes: the clock starts when the passive starts and stops at its own LastLogReplayed
   (not at a status poll), the write (part 1's subject) is not in it, and the baseline runs
   the same way, in one process.  Node processes carry part 4, which ships the same mailbox
   to two passives.  Baseline: the same closed log files pulled over aiohttp on loopback,
   CRC32C'd, written and fsync'd (`bench/baselines.pull_baseline`), then the same bodies
   inserted into SQLite (one row, one transaction per item, WAL, synchronous=FULL).
   Target >= 0.7.
4. `mrs move` of that mailbox from DB1 to DB2, over three `replication-node serve` processes
   and `guarantee-api serve` (`bench/move.py`'s cluster and timings).  Baseline: a plain copy,
   the same items read from DB1's active a page at a time and written to DB2's active, each
   item in its own write as the mover cuts them (larger than half a log file), with no
   guarantee check.  Both are checked against the source's digest.  Each starts once the
   nodes' actives have made their spare log files again after the writes before it (64 each,
   the node's `log_spare_files`; `spares_made`), as part 1's rounds do.  Target >= 0.7.

`--quick`: small items and mailboxes, short phases, to check the script in seconds.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import hashlib
import logging
import os
import platform
import random
import shutil
import sqlite3
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import date, timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import aiohttp  # noqa: E402
from aiohttp import web  # noqa: E402

from bench.baselines import pull_baseline  # noqa: E402
from bench.move import (  # noqa: E402
    ACTIVE,
    SOURCE,
    TARGET,
    databases,
    mrs_json,
    run_move,
    settle,
    step_times,
    wait_healthy,
)
from bench.workdir import add_work_dir, work_dir  # noqa: E402
from dag_common.clock import SystemClock  # noqa: E402
from dag_common.cluster_store.embedded import EmbeddedClusterStore  # noqa: E402
from dag_common.config import Defaults  # noqa: E402
from dag_common.mailbox_digest import MailboxDigest, mailbox_digest  # noqa: E402
from dag_common.model import CopyStatus  # noqa: E402
from dag_common.store_api import ItemIn  # noqa: E402
from replication_node.active import llr_pacing  # noqa: E402
from replication_node.active.copy import ActiveCopy, CopyPaths  # noqa: E402
from replication_node.active.instance import ActiveInstance  # noqa: E402
from replication_node.active.mailbox_store import MailboxStore  # noqa: E402
from replication_node.active.settings import ActiveSettings  # noqa: E402
from replication_node.http.auth import auth_middleware  # noqa: E402
from replication_node.log import logstream, span, writer  # noqa: E402
from replication_node.log.files import write_all  # noqa: E402
from replication_node.log.logdir import list_closed_generations  # noqa: E402
from replication_node.log.logfile import closed_log_name  # noqa: E402
from replication_node.log.spares import SPARE_PREFIX  # noqa: E402
from replication_node.log.writer import OpenLogWriter  # noqa: E402
from replication_node.passive.copy import PassiveCopy  # noqa: E402
from replication_node.passive.settings import PassiveSettings  # noqa: E402
from replication_node.shipping.logshare import add_log_share_routes  # noqa: E402
from replication_node.shipping.logshare_client import HttpLogSource  # noqa: E402
from replication_node.storage import writebehind  # noqa: E402
from replication_node.storage.database import Database  # noqa: E402
from tests.cluster_harness import LocalCluster, wait_until  # noqa: E402
from tests.replication_node.helpers import body_of  # noqa: E402

MIB = 1 << 20
MB = 1e6
LOG_FILE_SIZE = MIB
LLR_DEPTH = 10
# Spare log files each copy keeps (`log_spare_files`, the node's default; `--spares`).
SPARES = Defaults().log_spare_files
DB = "DB1"
MAILBOX = "bench"
TOKEN = "bench-token-0123456789abcdef"


@dataclass(frozen=True)
class Sizes:
    """What one run writes (`--quick` makes it small)."""

    large: int  # part 1 and 2: the large item
    items: int  # part 1: items per round
    rounds: int  # part 1
    phase: float  # part 2: seconds per phase (ABAB)
    rate: float  # part 2: small commits a second
    mailbox: int  # part 3 and 4: body bytes in the mailbox
    item_min: int  # part 3 and 4: item sizes, uniform between these
    item_max: int


FULL = Sizes(8 * MIB, 8, 15, 10.0, 100.0, 200_000_000, 1 * MIB, 30 * MIB)
QUICK = Sizes(2 * MIB, 2, 1, 1.5, 100.0, 12_000_000, 1 * MIB, 3 * MIB)


def text(n: int, seed: int) -> str:
    """`n` characters of text that does not compress to a pattern."""
    return random.Random(seed).randbytes((n + 1) // 2).hex()[:n]


def mailbox_sizes(sizes: Sizes, seed: int = 29) -> list[int]:
    """Item sizes uniform in [item_min, item_max] adding up to `mailbox` bytes (the last one
    cut to fit, and never below item_min)."""
    rng = random.Random(seed)
    out: list[int] = []
    while sum(out) < sizes.mailbox:
        out.append(rng.randint(sizes.item_min, sizes.item_max))
    out[-1] = max(sizes.item_min, out[-1] - (sum(out) - sizes.mailbox))
    return out


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def md(*cells: str) -> None:
    """One row of a Markdown table."""
    print("| " + " | ".join(cells) + " |")


def load() -> str:
    one, five, _ = os.getloadavg()
    return f"load {one:.2f} (1 min), {five:.2f} (5 min)"


class Timers:
    """Counts and times the calls to some functions while active, from any thread: where a
    commit's time goes.  Each target is (owner, attribute name); the wrapper adds about a
    microsecond a call, against calls of a millisecond or more.  Calls made on the log's
    syncer thread (`span.SYNCER_THREAD`: the early fsyncs of a span, beside the writer) are
    also counted under "<label> on the syncer"."""

    def __init__(self, targets: dict[str, tuple[Any, str]]) -> None:
        self.targets = targets
        labels = [*targets, *(f"{label} on the syncer" for label in targets)]
        self.calls = dict.fromkeys(labels, 0)
        self.seconds = dict.fromkeys(labels, 0.0)
        self.longest = dict.fromkeys(labels, 0.0)

    @contextlib.contextmanager
    def timing(self) -> Iterator[None]:
        originals = {label: getattr(owner, name) for label, (owner, name) in self.targets.items()}

        def timed(label: str) -> Any:
            call = originals[label]

            def wrapper(*args: Any, **kwargs: Any) -> Any:
                start = time.perf_counter()
                try:
                    return call(*args, **kwargs)
                finally:
                    took = time.perf_counter() - start
                    labels = [label]
                    if threading.current_thread().name.startswith(span.SYNCER_THREAD):
                        labels.append(f"{label} on the syncer")
                    for counted in labels:
                        self.calls[counted] += 1
                        self.seconds[counted] += took
                        self.longest[counted] = max(self.longest[counted], took)

            return wrapper

        for label, (owner, name) in self.targets.items():
            setattr(owner, name, timed(label))
        try:
            yield
        finally:
            for label, (owner, name) in self.targets.items():
                setattr(owner, name, originals[label])


def syscalls() -> Timers:
    return Timers({"fsync": (os, "fsync"), "write": (os, "write")})


def log_stages() -> Timers:
    """The log's and the store's stages (see part 1's second table)."""
    return Timers(
        {
            "fsync": (os, "fsync"),
            "fdatasync": (os, "fdatasync"),
            "write": (os, "write"),
            "roll": (OpenLogWriter, "roll"),
            "settle": (OpenLogWriter, "_settle"),
            "next file": (writer, "create_hidden"),
            "batch": (OpenLogWriter, "write_batch"),
            "store reads": (ActiveCopy, "mailbox"),
            "folder reads": (ActiveCopy, "folders"),
            "LLR apply": (Database, "apply"),
        }
    )


async def mount(root: Path) -> tuple[ActiveCopy, MailboxStore]:
    copy = await ActiveCopy.mount(
        paths=CopyPaths(root, DB),
        log_file_size=LOG_FILE_SIZE,
        llr_depth=LLR_DEPTH,
        clock=SystemClock(),
        create=True,
    )
    copy.stream.keep_spares(SPARES)  # as a node's active does
    store = MailboxStore(copy)
    await store.create_mailbox(MAILBOX)
    return copy, store


# ---- 1. commits of large items against a raw fsync'd append -------------------------------


def raw_append(path: Path, data: bytes, items: int) -> float:
    """Seconds to append `data` `items` times to one file, write + fsync per item."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        start = time.perf_counter()
        for _ in range(items):
            write_all(fd, data)
            os.fsync(fd)
        return time.perf_counter() - start
    finally:
        os.close(fd)


async def settled(copy: ActiveCopy) -> None:
    """Once the log's background work is done (the LLR writes of the last rolls: the
    database file as far as the LLR depth lets it go; the spare log files the rolls used,
    made again while the log is idle, as a node's are), everything written so far on disk
    (`sync`)."""
    await wait_until(
        "LLR writes",
        lambda: copy.db.header.waypoint >= copy.stream.generation - LLR_DEPTH,
        timeout=120,
        every=0.005,
    )
    pool = copy.stream.spares
    if pool is not None:
        await wait_until("spares", lambda: not pool.short or not pool.room(), timeout=120)
    os.sync()


async def large_commits(base: Path, sizes: Sizes) -> None:
    body = text(sizes.large, seed=1)
    data = body.encode()
    copy, store = await mount(base / "log")
    raw_time = log_time = 0.0
    raw_sys, stages = syscalls(), log_stages()
    ratios: list[float] = []
    n = 0
    try:
        # Not counted: the first file of each, and the log up to its LLR depth (from then on
        # every roll also writes an older generation into the database file).
        raw_append(base / "raw-warm", data, 1)
        while copy.stream.generation <= min(LLR_DEPTH, 10) + 1:
            await store.put_items(MAILBOX, [ItemIn(item_id=f"big{n}", body=body)])
            n += 1
        first_gen = copy.stream.generation
        pool = copy.stream.spares
        taken = pool.taken if pool is not None else 0
        for r in range(sizes.rounds):
            # Each side starts on a quiet disk: neither pays for the other's writeback.
            await settled(copy)
            with raw_sys.timing():
                raw = raw_append(base / f"raw-{r}", data, sizes.items)
            os.sync()
            with stages.timing():
                start = time.perf_counter()
                for _ in range(sizes.items):
                    await store.put_items(MAILBOX, [ItemIn(item_id=f"big{n}", body=body)])
                    n += 1
                log = time.perf_counter() - start
            (base / f"raw-{r}").unlink()
            raw_time, log_time = raw_time + raw, log_time + log
            ratios.append(raw / log)
            print(f"  round {r + 1}: raw {raw:.3f} s, log {log:.3f} s, ratio {raw / log:.2f}")
        generations = copy.stream.generation - first_gen
        taken = pool.taken - taken if pool is not None else 0
        assert body_of(copy, MAILBOX, f"big{n - 1}") == body  # read as a reader sends it
    finally:
        await copy.crash_close()
    total = sizes.items * sizes.rounds
    mb = total * len(data) / MB
    raw_mbps, log_mbps = mb / raw_time, mb / log_time
    print(
        f"\n{total} items of {len(data) / MIB:g} MiB ({sizes.rounds} interleaved rounds of "
        f"{sizes.items}, after a warm-up past the LLR depth); {generations} generations rolled "
        f"({generations / total:.1f} an item), {taken} of them written over spare log files "
        f"(`log_spare_files` {SPARES}, made again while the log is idle between rounds)\n"
    )
    print("| case | MB | seconds | MB/s | vs raw |")
    print("|---|---:|---:|---:|---:|")
    md(
        "raw append, write + fsync per item",
        f"{mb:.1f}",
        f"{raw_time:.2f}",
        f"{raw_mbps:.1f}",
        "1.00",
    )
    md(
        "log: `put_items` of one item, staged + committed",
        f"{mb:.1f}",
        f"{log_time:.2f}",
        f"{log_mbps:.1f}",
        f"{log_mbps / raw_mbps:.2f}",
    )

    def row(what: str, timers: Timers, label: str) -> None:
        calls, seconds = timers.calls[label] / total, timers.seconds[label] / total
        md(what, f"{calls:.1f}", f"{seconds * 1e3:.1f}", f"{timers.longest[label] * 1e3:.1f}")

    print("\n| where an item's time goes | calls an item | ms an item | longest call, ms |")
    print("|---|---:|---:|---:|")
    whole = f"{log_time / total * 1e3:.1f} ({raw_time / total * 1e3:.1f})"
    md("whole commit (raw append: write + fsync)", "1", whole, "")
    row("raw append: fsync", raw_sys, "fsync")
    row("raw append: write", raw_sys, "write")
    row("log writer thread: batches (parts, rolls, fsync)", stages, "batch")
    row("- rolls (CLOSE and the next header written, writeback started)", stages, "roll")
    row("- - of which the next generation's file created", stages, "next file")
    row("- settles (every file of a span fsync'd, renamed, fsync dir)", stages, "settle")
    row("- every fdatasync (the log's files), any thread", stages, "fdatasync")
    row("- - of which early, on the syncer, beside the writer", stages, "fdatasync on the syncer")
    row("- every fsync (the directory)", stages, "fsync")
    row("- every write of the log", stages, "write")
    row("event loop: mailbox reads (wait on the database lock)", stages, "store reads")
    row("event loop: folder reads (the same)", stages, "folder reads")
    row("LLR thread: transactions into the database file (beside)", stages, "LLR apply")
    own_fsyncs = (
        stages.seconds["fsync"]
        + stages.seconds["fdatasync"]
        - stages.seconds["fdatasync on the syncer"]
    )
    floor = (own_fsyncs + stages.seconds["write"]) / total
    print(
        f"\nlarge commits / raw fsync'd append: {log_mbps / raw_mbps:.2f} (rounds "
        f"{min(ratios):.2f}-{max(ratios):.2f}; target >= 0.8).  Were the log to spend nothing "
        f"but the fsyncs and writes of its writer thread ({floor * 1e3:.1f} ms an item; the "
        f"syncer's beside them), at most "
        f"{raw_time / total / floor:.2f}.  STAGE_SLICE_IDLE {logstream.STAGE_SLICE_IDLE >> 10} "
        f"KiB, STAGE_SLICE_BUSY {logstream.STAGE_SLICE_BUSY >> 10} KiB; {load()}\n"
    )


# ---- 2. small commits beside large ones ----------------------------------------------------


async def small_beside_large(base: Path, sizes: Sizes) -> None:
    small = text(1000, seed=2)
    large = text(sizes.large, seed=3)
    n = 0
    phases: list[tuple[str, list[float], float, Timers]] = []
    store: MailboxStore

    async def one(due: float, out: list[float]) -> None:
        nonlocal n
        n += 1
        await store.put_items(MAILBOX, [ItemIn(item_id=f"s{n}", body=small)])
        out.append(time.perf_counter() - due)

    async def stream(seconds: float, out: list[float]) -> None:
        """Commits at `rate` a second, each started when due (open loop)."""
        interval = 1 / sizes.rate
        start = due = time.perf_counter()
        tasks = []
        while due < start + seconds:
            await asyncio.sleep(max(0.0, due - time.perf_counter()))
            tasks.append(asyncio.create_task(one(due, out)))
            due += interval
        await asyncio.gather(*tasks)

    async def large_writer(stop: asyncio.Event) -> int:
        written = 0
        while not stop.is_set():
            await store.put_items(MAILBOX, [ItemIn(item_id=f"big{written}", body=large)])
            written += 1
        return written

    for i, label in enumerate(("alone", "with large", "alone", "with large")):
        # A new copy each phase: none inherits the LLR writes another left behind.
        copy, store = await mount(base / f"phase-{i}")
        os.sync()
        stages = log_stages()
        try:
            out: list[float] = []
            start = time.perf_counter()
            with stages.timing():
                if label == "alone":
                    await stream(sizes.phase, out)
                    large_mb = 0.0
                else:
                    stop = asyncio.Event()
                    writer = asyncio.create_task(large_writer(stop))
                    await stream(sizes.phase, out)
                    stop.set()
                    large_mb = await writer * len(large) / MB
            phases.append((label, out, large_mb / (time.perf_counter() - start), stages))
        finally:
            await copy.crash_close()
        shutil.rmtree(base / f"phase-{i}")
    print(
        f"small commits: one item of {len(small)} B, {sizes.rate:g} a second (open loop: latency "
        f"from when each was due), {sizes.phase:g} s a phase; large: {len(large) / MIB:g} MiB "
        f"items back to back, one writer\n"
    )
    print(
        "| phase | small commits | p50 ms | p99 ms | max ms | large items MB/s | event loop "
        "waiting on store reads, s (longest ms) | writer batches, longest ms | rolls, longest ms "
        "| LLR writes, s (longest ms) |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for label, out, large_mbps, t in phases:
        reads = t.seconds["store reads"] + t.seconds["folder reads"]
        longest_read = max(t.longest["store reads"], t.longest["folder reads"])
        print(
            f"| {label} | {len(out)} | {percentile(out, 0.5) * 1e3:.2f} | "
            f"{percentile(out, 0.99) * 1e3:.2f} | {max(out) * 1e3:.2f} | {large_mbps:.1f} | "
            f"{reads:.2f} ({longest_read * 1e3:.0f}) | {t.longest['batch'] * 1e3:.0f} | "
            f"{t.longest['roll'] * 1e3:.0f} | {t.seconds['LLR apply']:.2f} "
            f"({t.longest['LLR apply'] * 1e3:.0f}) |"
        )
    alone = [x for label, out, _, _ in phases if label == "alone" for x in out]
    beside = [x for label, out, _, _ in phases if label != "alone" for x in out]
    p_alone, p_beside = percentile(alone, 0.99), percentile(beside, 0.99)
    print(
        f"\np99 of small commits beside large ones / alone: {p_beside * 1e3:.2f} / "
        f"{p_alone * 1e3:.2f} ms = {p_beside / p_alone:.2f}x (target <= 3x); p50 "
        f"{percentile(beside, 0.5) * 1e3:.2f} / {percentile(alone, 0.5) * 1e3:.2f} ms; {load()}\n"
    )


# ---- 3. shipping + inspection + replay, in process -----------------------------------------


def insert_baseline(path: Path, bodies: list[str]) -> float:
    """Seconds to insert each body as one row, one transaction per item (WAL, FULL)."""
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=FULL")
        conn.execute(
            "CREATE TABLE items(mailbox TEXT, item_id TEXT, body TEXT, size INTEGER,"
            " PRIMARY KEY (mailbox, item_id))"
        )
        start = time.perf_counter()
        for i, body in enumerate(bodies):
            conn.execute("BEGIN")
            row = (MAILBOX, f"i{i}", body, len(body))
            conn.execute("INSERT INTO items VALUES (?, ?, ?, ?)", row)
            conn.execute("COMMIT")
        return time.perf_counter() - start
    finally:
        conn.close()


def body_digest(bodies: list[str]) -> str:
    h = hashlib.sha256()
    for body in bodies:
        h.update(body.encode())
    return h.hexdigest()


async def replication(base: Path, sizes: Sizes) -> None:
    clock = SystemClock()
    store = EmbeddedClusterStore(base / "cluster.db")
    record = await store.set_active(DB, "a", expected_epoch=0, start_generation=1)
    assert record is not None
    active = ActiveInstance(
        settings=ActiveSettings(
            database=DB,
            node="a",
            site="local",
            activation_preference=1,
            epoch=record.epoch,
            log_file_size=LOG_FILE_SIZE,
            llr_depth=LLR_DEPTH,
            roll_interval=timedelta(hours=1),
            spare_log_files=SPARES,
        ),
        paths=CopyPaths(base / "active", DB),
        clock=clock,
        cluster_store=store,
        peer_progress=None,  # nothing is truncated under the passive
    )
    await active.start()
    assert active.copy is not None and active.store is not None
    # The passive is stopped once mid-stream: the share's notification stream then writes to
    # a closed connection, and aiohttp logs the traceback.  Nothing to see for the bench.
    logging.getLogger("aiohttp.server").setLevel(logging.CRITICAL)
    app = web.Application(middlewares=[auth_middleware(TOKEN)])
    add_log_share_routes(app, lookup=lambda db: active.share if db == DB else None)
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=1.0)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    session = aiohttp.ClientSession()
    source = HttpLogSource(f"http://127.0.0.1:{port}", DB, session=session, token=TOKEN)
    passive = PassiveCopy(
        settings=PassiveSettings(database=DB, node="p", site="local", activation_preference=2),
        paths=CopyPaths(base / "passive", DB),
        source=source,
        clock=clock,
        retry_interval=0.05,
        failed_retry=0.05,
    )
    item_sizes = mailbox_sizes(sizes)
    bodies = [text(n, seed=100 + i) for i, n in enumerate(item_sizes)]
    total = sum(item_sizes)
    try:
        await passive.start()  # seeded now, at waypoint 0, then stopped while the log grows
        await wait_until(
            "passive seeded",
            lambda: passive.status().status is CopyStatus.HEALTHY,
            timeout=120,
            every=0.005,
        )
        await passive.stop()
        await active.store.create_mailbox(MAILBOX)
        start = time.perf_counter()
        for i, body in enumerate(bodies):
            await active.store.put_items(MAILBOX, [ItemIn(item_id=f"i{i}", body=body)])
        last = await active.copy.roll(force=True)
        write_time = time.perf_counter() - start
        assert last is not None
        logs = active.paths.logs
        files = [logs / closed_log_name(g) for g in list_closed_generations(logs)]
        log_bytes = sum(f.stat().st_size for f in files)
        # The passive starts on a quiet disk, as the baseline does: the active's LLR (which
        # holds back while bodies are staged, and catches up after) would otherwise write
        # into its database file beside the passive, on the same disk here, on another
        # node in a real cluster.
        await settled(active.copy)

        start = time.perf_counter()
        await passive.start()
        await wait_until(
            "passive inspected",
            lambda: passive.markers.last_log_inspected >= last,
            timeout=1800,
            every=0.005,
        )
        inspect_time = time.perf_counter() - start
        await wait_until(
            "passive replayed",
            lambda: passive.markers.last_log_replayed >= last,
            timeout=1800,
            every=0.005,
        )
        replay_time = time.perf_counter() - start
        status = passive.status()
        assert status.status is CopyStatus.HEALTHY, status
        reader = passive.reader()
        replayed = {i.item_id: i.body for i in reader.items(MAILBOX)}
        assert body_digest([replayed[f"i{i}"] for i in range(len(bodies))]) == body_digest(
            bodies
        ), "the passive's bodies differ from the active's"
        await passive.stop()

        pull_mbps, _ = await pull_baseline(files, base / "pull-baseline")
        pull_time = log_bytes / MB / pull_mbps
        insert_time = insert_baseline(base / "insert-baseline.sqlite", bodies)
    finally:
        await passive.stop()
        await session.close()
        await runner.cleanup()
        await active.stop()
        store.close()
    base_time = pull_time + insert_time
    ratio = (total / replay_time) / (total / base_time)
    print(
        f"mailbox: {len(bodies)} items of {min(item_sizes) / MIB:.1f}-{max(item_sizes) / MIB:.1f} "
        f"MiB, {total / MB:.1f} MB of bodies; {len(files)} closed generations, "
        f"{log_bytes / MB:.1f} MB of log; written on the active in {write_time:.2f} s "
        f"({total / MB / write_time:.1f} MB/s)\n"
    )
    print("| case | seconds | MB/s of bodies |")
    print("|---|---:|---:|")
    for what, seconds in (
        ("passive: copy + inspect + replay (start to LastLogReplayed)", replay_time),
        ("- of which: start to LastLogInspected (replay runs beside it)", inspect_time),
        ("baseline: pull over aiohttp + CRC32C + fsync, each file", pull_time),
        ("baseline: SQLite insert, a row and a transaction per item", insert_time),
        ("baseline: both", base_time),
    ):
        md(what, f"{seconds:.2f}", f"{total / MB / seconds:.1f}")
    print(
        f"\nship + inspect + replay / pull + CRC32C + SQLite insert: {ratio:.2f} "
        f"(target >= 0.7); {load()}\n"
    )


# ---- 4. mrs move against a plain copy, over node processes ---------------------------------


COPY_MAILBOX = "alice-copy"
MOVED = "alice"


async def fill(cluster: LocalCluster, bodies: list[str]) -> None:
    prefix = f"/v1/databases/{SOURCE}/mailboxes/{MOVED}"
    await cluster.ok("PUT", ACTIVE[SOURCE], prefix, json={"display_name": "Alice"})
    for i, body in enumerate(bodies):
        item = {"item_id": f"m{i:04d}", "subject": f"attachment {i}", "body": body}
        await cluster.ok("POST", ACTIVE[SOURCE], f"{prefix}/items", json=item)
    await settle(cluster, SOURCE)


async def plain_copy(cluster: LocalCluster, page: int = 2) -> tuple[float, int, int]:
    """DB1's alice read a page of `page` changes at a time and written to DB2's active as
    alice-copy, one item a write (each is over half a log file, as the mover cuts them);
    (seconds, items, body bytes)."""
    start = time.perf_counter()
    prefix = f"/v1/databases/{TARGET}/mailboxes/{COPY_MAILBOX}"
    await cluster.ok("PUT", ACTIVE[TARGET], prefix, json={"display_name": "Alice"})
    since, items, nbytes = 0, 0, 0
    while True:
        body = await cluster.ok(
            "GET",
            ACTIVE[SOURCE],
            f"/v1/databases/{SOURCE}/mailboxes/{MOVED}/items",
            params={"since_change": str(since), "limit": str(page)},
        )
        for item in body["items"]:
            if item["deleted"]:
                continue
            entry = {k: item[k] for k in ("item_id", "folder", "subject", "body")}
            await cluster.ok("POST", ACTIVE[TARGET], f"{prefix}/items", json=entry)
            items, nbytes = items + 1, nbytes + len(item["body"].encode())
        since = body["last_change_number"]
        if not body["more"]:
            break
    return time.perf_counter() - start, items, nbytes


async def spares_made(base: Path) -> None:
    """Until the actives' spare log files are made again after a phase's writes (as many as
    a node keeps, `log_spare_files`; or none made for 2 s: the disk has not the room), as
    the nodes make them once their logs are idle: each measured phase of part 4 starts on a
    quiet disk, as part 1's rounds do, and neither pays for the other's spares."""

    def count() -> int:
        return sum(
            len(list((base / node / db / "logs").glob(f"{SPARE_PREFIX}*")))
            for db, node in ACTIVE.items()
        )

    full = Defaults().log_spare_files * len(ACTIVE)
    last, since = -1, time.monotonic()
    while (n := count()) < full:
        if n != last:
            last, since = n, time.monotonic()
        elif time.monotonic() - since > 2:
            return
        await asyncio.sleep(0.1)


def live_digest(items: dict[str, dict[str, Any]]) -> MailboxDigest:
    """The project's mailbox digest of `items`, named as the moved mailbox whatever mailbox
    they were read from: the plain copy's mailbox compares with the source's."""
    return mailbox_digest(MOVED, items.values())


async def move(base: Path, sizes: Sizes) -> None:
    cluster = LocalCluster(
        base,
        nodes=[("mbx1", "redmond"), ("mbx2", "redmond"), ("mbx3", "dublin")],
        databases=databases(),
        defaults={"log_file_size": "1MiB", "llr_depth": LLR_DEPTH},
    )
    cluster.config["guarantee_api"]["poll_interval"] = "1s"
    cluster.write_config()
    timings = ["--health-check-interval", "10s", "--stall-retry-interval", "30s"]
    timings += ["--flush-retry-interval", "1s"]
    item_sizes = mailbox_sizes(sizes)
    bodies = [text(n, seed=200 + i) for i, n in enumerate(item_sizes)]
    total = sum(item_sizes)
    api = None
    try:
        await cluster.start()
        api = await cluster.start_guarantee_api()
        await wait_healthy(cluster)
        start = time.perf_counter()
        await fill(cluster, bodies)
        fill_time = time.perf_counter() - start
        source = live_digest(await cluster.items(ACTIVE[SOURCE], SOURCE, MOVED))
        assert source.item_count == len(bodies), source

        await spares_made(base)
        copy_time, copy_items, copy_bytes = await plain_copy(cluster)
        start = time.perf_counter()
        await settle(cluster, TARGET)
        copy_settle = copy_time + time.perf_counter() - start
        copied = live_digest(await cluster.items(ACTIVE[TARGET], TARGET, COPY_MAILBOX))
        assert copied.matches(source), "the plain copy differs from the source"
        assert copy_bytes == total, (copy_bytes, total)

        await spares_made(base)
        run = await run_move(cluster, timings, 1800, mailbox=MOVED)
        if run.returncode != 0:
            output = "\n".join(line for _, line in run.lines)
            raise RuntimeError(f"mrs move exited {run.returncode}:\n{output}\n{run.stderr}")
        (moved_record,) = await mrs_json(cluster, "list")
        stats = await mrs_json(cluster, "stats", moved_record["id"])
        assert stats["state"] == "Completed", stats
        moved = live_digest(await cluster.items(ACTIVE[TARGET], TARGET, MOVED))
        assert moved.matches(source), "the moved mailbox differs from the source"
    except BaseException:
        for name in (*cluster.ports, "guarantee"):
            path = base / f"{name}.log"
            if path.exists():
                tail = path.read_text(errors="replace")[-3000:]
                print(f"--- {name} log (tail) ---\n{tail}", file=sys.stderr)
        raise
    finally:
        if api is not None:
            api.terminate()
            api.wait(timeout=20)
        await cluster.close()

    move_mbps, copy_mbps = total / MB / run.seconds, total / MB / copy_time
    print(
        f"mailbox: {len(bodies)} items of {min(item_sizes) / MIB:.1f}-{max(item_sizes) / MIB:.1f} "
        f"MiB, {total / MB:.1f} MB of bodies, filled in {fill_time:.1f} s (one POST an item, "
        f"replayed on both passives); 3 node processes, DB1 mbx1 > mbx2 > mbx3, DB2 mbx2 > mbx3 "
        f"> mbx1 (SecondCopy), block mode; API polls every 1s; mrs flush retry 1s\n"
    )
    print("| run | items | MB | seconds | MB/s |")
    print("|---|---:|---:|---:|---:|")
    for what, items, nbytes, seconds in (
        (
            "mrs move (10 steps, guarantee-gated, process start to exit)",
            stats["items_copied"],
            stats["bytes_copied"],
            run.seconds,
        ),
        ("plain copy (paged GET, a POST an item, no checks)", copy_items, copy_bytes, copy_time),
        ("plain copy, then replayed on DB2's two passives", copy_items, copy_bytes, copy_settle),
    ):
        md(what, str(items), f"{nbytes / MB:.1f}", f"{seconds:.2f}", f"{nbytes / MB / seconds:.1f}")
    print("\n| step | seconds | share of the move |")
    print("|---|---:|---:|")
    for label, begin, end in step_times(run):
        seconds = (end - begin).total_seconds()
        print(f"| {label} | {seconds:.2f} | {seconds / run.seconds:.0%} |")
    print(
        f"\nmrs move / plain copy: {move_mbps / copy_mbps:.2f} (target >= 0.7); against the "
        f"plain copy replayed on both passives: {(total / run.seconds) / (total / copy_settle):.2f}"
        f"; {load()}\n"
    )


def reads_from_memory() -> None:
    """What if the active's mailbox and folder reads never waited on the database lock (a
    what-if for parts 1 and 2, where the mailbox and its folders do not change): each
    copy answers them from memory after its first read."""
    mailbox, folders = ActiveCopy.mailbox, ActiveCopy.folders
    known: dict[tuple[int, str, str], Any] = {}

    def remembered(kind: str, read: Any) -> Any:
        def answer(self: ActiveCopy, name: str) -> Any:
            key = (id(self), kind, name)
            if not known.get(key):
                known[key] = read(self, name)
            return known[key]

        return answer

    ActiveCopy.mailbox = remembered("mailbox", mailbox)  # type: ignore[method-assign]
    ActiveCopy.folders = remembered("folders", folders)  # type: ignore[method-assign]


# ---- main ----------------------------------------------------------------------------------


PARTS = {
    "1": ("commits of large items", large_commits),
    "2": ("small commits beside large ones", small_beside_large),
    "3": ("shipping + inspection + replay", replication),
    "4": ("mrs move", move),
}


def main() -> None:
    global LLR_DEPTH, SPARES
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, in seconds")
    parser.add_argument("--parts", default="1,2,3,4", help="which parts, e.g. 1,2")
    add_work_dir(parser, "var/bench-large-items")
    parser.add_argument("--rate", type=float, default=None, help="part 2: small commits a second")
    parser.add_argument(
        "--rounds", type=int, default=None, help=f"part 1: interleaved rounds ({FULL.rounds})"
    )
    what_if = parser.add_argument_group("what if (not the product as it is: say so with a figure)")
    what_if.add_argument("--idle-slice", type=int, metavar="KIB", help="STAGE_SLICE_IDLE")
    what_if.add_argument("--busy-slice", type=int, metavar="KIB", help="STAGE_SLICE_BUSY")
    what_if.add_argument(
        "--llr-pause", type=float, metavar="MS", help="llr_pacing.PAUSE (0: no pause)"
    )
    what_if.add_argument("--llr-chunk", type=int, metavar="KIB", help="writebehind.CHUNK")
    what_if.add_argument(
        "--spares",
        type=int,
        metavar="N",
        help=f"log_spare_files of the copies in process, parts 1-3 (default {SPARES}, the "
        "node's; 0: every generation in a new file, as before run 10)",
    )
    what_if.add_argument(
        "--llr-paced-chunk", type=int, metavar="KIB", help="llr_pacing.PACED_CHUNK"
    )
    what_if.add_argument(
        "--llr-max-backlog",
        type=int,
        metavar="N",
        help=f"llr_pacing.MAX_BACKLOG (default {llr_pacing.MAX_BACKLOG}): generations behind "
        "past which LLR no longer pauses beside small commits",
    )
    what_if.add_argument(
        "--reads-from-memory",
        action="store_true",
        help="the active's mailbox and folder reads answered from memory after the first: "
        "reads on the event loop that never wait on the database lock during LLR writes",
    )
    what_if.add_argument(
        "--llr-depth",
        type=int,
        metavar="N",
        help=f"LLR depth (default {LLR_DEPTH}); part 1 with a depth past its rounds' "
        "generations (e.g. 1000) is the log's commits with no LLR write beside them",
    )
    what_if.add_argument(
        "--span-limit",
        type=int,
        metavar="N",
        help=f"writer.SPAN_LIMIT (default {writer.SPAN_LIMIT}): generations of staged parts "
        "left unsettled at most (1: every roll settled at its batch's end)",
    )
    what_if.add_argument(
        "--llr-yield",
        type=int,
        metavar="N",
        help=f"llr_pacing.YIELD_BACKLOG (default {llr_pacing.YIELD_BACKLOG}): generations "
        "LLR may fall behind while it yields to a large body being staged (0: no yield)",
    )
    args = parser.parse_args()
    if args.spares is not None:
        SPARES = args.spares
    if args.llr_yield is not None:
        llr_pacing.YIELD_BACKLOG = args.llr_yield
    if args.span_limit is not None:
        writer.SPAN_LIMIT = args.span_limit
    if args.llr_depth is not None:
        LLR_DEPTH = args.llr_depth
    if args.idle_slice is not None:
        logstream.STAGE_SLICE_IDLE = args.idle_slice * 1024
    if args.busy_slice is not None:
        logstream.STAGE_SLICE_BUSY = args.busy_slice * 1024
    if args.reads_from_memory:
        reads_from_memory()
    if args.llr_pause is not None:
        llr_pacing.PAUSE = args.llr_pause / 1000
    if args.llr_chunk is not None:
        writebehind.CHUNK = args.llr_chunk * 1024
    if args.llr_paced_chunk is not None:
        llr_pacing.PACED_CHUNK = args.llr_paced_chunk * 1024
    if args.llr_max_backlog is not None:
        llr_pacing.MAX_BACKLOG = args.llr_max_backlog
    sizes = QUICK if args.quick else FULL
    if args.rate is not None:
        sizes = dataclasses.replace(sizes, rate=args.rate)
    if args.rounds is not None:
        if args.rounds < 1:
            parser.error("--rounds must be 1 or more")
        sizes = dataclasses.replace(sizes, rounds=args.rounds)
    print(
        f"{date.today().isoformat()} - nproc {os.cpu_count()}, {platform.platform()}, Python "
        f"{platform.python_version()}; {'--quick' if args.quick else 'full sizes'}; "
        f"STAGE_SLICE_IDLE {logstream.STAGE_SLICE_IDLE >> 10} KiB, STAGE_SLICE_BUSY "
        f"{logstream.STAGE_SLICE_BUSY >> 10} KiB; LLR write-behind chunk "
        f"{writebehind.CHUNK >> 10} KiB ({llr_pacing.PACED_CHUNK >> 10} KiB after a pause), "
        f"pause {llr_pacing.PAUSE * 1e3:g} ms up to "
        f"{llr_pacing.MAX_BACKLOG} generations behind, yield to staging "
        f"up to {llr_pacing.YIELD_BACKLOG} generations behind; span limit {writer.SPAN_LIMIT}"
        f"{'; WHAT IF: reads from memory' if args.reads_from_memory else ''}"
        f"{f'; WHAT IF: LLR depth {LLR_DEPTH}' if args.llr_depth is not None else ''}; {load()}\n"
    )
    with work_dir(args) as base:
        for part in args.parts.split(","):
            title, run = PARTS[part.strip()]
            print(f"## {part}. {title}\n")
            start = time.perf_counter()
            asyncio.run(run(base / f"part{part}", sizes))
            print(f"(part {part}: {time.perf_counter() - start:.1f} s)\n")


if __name__ == "__main__":
    main()
