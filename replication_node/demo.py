"""`make demo`: a three-node cluster on loopback, writes on the active copies, the log stream,
and every copy converging.  Each step prints what it shows."""

from __future__ import annotations

import argparse
import asyncio
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import aiohttp
import yaml

from dag_common.auth import bearer
from replication_node import cli

ROOT = Path.cwd()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def write_config(base: Path) -> Path:
    ports = [_free_port() for _ in range(3)]
    config = {
        "cluster": "demo",
        "auth_token_file": "./token",
        "cluster_store": {"kind": "embedded", "path": "./cluster.db"},
        "defaults": {
            "log_file_size": "1MiB",
            "llr_depth": 10,
            "data_move_replication_constraint": "SecondCopy",
        },
        "nodes": [
            {
                "name": "mbx1",
                "site": "redmond",
                "url": f"http://127.0.0.1:{ports[0]}",
                "data_dir": "./mbx1",
            },
            {
                "name": "mbx2",
                "site": "redmond",
                "url": f"http://127.0.0.1:{ports[1]}",
                "data_dir": "./mbx2",
            },
            {
                "name": "mbx3",
                "site": "dublin",
                "url": f"http://127.0.0.1:{ports[2]}",
                "data_dir": "./mbx3",
            },
        ],
        "databases": [
            {
                "name": "DB1",
                "data_move_replication_constraint": "SecondDatacenter",
                "copies": [
                    {"node": "mbx1", "activation_preference": 1},
                    {"node": "mbx2", "activation_preference": 2},
                    {"node": "mbx3", "activation_preference": 3},
                ],
            },
            {
                "name": "DB2",
                "copies": [
                    {"node": "mbx2", "activation_preference": 1},
                    {"node": "mbx3", "activation_preference": 2},
                ],
            },
        ],
        "guarantee_api": {
            "listen": f"127.0.0.1:{_free_port()}",
            "http_listen": f"127.0.0.1:{_free_port()}",
            "poll_interval": "1s",
            "history_dir": "./history",
        },
    }
    base.mkdir(parents=True, exist_ok=True)
    (base / "token").write_text(secrets.token_urlsafe(32) + "\n")
    os.chmod(base / "token", 0o600)
    path = base / "cluster.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def step(text: str) -> None:
    print(f"\n=== {text}", flush=True)


