"""How long a database is without an active that takes writes, after a switchover, after its
active's node dies or hangs, and after a partition; and what the lease check costs a commit
(issue 12).

    .venv/bin/python bench/failover.py [--runs 20]
                                       [--events switchover,switchover-load,kill,stop,partition]
                                       [--commits 2000] [--dir var/bench-failover] [--keep]

Clusters: the harness's three nodes (mbx1 and mbx2 in redmond, mbx3 in dublin), DB1 active on
mbx1 with passive copies on mbx2 and mbx3, `failover_after` 4 s (as a new user would set it),
the default lease TTL and log size.  switchover, kill and stop run `replication-node serve`
processes on loopback over the embedded cluster store; partition runs them and a one-member
etcd each in its own network namespace on a bridge (tests/netns.py; root only).  Each run's
cluster is in its own directory under `--dir`; `--dir` is wiped at the start and removed at the
end unless `--keep` (`bench/workdir.py`: one run at a time in it).

Each run starts a fresh cluster, writes 200 items and waits until both copies replayed them,
then at time 0:

- `switchover`: asks mbx2's node to take the role (`POST .../switchover`);
- `kill`: SIGKILL of mbx1 (its port refuses);
- `stop`: SIGSTOP of mbx1, as a long GC pause or a hung disk (its port accepts, nothing
  answers); let go (SIGCONT) after the run;
- `partition`: iptables in mbx1's namespace drop everything to and from mbx2, mbx3 and etcd,
  while this process still reaches it; a writer keeps writing to mbx1 meanwhile, and the
  run counts any write mbx1 acknowledged after the new active took one (must be 0).

The time is until a write to DB1 is acknowledged by another copy (tried on mbx2 and mbx3
every 50 ms).  p50 and p99 over the runs (p99 of 20 runs by linear interpolation: between
the slowest two).

`switchover-load` (issue 28): one cluster, 16 writers writing into DB1 (each one item of
2 KB at a time, following the active on a 409), and 20 switchovers of DB1 one after the
other round its three copies (`POST .../switchover` to the target, each once its copy is
Healthy).  Per switchover: the call's time (quiesce, the target's replay, the new epoch,
the answer), the time without writes (the writers' first refusal to their first
acknowledgement by the new active), the writes refused meanwhile (409s, asked again), and
whether it succeeded on the first try (a failed one counts, and the run goes on).  Compare
with `switchover` (the same call on an idle cluster) in the same run.

`commit`: p50/p99 latency of single-item commits to a mounted active in this process (real
files, fsync), with the lease check (a LeaseKeeper over the embedded store, as a node runs)
and without (none), alternating in blocks of 100 in the same run.
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
import tempfile
import time
from datetime import date
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.workdir import add_work_dir, work_dir  # noqa: E402
from dag_common.store_api import ItemIn  # noqa: E402
from tests.cluster_harness import THREE_NODES, LocalCluster, wait_until  # noqa: E402
from tests.replication_node.e2e import converged, databases, write  # noqa: E402

FAILOVER_AFTER = "4s"
DEFAULTS: dict[str, str] = {"failover_after": FAILOVER_AFTER, "log_file_size": "1MiB"}
ITEMS = "/v1/databases/DB1/mailboxes/m/items"


async def new_active_takes_a_write(cluster: LocalCluster, tag: str) -> None:
    async def taken() -> bool:
        for node in ("mbx2", "mbx3"):
            status, _ = await cluster.call("POST", node, ITEMS, json={"item_id": tag, "body": "x"})
            if status < 300:
                return True
        return False

    await wait_until(
        "a write acknowledged by a new active", taken, timeout=300, every=0.05,
        tolerate=(OSError,),
    )  # fmt: skip


async def prepare(cluster: LocalCluster) -> None:
    await cluster.start()
    await cluster.wait_status("mbx1", "DB1", "Mounted")
    await cluster.ok("PUT", "mbx1", "/v1/databases/DB1/mailboxes/m")
    await write(cluster, "mbx1", "DB1", "m", 0, 200)
    await converged(cluster, "DB1", "mbx1", ["mbx2", "mbx3"])


async def loopback_run(root: Path, event: str) -> tuple[float, str]:
    shutil.rmtree(root, ignore_errors=True)
    cluster = LocalCluster(root, nodes=THREE_NODES, databases=databases(), defaults=DEFAULTS)
    frozen = None
    try:
        await prepare(cluster)
        started = time.monotonic()
        if event == "switchover":
            await cluster.ok(
                "POST", "mbx2", "/v1/databases/DB1/switchover", json={"target": "mbx2"}
            )
        elif event == "kill":
            cluster.kill("mbx1")
        else:
            frozen = cluster.procs["mbx1"]
            frozen.send_signal(signal.SIGSTOP)
        await new_active_takes_a_write(cluster, f"after-{event}")
        return time.monotonic() - started, ""
    finally:
        if frozen is not None:
            frozen.send_signal(signal.SIGCONT)
        await cluster.close()


async def switchovers_under_load(root: Path, runs: int) -> list[tuple[float, float, int, bool]]:
    """(call seconds, seconds without writes, writes refused, succeeded) per switchover."""
    from tests.resilience.workload import Writer

    shutil.rmtree(root, ignore_errors=True)
    cluster = LocalCluster(root, nodes=THREE_NODES, databases=databases(), defaults=DEFAULTS)
    nodes = ["mbx1", "mbx2", "mbx3"]
    writers = [Writer(cluster, "DB1", "m", nodes, "mbx1", prefix=f"w{n}-", body=2000)
               for n in range(16)]  # fmt: skip
    tasks: list[asyncio.Task[None]] = []
    out = []
    try:
        await prepare(cluster)
        tasks = [asyncio.create_task(w.run()) for w in writers]
        await wait_until("the writers write", lambda: all(w.acked() for w in writers), timeout=60)
        for i in range(runs):
            target = nodes[(i + 1) % 3]
            await cluster.wait_status(target, "DB1", "Healthy")
            started = time.monotonic()
            code, body = await cluster.call(
                "POST", target, "/v1/databases/DB1/switchover", json={"target": target}
            )
            took = time.monotonic() - started
            if code != 200:
                print(f"switchover-load {i + 1}: HTTP {code}: {body}", flush=True)
            # the writes go on on the new active (on the old one if the switchover failed)
            taker = target if code == 200 else None
            await wait_until(
                "a write acknowledged by the active",
                lambda t=taker, s=started: any(
                    a.acked and a.sent >= s and t in (None, a.node)
                    for w in writers
                    for a in w.answers
                ),
                timeout=120,
            )
            answers = [a for w in writers for a in w.answers if a.sent >= started]
            refused = [a for a in answers if not a.acked]
            first_refused = min((a.sent for a in refused), default=started)
            first_new = min(a.answered for a in answers if a.acked and taker in (None, a.node))
            out.append((took, max(0.0, first_new - first_refused), len(refused), code == 200))
            print(
                f"switchover-load {i + 1} to {target}: {took:.2f}s, "
                f"{first_new - first_refused:.2f}s without writes, {len(refused)} refused",
                flush=True,
            )
    finally:
        for w in writers:
            w.stopped = True
        await asyncio.gather(*tasks)
        await cluster.close()
    return out


async def partition_run(root: Path) -> tuple[float, str]:
    from tests.netns import cluster_in_namespaces

    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    acked_by_old: list[tuple[float, float]] = []  # (sent, answered) of mbx1's acks
    stop_writing = asyncio.Event()
    async with cluster_in_namespaces(
        root, nodes=THREE_NODES, databases=databases(), defaults=DEFAULTS
    ) as (lab, cluster):
        await prepare(cluster)

        async def keep_writing_to_mbx1() -> None:
            i = 0
            while not stop_writing.is_set():
                sent = time.monotonic()
                try:
                    code, _ = await cluster.call("POST", "mbx1", ITEMS, json={"item_id": f"o{i}"})
                except (OSError, TimeoutError):
                    code = 0
                if 0 < code < 300:
                    acked_by_old.append((sent, time.monotonic()))
                i += 1
                await asyncio.sleep(0.01)

        writer = asyncio.create_task(keep_writing_to_mbx1())
        try:
            await wait_until("mbx1 acknowledges", lambda: len(acked_by_old) >= 10, timeout=60)
            started = time.monotonic()
            lab.cut("mbx1", "mbx2", "mbx3", "etcd")
            await new_active_takes_a_write(cluster, "after-partition")
            taken = time.monotonic()
        finally:
            stop_writing.set()
            await writer
        overlap = sum(1 for _, answered in acked_by_old if answered > taken)
        last = max(answered for _, answered in acked_by_old) - started
        return taken - started, (
            f" (mbx1's last ack {last:.2f}s after the cut; {overlap} after the new)"
        )


async def commit_latencies(commits: int) -> dict[str, list[float]]:
    """Per-commit latency with and without the lease check: two actives side by side in
    this process, one mounted as a node mounts it (a LeaseKeeper over the embedded store,
    the fence after each fsync), one with no lease; blocks of 100 commits, alternating."""
    from datetime import timedelta

    from dag_common.clock import SystemClock
    from dag_common.cluster_store.embedded import EmbeddedClusterStore
    from replication_node.active.copy import ActiveCopy, CopyPaths
    from replication_node.active.instance import ActiveInstance
    from replication_node.active.mailbox_store import MailboxStore
    from replication_node.active.settings import ActiveSettings

    with tempfile.TemporaryDirectory(dir=ROOT / "var") as tmp:
        store = EmbeddedClusterStore(Path(tmp) / "cluster.db")
        await store.set_active("DB1", "a", expected_epoch=0, start_generation=1)
        leased = ActiveInstance(
            settings=ActiveSettings(
                database="DB1",
                node="a",
                site="s",
                activation_preference=1,
                epoch=1,
                log_file_size=1024 * 1024,
                llr_depth=10,
                roll_interval=timedelta(hours=1),
            ),
            paths=CopyPaths(Path(tmp) / "DB1", "DB1"),
            clock=SystemClock(),
            cluster_store=store,
        )
        await leased.start()
        assert leased.store is not None
        bare = await ActiveCopy.mount(
            paths=CopyPaths(Path(tmp) / "DB2", "DB2"),
            log_file_size=1024 * 1024,
            llr_depth=10,
            clock=SystemClock(),
            create=True,
            epoch=1,
        )
        stores = {"with lease": leased.store, "without": MailboxStore(bare)}
        out: dict[str, list[float]] = {kind: [] for kind in stores}
        for mailboxes in stores.values():
            await mailboxes.create_mailbox("m")
        for block in range(commits // 100):
            kind = "with lease" if block % 2 == 0 else "without"
            for i in range(100):
                started = time.perf_counter()
                await stores[kind].put_items("m", [ItemIn(item_id=f"{block}-{i}", body="x")])
                out[kind].append(time.perf_counter() - started)
        await leased.stop()
        await bare.dismount()
        store.close()
    return out


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    if len(ordered) == 1:
        return ordered[0]
    pos = q * (len(ordered) - 1)
    low = int(pos)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (pos - low)


async def main_async(args: argparse.Namespace, base: Path) -> int:
    print(f"# bench/failover.py, {date.today()}, {platform.node()}, {os.cpu_count()} cores")
    print(f"# failover_after {args.failover_after}, {args.runs} runs per event")
    for event in args.events.split(","):
        if event == "commit":
            for kind, values in (await commit_latencies(args.commits)).items():
                ms = [v * 1000 for v in values]
                print(
                    f"commit {kind}: p50 {percentile(ms, 0.5):.3f}ms "
                    f"p99 {percentile(ms, 0.99):.3f}ms over {len(ms)} commits",
                    flush=True,
                )
            continue
        if event == "switchover-load":
            runs = await switchovers_under_load(base / event, args.runs)
            for name, values, unit in (
                ("call", [r[0] for r in runs], "s"),
                ("without writes", [r[1] for r in runs], "s"),
                ("refused", [float(r[2]) for r in runs], " writes"),
            ):
                print(
                    f"switchover-load {name}: p50 {percentile(values, 0.5):.2f}{unit} "
                    f"p99 {percentile(values, 0.99):.2f}{unit} max {max(values):.2f}{unit}",
                    flush=True,
                )
            ok = sum(1 for r in runs if r[3])
            print(f"switchover-load: {ok} of {len(runs)} succeeded on the first try", flush=True)
            continue
        times = []
        for i in range(args.runs):
            where = base / f"{event}-{i}"
            if event == "partition":
                seconds, said = await partition_run(where)
            else:
                seconds, said = await loopback_run(where, event)
            times.append(seconds)
            print(f"{event} run {i + 1}: {seconds:.2f}s{said}", flush=True)
        print(
            f"{event}: p50 {percentile(times, 0.5):.2f}s p99 {percentile(times, 0.99):.2f}s "
            f"min {min(times):.2f}s max {max(times):.2f}s mean {statistics.mean(times):.2f}s",
            flush=True,
        )
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--events", default="switchover,switchover-load,kill,stop,partition,commit")
    parser.add_argument("--commits", type=int, default=2000)
    add_work_dir(parser, str(ROOT / "var" / "bench-failover"))
    parser.add_argument(
        "--failover-after", default=FAILOVER_AFTER, help="'default': the config's own default"
    )
    args = parser.parse_args()
    if args.failover_after == "default":
        DEFAULTS.pop("failover_after")
    else:
        DEFAULTS["failover_after"] = args.failover_after
    (ROOT / "var").mkdir(exist_ok=True)  # commit_latencies' temporary directory
    with work_dir(args) as base:
        return asyncio.run(main_async(args, base))


if __name__ == "__main__":
    sys.exit(main())
