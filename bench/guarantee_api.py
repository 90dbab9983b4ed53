"""Benchmark: CheckReplicationHealth beside the stock grpc.health.v1 Check of the same server.

    .venv/bin/python bench/guarantee_api.py [--seconds 5]

Runs `guarantee-api serve` as a real process on loopback over three fake nodes (served from
this process; they are polled once a second), then, from this process over one channel:
requests/s and p50/p99 latency at 64 calls in flight for both methods, the ratio, and the
p99 at 1 call in flight. Answers come from the service's cached view; no call waits on a node.
Targets: >= 70% of the stock health check's requests/s at 64 in flight; p99 < 2 ms at 1.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import grpc  # noqa: E402
import yaml  # noqa: E402
from grpc_health.v1 import health_pb2, health_pb2_grpc  # noqa: E402

from dag_common._generated.dataguarantee.v1 import data_guarantee_pb2 as pb  # noqa: E402
from dag_common._generated.dataguarantee.v1 import data_guarantee_pb2_grpc as pb_grpc  # noqa: E402
from tests.guarantee_api.fake_nodes import FakeNodes  # noqa: E402
from tests.guarantee_api.helpers import SITES, healthy_cluster  # noqa: E402

TOKEN = "bench-token-0123456789abcdef"
AUTH = (("authorization", f"Bearer {TOKEN}"),)


async def measure(call, in_flight: int, seconds: float) -> tuple[float, float, float, int]:
    """Run `call` from `in_flight` workers for `seconds`; (req/s, p50 ms, p99 ms, count)."""
    latencies: list[float] = []
    deadline = time.perf_counter() + seconds

    async def worker(i: int) -> None:
        while time.perf_counter() < deadline:
            t = time.perf_counter()
            await call(i)
            latencies.append(time.perf_counter() - t)

    start = time.perf_counter()
    await asyncio.gather(*(worker(i) for i in range(in_flight)))
    elapsed = time.perf_counter() - start
    latencies.sort()
    n = len(latencies)
    return n / elapsed, latencies[n // 2] * 1e3, latencies[min(n - 1, int(n * 0.99))] * 1e3, n


async def run(seconds: float) -> None:
    nodes = FakeNodes(["mbx1", "mbx2", "mbx3"], TOKEN)
    nodes.set(healthy_cluster())
    await nodes.start()
    tmp = Path(tempfile.mkdtemp(prefix="bench-guarantee-"))
    config = tmp / "cluster.yaml"
    config.write_text(yaml.safe_dump({
        "cluster": "bench",
        "nodes": [{"name": n, "site": SITES[n], "url": u, "data_dir": f"./{n}"}
                  for n, u in nodes.urls.items()],
        "databases": [{"name": "DB1", "data_move_replication_constraint": "SecondCopy",
                       "copies": [{"node": n, "activation_preference": i + 1}
                                  for i, n in enumerate(nodes.urls)]}],
        "guarantee_api": {"listen": "127.0.0.1:0", "http_listen": "127.0.0.1:0",
                          "history_dir": str(tmp / "history")},
    }))  # fmt: skip
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "guarantee_api.cli", "serve", "--config", str(config),
        "--log-level", "WARNING", env={**os.environ, "DG_AUTH_TOKEN": TOKEN}, cwd=ROOT,
        stdout=asyncio.subprocess.PIPE,
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        line = (await asyncio.wait_for(proc.stdout.readline(), 30)).decode()
        port = int(line.split("port ")[1].split(",")[0])
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            health = health_pb2_grpc.HealthStub(channel)
            async for update in health.Watch(health_pb2.HealthCheckRequest()):
                if update.status == health_pb2.HealthCheckResponse.SERVING:
                    break
            guarantee = pb_grpc.DataGuaranteeStub(channel)
            requests = [
                pb.CheckReplicationHealthRequest(database="DB1", caller_id=f"mover-{i}")
                for i in range(64)
            ]
            check = health_pb2.HealthCheckRequest()

            async def stock(i: int) -> None:
                await health.Check(check)

            async def ours(i: int) -> None:
                answer = await guarantee.CheckReplicationHealth(requests[i], metadata=AUTH)
                assert answer.status == pb.SATISFIED, answer.reason

            await measure(ours, 64, 1.0)  # warm-up
            await measure(stock, 64, 1.0)
            rows = []
            for name, call, in_flight in (
                ("grpc.health.v1 Check", stock, 64),
                ("CheckReplicationHealth", ours, 64),
                ("grpc.health.v1 Check", stock, 1),
                ("CheckReplicationHealth", ours, 1),
            ):
                rows.append((name, in_flight, *await measure(call, in_flight, seconds)))
    finally:
        proc.terminate()
        await proc.wait()
        await nodes.close()
    print("| method | in flight | requests/s | p50 ms | p99 ms | calls |")
    print("|---|---:|---:|---:|---:|---:|")
    for name, in_flight, rps, p50, p99, n in rows:
        print(f"| {name} | {in_flight} | {rps:,.0f} | {p50:.2f} | {p99:.2f} | {n:,} |")
    ratio = rows[1][2] / rows[0][2]
    print(f"\nCheckReplicationHealth / stock health Check requests/s at 64 in flight: "
          f"{ratio:.2f} (target >= 0.70)")  # fmt: skip
    print(f"CheckReplicationHealth p99 at 1 in flight: {rows[3][4]:.2f} ms (target < 2 ms)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=5.0)
    asyncio.run(run(parser.parse_args().seconds))


if __name__ == "__main__":
    main()
