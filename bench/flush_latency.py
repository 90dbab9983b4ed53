"""From `roll-log` to the first Satisfied CheckReplicationFlush by LSN (issue 14).

    .venv/bin/python bench/flush_latency.py [--trials 10] [--rounds 2] [--poll-interval 5s]

One cluster of three `replication-node serve` processes on loopback (DB1 active on mbx1,
copies on mbx2 and mbx3, constraint AllCopies, 1 MiB logs), and `guarantee-api serve`
polling every `--poll-interval`, started twice per round, alternating:

- polled: `watch: false` (the service learns of progress only by its poll, as before issue
  14) and the client asks as a new user would without `wait`: every 20 ms until Satisfied;
- pushed: the defaults (every node's status stream, GET /v1/status/watch) and the client
  asks once with `wait` 30 s (asking again only if that answer is not Satisfied).

Each trial writes an item to DB1, rolls the log (`POST .../roll-log`), and times from the
roll's answer to the first Satisfied answer by the LSN of the generation it closed.  The
service is ready (SERVING, and for `pushed` every stream live) before the first trial.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import statistics
import sys
import time
from datetime import date
from pathlib import Path

import grpc

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.workdir import add_work_dir, work_dir  # noqa: E402
from dag_common._generated.dataguarantee.v1 import data_guarantee_pb2 as pb  # noqa: E402
from dag_common._generated.dataguarantee.v1 import (  # noqa: E402
    data_guarantee_pb2_grpc as pb_grpc,
)
from tests.cluster_harness import TOKEN, LocalCluster, wait_until  # noqa: E402
from tests.prometheus import samples  # noqa: E402

META = (("authorization", f"Bearer {TOKEN}"),)
DB = "/v1/databases/DB1"


async def streams_live(cluster: LocalCluster, n: int) -> bool:
    http = cluster.config["guarantee_api"]["http_listen"]
    assert cluster.session is not None
    async with cluster.session.get(f"http://{http}/metrics") as resp:
        found = samples(await resp.text())
    return sum(v for (k, _), v in found.items() if k == "dataguarantee_node_stream_up") == n


async def trial(cluster: LocalCluster, stub: pb_grpc.DataGuaranteeStub, mode: str, i: int):
    await cluster.ok("POST", "mbx1", f"{DB}/mailboxes/alice/items", json={"subject": f"{mode} {i}"})
    rolled = await cluster.ok("POST", "mbx1", f"{DB}/roll-log")
    start = time.perf_counter()
    request = pb.CheckReplicationFlushRequest(
        database="DB1",
        caller_id="bench",
        lsn=pb.Lsn(generation=rolled["closed_generation"], epoch=rolled["epoch"]),
    )
    if mode == "pushed":
        request.wait.FromSeconds(30)
    asks = 0
    while True:
        asks += 1
        answer = await stub.CheckReplicationFlush(request, metadata=META, timeout=40)
        if answer.status == pb.SATISFIED:
            return time.perf_counter() - start, asks
        if mode == "polled":
            await asyncio.sleep(0.02)


async def run_mode(cluster: LocalCluster, mode: str, trials: int, poll: str) -> list[float]:
    cluster.config["guarantee_api"].update({"poll_interval": poll, "watch": mode == "pushed"})
    cluster.write_config()
    api = await cluster.start_guarantee_api()
    try:
        if mode == "pushed":
            await wait_until("every stream live", lambda: streams_live(cluster, 3))
        channel = grpc.aio.insecure_channel(cluster.config["guarantee_api"]["listen"])
        stub = pb_grpc.DataGuaranteeStub(channel)
        times = []
        for i in range(trials):
            seconds, asks = await trial(cluster, stub, mode, i)
            times.append(seconds)
            print(f"  {mode} trial {i + 1}: {seconds * 1e3:8.1f} ms ({asks} question(s))")
        await channel.close()
        return times
    finally:
        api.terminate()
        api.wait(timeout=20)


def summary(times: list[float]) -> str:
    ordered = sorted(times)
    p90 = ordered[max(0, round(0.9 * len(ordered)) - 1)]
    return (
        f"median {statistics.median(ordered) * 1e3:,.1f} ms, p90 {p90 * 1e3:,.1f} ms, "
        f"min {ordered[0] * 1e3:,.1f}, max {ordered[-1] * 1e3:,.1f} ({len(ordered)} trials)"
    )


async def main_async(args: argparse.Namespace, base: Path) -> None:
    cluster = LocalCluster(
        base,
        nodes=[("mbx1", "redmond"), ("mbx2", "redmond"), ("mbx3", "dublin")],
        databases=[
            {
                "name": "DB1",
                "data_move_replication_constraint": "AllCopies",
                "copies": [
                    {"node": n, "activation_preference": i + 1}
                    for i, n in enumerate(("mbx1", "mbx2", "mbx3"))
                ],
            }
        ],
        defaults={"log_file_size": "1MiB", "llr_depth": 10, "failover_after": None},
    )
    results: dict[str, list[float]] = {"polled": [], "pushed": []}
    try:
        await cluster.start()
        await cluster.ok("PUT", "mbx1", f"{DB}/mailboxes/alice")
        for r in range(args.rounds):
            for mode in ("polled", "pushed"):
                print(f"round {r + 1}, {mode}:")
                results[mode] += await run_mode(cluster, mode, args.trials, args.poll_interval)
    finally:
        await cluster.close()
    print()
    for mode, times in results.items():
        print(f"{mode}: {summary(times)}")
    ratio = statistics.median(results["polled"]) / statistics.median(results["pushed"])
    print(f"pushed is {ratio:,.0f}x faster at the median")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=10, help="trials per mode per round")
    parser.add_argument("--rounds", type=int, default=2, help="polled, pushed: this many times")
    parser.add_argument("--poll-interval", default="5s", help="the service's poll_interval")
    add_work_dir(parser, "var/bench-flush-latency")
    args = parser.parse_args()
    with work_dir(args) as base:  # a refused run prints its one line, no header
        print(
            f"{date.today().isoformat()} - nproc {os.cpu_count()}, {platform.platform()}, "
            f"Python {platform.python_version()}; poll_interval {args.poll_interval}\n"
        )
        asyncio.run(main_async(args, base))


if __name__ == "__main__":
    main()
