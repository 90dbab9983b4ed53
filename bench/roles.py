"""What least privilege costs a write (issue 32): the role check on every call, measured
where a commit pays it, against the same cluster without it, in one run.

    .venv/bin/python bench/roles.py [--items 6000] [--clients 16] [--rounds 3]
        [--credentials 20] [--dir var/bench-roles]

1. The check alone, in process: `Credentials.identify` of a presented secret (a SHA-256
   digest, then a constant-time compare with every accepted digest) with 1, 20 and 100
   credentials of two secrets each; microseconds a call.
2. Over a real node: two `replication-node serve` processes (DB1 active on mbx1, a copy on
   mbx2, 1 MiB logs, LLR depth 10), `--clients` clients each POSTing one 1 KB item at a
   time to DB1's active until `--items` are written, a write done at its 201 (durable).
   "Before": the nodes accept only the cluster token, which the clients present (one
   credential, every role: what every cluster did before issue 32).  "After": the nodes
   also accept `--credentials` role credentials of two secrets each (the config's
   `credentials:`, read from files), no cluster token, and the clients present a `store`
   credential listed last (every digest compared whatever matches first).  The two
   clusters run one after the other in each round, in alternating order, on a quiet disk
   (`sync` before each), after a warm-up of half a round each (not counted); items/s and
   p50/p99 per side over every round.  Target: within
   noise (the commit path itself, `bench/log_write.py`'s subject, is not touched: the check
   happens once per HTTP call, before the handler).

Every item written is counted back from the active's listing, so a run that lost writes
cannot be reported.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import statistics
import sys
import time
import timeit
from datetime import date
from pathlib import Path
from typing import Any

import aiohttp

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.workdir import add_work_dir, work_dir  # noqa: E402
from dag_common.credentials import Credential, Credentials, Role, digest  # noqa: E402
from tests.cluster_harness import TOKEN, LocalCluster, wait_until  # noqa: E402

BODY = "b" * 1000


def check_alone() -> dict[int, float]:
    """Microseconds per `identify` with n credentials (the match last)."""

    def secrets(i: int) -> tuple[bytes, bytes]:
        return digest(f"s{i}-a" * 4), digest(f"s{i}-b" * 4)

    out = {}
    for n in (1, 20, 100):
        creds = [Credential(f"c{i}", frozenset({Role.STORE}), secrets(i)) for i in range(n)]
        accepted, secret = Credentials(creds), f"s{n - 1}-b" * 4
        assert accepted.identify(secret) is creds[-1]
        runs = 20_000
        seconds = timeit.timeit(
            "accepted.identify(secret)", globals={"accepted": accepted, "secret": secret},
            number=runs,
        )  # fmt: skip
        out[n] = seconds / runs * 1e6
    return out


def cluster(root: Path, credentials: int) -> tuple[LocalCluster, str, dict[str, str], str]:
    """Two nodes; `credentials` > 0: role credentials instead of the cluster token.  The
    cluster, the secret its clients present, the env its nodes run with, and a secret that
    reads status."""
    c = LocalCluster(
        root,
        nodes=[("mbx1", "redmond"), ("mbx2", "redmond")],
        databases=[{"name": "DB1", "copies": [
            {"node": "mbx1", "activation_preference": 1},
            {"node": "mbx2", "activation_preference": 2}]}],
        defaults={"failover_after": None, "log_file_size": "1MiB", "llr_depth": 10},
    )  # fmt: skip
    if not credentials:
        return c, TOKEN, {}, TOKEN
    secrets = root / "secrets"
    secrets.mkdir()
    listed = []
    for i in range(credentials):
        name = "nodes" if i == 0 else ("mail" if i == credentials - 1 else f"role{i}")
        roles = ["replication", "monitor", "store"] if name == "nodes" else ["store"]
        (secrets / name).write_text(f"{name}-old-secret-0123456789\n{name}-new-secret-0123456789\n")
        listed.append({"name": name, "roles": roles, "file": str(secrets / name)})
    c.config["credentials"] = listed
    c.write_config()
    env = {"DG_AUTH_TOKEN": "", "DG_CREDENTIAL_FILE": str(secrets / "nodes")}
    return c, "mail-new-secret-0123456789", env, "nodes-old-secret-0123456789"


async def start(c: LocalCluster, secret: str, env: dict[str, str], admin_secret: str) -> None:
    for node in c.ports:
        c.start_node(node, env=env)
    c.session = aiohttp.ClientSession(
        headers={"Authorization": f"Bearer {secret}"}, timeout=aiohttp.ClientTimeout(total=60)
    )
    for node in c.ports:
        await c.wait_healthy(node)
    admin = {"Authorization": f"Bearer {admin_secret}"}

    async def mounted() -> bool:
        status, body = await c.call("GET", "mbx1", "/v1/status", headers=admin)
        return status == 200 and any(
            x["database"] == "DB1" and x["status"] == "Mounted" for x in body["copies"]
        )

    await wait_until("DB1 mounted", mounted, timeout=60, every=0.1)
    status, _ = await c.call("PUT", "mbx1", "/v1/databases/DB1/mailboxes/m")
    assert status == 201, status


async def writes(
    c: LocalCluster, items: int, clients: int, first: int
) -> tuple[float, list[float]]:
    """Seconds for `items` one-item writes by `clients` clients, and each write's latency."""
    url = c.url("mbx1") + "/v1/databases/DB1/mailboxes/m/items"
    assert c.session is not None
    session = c.session
    latencies: list[float] = []
    next_id = iter(range(first, first + items))

    async def client() -> None:
        for i in next_id:
            sent = time.perf_counter()
            async with session.post(
                url, json={"item_id": f"i{i}", "subject": "s", "body": BODY}
            ) as resp:
                assert resp.status == 201, (resp.status, await resp.text())
            latencies.append(time.perf_counter() - sent)

    started = time.perf_counter()
    await asyncio.gather(*(client() for _ in range(clients)))
    return time.perf_counter() - started, latencies


