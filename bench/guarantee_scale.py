"""The guarantee service against a large fleet (issue 14).

    .venv/bin/python bench/guarantee_scale.py [--nodes 200] [--copies-per-node 10]
        [--changes 10] [--seconds 10] [--in-flight 64]

`--nodes` simulated replication nodes, each an aiohttp server in this process on its own
loopback port serving `/v1/status` and the node's own `/v1/status/watch` handler
(replication_node/http/status_watch.py, looking every 50 ms) over a status whose copies'
LastLogCopied/Inspected/Replayed move `--changes` times a second each.  Databases of three
copies on consecutive nodes, so each node holds `--copies-per-node` copies.  `guarantee-api
serve` runs as its own process on a config naming them all (poll_interval 5 s: with every
stream live it polls nobody).

Measured, once every stream is live:
1. idle: the service's CPU (from /proc) per second over `--seconds`, and the copy changes it
   applied (dataguarantee_stream_events_total), so CPU per 1,000 changes;
2. loaded: `--in-flight` concurrent CheckReplicationHealth calls, each for a random
   database, for `--seconds`: requests/s, p50 and p99 latency, the service's CPU;
3. the floor, same run: grpc.health.v1 Check (which does nothing) at the same in-flight.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import random
import statistics
import subprocess
import sys
import time
from datetime import UTC, date, datetime
from pathlib import Path

import grpc
from aiohttp import web
from grpc_health.v1 import health_pb2, health_pb2_grpc

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.workdir import add_work_dir, work_dir  # noqa: E402
from dag_common._generated.dataguarantee.v1 import data_guarantee_pb2 as pb  # noqa: E402
from dag_common._generated.dataguarantee.v1 import (  # noqa: E402
    data_guarantee_pb2_grpc as pb_grpc,
)
from dag_common.model import CopyRole, CopyStatus, CopyStatusReport, NodeStatus  # noqa: E402
from replication_node.http.context import NODE  # noqa: E402
from replication_node.http.status_watch import WATCH_TICK, add_status_watch_route  # noqa: E402
from tests.cluster_harness import TOKEN, cluster_config, wait_until, write_cluster_config  # noqa: E402
from tests.prometheus import samples  # noqa: E402
from tools.ports import free_port  # noqa: E402

META = (("authorization", f"Bearer {TOKEN}"),)
T0 = datetime(2026, 11, 23, tzinfo=UTC)


class SimNode:
    """A node whose copies replay `changes` generations a second (computed from the clock,
    so a status is only built when asked for, as a real node builds it)."""

    def __init__(self, name: str, copies: list[tuple[str, int]], changes: float) -> None:
        self.name = name
        self.copies = copies  # (database, activation preference)
        self.changes = changes
        self._built_at = -1
        self._status: NodeStatus | None = None

    def status(self) -> NodeStatus:
        step = int(time.monotonic() * self.changes)
        if step != self._built_at or self._status is None:
            self._built_at = step
            self._status = NodeStatus.model_construct(
                node=self.name,
                site="redmond",
                copies=[self._report(db, pref, step) for db, pref in self.copies],
            )
        return self._status

    def _report(self, db: str, pref: int, step: int) -> CopyStatusReport:
        active = pref == 1
        generated = step + 2
        # Built without validation (the fields are right by construction; model_construct
        # fills the defaults), as cheap as the bench can make a node's status.
        return CopyStatusReport.model_construct(
            database=db,
            node=self.name,
            site="redmond",
            role=CopyRole.ACTIVE if active else CopyRole.PASSIVE,
            status=CopyStatus.MOUNTED if active else CopyStatus.HEALTHY,
            activation_preference=pref,
            last_log_generated=generated,
            last_log_copy_notified=generated,
            last_log_copied=generated - 1,
            last_log_inspected=generated - 1,
            last_log_replayed=generated if active else generated - 2,
            copy_queue_length=0 if active else 1,
            replay_queue_length=0 if active else 1,
            last_inspected_log_time=T0,
            last_replayed_log_time=T0,
        )


async def serve_node(node: SimNode, port: int) -> web.AppRunner:
    async def status(request: web.Request) -> web.Response:
        return web.Response(body=node.status().model_dump_json(), content_type="application/json")

    app = web.Application()
    app[NODE] = node  # type: ignore[assignment]
    app[WATCH_TICK] = 0.05
    add_status_watch_route(app)
    app.router.add_get("/v1/status", status)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    return runner


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def metric(http: str, name: str) -> float:
    import aiohttp

    async with aiohttp.ClientSession() as s, s.get(f"http://{http}/metrics") as resp:
        found = samples(await resp.text())
    return sum(v for (k, _), v in found.items() if k == name)


async def load(call, databases: list[str], in_flight: int, seconds: float) -> list[float]:
    latencies: list[float] = []
    end = time.perf_counter() + seconds

    async def worker(w: int) -> None:
        rng = random.Random(w)
        while time.perf_counter() < end:
            start = time.perf_counter()
            await call(rng.choice(databases), w)
            latencies.append(time.perf_counter() - start)

    await asyncio.gather(*(worker(w) for w in range(in_flight)))
    return latencies


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def main_async(args: argparse.Namespace, base: Path) -> None:
    names = [f"n{i:03d}" for i in range(args.nodes)]
    per_db, dbs = 3, args.nodes * args.copies_per_node // 3
    placement: dict[str, list[tuple[str, int]]] = {n: [] for n in names}
    databases = []
    for d in range(dbs):
        db = f"DB{d:04d}"
        holders = [names[(d + k) % args.nodes] for k in range(per_db)]
        for pref, node in enumerate(holders, start=1):
            placement[node].append((db, pref))
        databases.append(
            {
                "name": db,
                "copies": [
                    {"node": n, "activation_preference": p} for p, n in enumerate(holders, 1)
                ],
            }
        )
    ports = {n: free_port() for n in names}
    grpc_port, http_port = free_port(), free_port()
    config = cluster_config(
        [(n, "redmond", f"http://127.0.0.1:{ports[n]}") for n in names],
        databases,
        cluster="scale",
        cluster_store={"kind": "embedded", "path": "cluster.db"},
        guarantee_api={
            "listen": f"127.0.0.1:{grpc_port}",
            "http_listen": f"127.0.0.1:{http_port}",
            "poll_interval": "5s",
            "history_dir": "history",
        },
    )
    path = base / "cluster.yaml"
    write_cluster_config(path, config)
    runners = [await serve_node(SimNode(n, placement[n], args.changes), ports[n]) for n in names]
    env = {**os.environ, "DG_AUTH_TOKEN": TOKEN, "PYTHONPATH": str(ROOT)}
    log = open(base / "guarantee.log", "ab")  # noqa: SIM115 - the child owns it
    proc = subprocess.Popen(
        [sys.executable, "-m", "guarantee_api.cli", "serve", "--config", str(path)],
        stdout=log,
        stderr=subprocess.STDOUT,
        env=env,
        cwd=base,
    )
    http = f"127.0.0.1:{http_port}"
    try:

        async def live() -> bool:
            return await metric(http, "dataguarantee_node_stream_up") == args.nodes

        await wait_until(f"{args.nodes} streams live", live, timeout=120, tolerate=(OSError,))
        print(f"{args.nodes} nodes, {dbs} databases, {dbs * per_db} copies; every stream live")

        # 1. idle
        e0, c0, t0 = (
            await metric(http, "dataguarantee_stream_events_total"),
            cpu_seconds(proc.pid),
            time.perf_counter(),
        )
        await asyncio.sleep(args.seconds)
        e1, c1, t1 = (
            await metric(http, "dataguarantee_stream_events_total"),
            cpu_seconds(proc.pid),
            time.perf_counter(),
        )
        rate, cpu = (e1 - e0) / (t1 - t0), (c1 - c0) / (t1 - t0)
        print(
            f"\nidle: {rate:,.0f} copy changes/s applied, service CPU {cpu:.2f} core "
            f"({cpu / rate * 1e6:,.0f} µs per change)"
        )

        channel = grpc.aio.insecure_channel(f"127.0.0.1:{grpc_port}")
        stub = pb_grpc.DataGuaranteeStub(channel)
        health = health_pb2_grpc.HealthStub(channel)
        names_db = [d["name"] for d in databases]

        async def check(db: str, w: int) -> None:
            await stub.CheckReplicationHealth(
                pb.CheckReplicationHealthRequest(database=db, caller_id=f"mover-{w}"),
                metadata=META,
            )

        async def floor(db: str, w: int) -> None:
            await health.Check(health_pb2.HealthCheckRequest())

        rows = []
        for label, call in (("CheckReplicationHealth", check), ("grpc.health.v1 Check", floor)):
            e0, c0 = await metric(http, "dataguarantee_stream_events_total"), cpu_seconds(proc.pid)
            t0 = time.perf_counter()
            lat = await load(call, names_db, args.in_flight, args.seconds)
            t1 = time.perf_counter()
            e1, c1 = await metric(http, "dataguarantee_stream_events_total"), cpu_seconds(proc.pid)
            rows.append(
                (
                    label,
                    len(lat) / (t1 - t0),
                    statistics.median(lat) * 1e3,
                    pct(lat, 0.99) * 1e3,
                    (c1 - c0) / (t1 - t0),
                    (e1 - e0) / (t1 - t0),
                )
            )
        await channel.close()
        print(f"\nloaded, {args.in_flight} in flight for {args.seconds:g} s each:\n")
        print("| call | requests/s | p50 ms | p99 ms | service CPU, cores | changes/s applied |")
        print("|---|---:|---:|---:|---:|---:|")
        for label, rps, p50, p99, cores, changes in rows:
            print(
                f"| {label} | {rps:,.0f} | {p50:.2f} | {p99:.2f} | {cores:.2f} | {changes:,.0f} |"
            )
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        for runner in runners:
            await runner.cleanup()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=200)
    parser.add_argument("--copies-per-node", type=int, default=10)
    parser.add_argument("--changes", type=float, default=10.0, help="per copy per second")
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--in-flight", type=int, default=64)
    add_work_dir(parser, "var/bench-guarantee-scale")
    args = parser.parse_args()
    print(
        f"{date.today().isoformat()} - nproc {os.cpu_count()}, {platform.platform()}, "
        f"Python {platform.python_version()}\n"
    )
    with work_dir(args) as base:
        asyncio.run(main_async(args, base))


if __name__ == "__main__":
    main()