async def run(config_path: Path, items: int) -> None:
    config = yaml.safe_load(config_path.read_text())
    token = (config_path.parent / "token").read_text().strip()
    urls = {n["name"]: n["url"] for n in config["nodes"]}
    async with aiohttp.ClientSession(
        headers=bearer(token), timeout=aiohttp.ClientTimeout(total=30)
    ) as s:

        async def call(method: str, node: str, path: str, **kw: Any) -> Any:
            async with s.request(method, urls[node] + path, **kw) as resp:
                body = await resp.json()
                if resp.status >= 300:
                    raise RuntimeError(f"{method} {path}: {resp.status} {body}")
                return body

        step("Write: create mailbox alice on DB1 (active on mbx1) and bob on DB2 (active on mbx2)")
        print(
            await call(
                "PUT", "mbx1", "/v1/databases/DB1/mailboxes/alice", json={"display_name": "Alice"}
            )
        )
        await call("PUT", "mbx2", "/v1/databases/DB2/mailboxes/bob", json={"display_name": "Bob"})
        step(f"Write {items} items of ~2 KiB into alice, 50 per transaction (group commit, fsync)")
        started = time.perf_counter()
        last = None
        for start in range(0, items, 50):
            batch = [
                {"subject": f"message {i}", "body": f"body of message {i} " * 100}
                for i in range(start, min(items, start + 50))
            ]
            last = await call(
                "POST", "mbx1", "/v1/databases/DB1/mailboxes/alice/items", json={"items": batch}
            )
        print(
            f"{items} items in {time.perf_counter() - started:.2f}s; "
            f"last commit at LSN {last['lsn']}"
        )
        step("Roll the log on demand (what the mover does after its final sync)")
        print(await call("POST", "mbx1", "/v1/databases/DB1/roll-log"))

        step("Wait for every passive copy to copy, inspect and replay the closed generations")
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            states = {}
            for node in urls:
                for c in (await call("GET", node, "/v1/status"))["copies"]:
                    states[(c["database"], node)] = c
            generated = {
                db: max(c["last_log_generated"] for (d, _), c in states.items() if d == db)
                for db in ("DB1", "DB2")
            }
            if all(
                c["role"] == "Active"
                or (c["status"] == "Healthy" and c["last_log_replayed"] >= generated[db])
                for (db, _), c in states.items()
            ):
                break
            await asyncio.sleep(0.3)
        # The status command runs its own event loop: give it a thread of its own.
        await asyncio.to_thread(cli.main, ["status", "--config", str(config_path)])

        step("Every copy of DB1 holds the same items")
        for node in ("mbx1", "mbx2", "mbx3"):
            body = await call("GET", node, "/v1/databases/DB1/mailboxes/alice/items")
            print(
                f"  DB1\\{node}: {len(body['items'])} items, "
                f"last change number {body['last_change_number']}"
            )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--dir", default="var/demo")
    parser.add_argument("--items", type=int, default=2000)
    args = parser.parse_args()
    base = Path(args.dir).resolve()
    shutil.rmtree(base, ignore_errors=True)
    config_path = write_config(base)
    step(f"Cluster config {config_path}")
    print(config_path.read_text())
    procs = []
    env = {k: v for k, v in os.environ.items() if k != "DG_AUTH_TOKEN"}
    for node in yaml.safe_load(config_path.read_text())["nodes"]:
        log = open(base / f"{node['name']}.log", "ab")  # noqa: SIM115 - the child owns it
        procs.append(
            subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "replication_node.cli",
                    "serve",
                    "--config",
                    str(config_path),
                    "--node",
                    node["name"],
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
            )
        )
        print(f"started node {node['name']} ({node['site']}) at {node['url']}, log {log.name}")
    api = None
    try:
        time.sleep(1.5)
        asyncio.run(run(config_path, args.items))
        step("Start the Data Guarantee service (gRPC) over the nodes")
        api = subprocess.Popen(
            [sys.executable, "-m", "guarantee_api.cli", "serve", "--config", str(config_path)],
            stdout=open(base / "guarantee-api.log", "ab"),  # noqa: SIM115 - the child owns it
            stderr=subprocess.STDOUT,
            env=env,
        )
        time.sleep(2.0)
        step("Move mailbox alice from DB1 to DB2, gated on the data guarantee (mrs move)")
        moves = str(base / "moves.db")
        subprocess.run(
            [
                sys.executable,
                "-m",
                "mrs_client.cli",
                "move",
                "--config",
                str(config_path),
                "--requests-db",
                moves,
                "--mailbox",
                "alice",
                "--to",
                "DB2",
                "--health-check-interval",
                "1s",
                "--flush-retry-interval",
                "500ms",
            ],
            env=env,
            check=True,  # a demo whose move fails must say so with its exit code
        )
        subprocess.run(
            [
                sys.executable,
                "-m",
                "mrs_client.cli",
                "list",
                "--config",
                str(config_path),
                "--requests-db",
                moves,
            ],
            env=env,
            check=False,
        )
        step("Switch DB2 over to its copy on mbx3 (no log lost), then the cluster's status")
        if cli.main(["db", "switchover", "DB2", "--to", "mbx3", "--config", str(config_path)]):
            raise SystemExit("the switchover failed")
        time.sleep(1.0)  # the old active dismounts and starts following the new one
        cli.main(["status", "--config", str(config_path)])
        step("The log stream of DB1 on the active (mbx1) and on a passive copy (mbx3)")
        for node in ("mbx1", "mbx3"):
            logs = sorted((base / node / "DB1" / "logs").glob("E0*.log"))
            print(f"  {node}: {[p.name for p in logs]}")
        first = base / "mbx3" / "DB1" / "logs" / "E00000001.log"
        if first.exists():
            cli.main(["log", "dump", str(first)])
        cli.main(["db", "header", str(base / "mbx1" / "DB1" / "DB1.sqlite")])
    finally:
        if api is not None:
            procs.append(api)
        for proc in procs:
            proc.send_signal(signal.SIGTERM)
        for proc in procs:
            proc.wait(timeout=30)
    step("Cluster stopped; files are under " + str(base))
    return 0


if __name__ == "__main__":
    sys.exit(main())