async def count(c: LocalCluster) -> int:
    _, body = await c.call("GET", "mbx1", "/v1/databases/DB1/mailboxes/m/items")
    return len(body["items"])


async def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=6000, help="writes per side per round")
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--credentials", type=int, default=20)
    add_work_dir(parser, "var/bench-roles")
    args = parser.parse_args()
    with work_dir(args) as base:
        return await run(args, base)


async def run(args: argparse.Namespace, base: Path) -> int:
    alone = check_alone()
    sides: dict[str, Any] = {}
    for name, n in (("before", 0), ("after", args.credentials)):
        (base / name).mkdir(parents=True)
        c, secret, env, admin_secret = cluster(base / name, n)
        await start(c, secret, env, admin_secret)
        sides[name] = {"cluster": c, "seconds": 0.0, "latencies": [], "written": 0}
    try:
        for side in sides.values():  # warm-up, not counted: past the LLR depth, warm caches
            await writes(side["cluster"], args.items // 2, args.clients, 0)
            side["written"] = args.items // 2
        for side in sides.values():
            side["counted"] = side["written"]
        for r in range(args.rounds):
            order = ["before", "after"] if r % 2 == 0 else ["after", "before"]
            for name in order:
                side = sides[name]
                os.sync()
                seconds, lat = await writes(
                    side["cluster"], args.items, args.clients, side["written"]
                )
                side["seconds"] += seconds
                side["latencies"] += lat
                side["written"] += args.items
                print(f"round {r + 1} {name}: {args.items / seconds:.0f} items/s", flush=True)
        for name, side in sides.items():
            got = await count(side["cluster"])
            assert got == side["written"], f"{name}: {got} items of {side['written']}"
    finally:
        for side in sides.values():
            await side["cluster"].close()
    rate = {k: (v["written"] - v["counted"]) / v["seconds"] for k, v in sides.items()}
    q = {k: statistics.quantiles(v["latencies"], n=100) for k, v in sides.items()}
    print()
    machine = f"nproc {os.cpu_count()}, {platform.platform()}"
    print(f"{date.today()} - {machine}, Python {platform.python_version()}")
    print("identify(): " + ", ".join(f"{n} credentials {us:.1f} µs" for n, us in alone.items()))
    print("| side | items/s | p50 ms | p99 ms |\n|---|---:|---:|---:|")
    for k in ("before", "after"):
        print(f"| {k} | {rate[k]:.0f} | {q[k][49] * 1000:.1f} | {q[k][98] * 1000:.1f} |")
    ratio = rate["after"] / rate["before"]
    print(f"after / before: **{ratio:.3f}**; checked: every item written is on the active")
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
