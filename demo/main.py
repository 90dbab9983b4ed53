"""`make demo` (`python -m demo`): a three-node cluster on loopback, writes on the active
copies, the log stream, and every copy converging; at the end, the Data Guarantee service's
own queue-length history of the run aggregated by Spark (`spark-metrics`) into an HTML
report.  Each step prints what it shows; each wait is for the thing itself (`demo.waits`)."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import aiohttp
import yaml

from dag_common.auth import bearer
from demo.copies import active_copies, not_clean, wait_caught_up, wait_copy
from demo.mail import MailDuring
from demo.waits import Started, wait_for, wait_healthy
from replication_node.cli import main as cli
from replication_node.cli.mail_mix import mail_sizes
from replication_node.cli.mailbox import batches, generated_items
from tools.ports import free_port

ROOT = Path.cwd()


def write_config(base: Path) -> Path:
    ports = [free_port() for _ in range(3)]
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
            "listen": f"127.0.0.1:{free_port()}",
            "http_listen": f"127.0.0.1:{free_port()}",
            "poll_interval": "1s",
            "history_dir": "./history",
        },
    }
    config["transports"] = [
        {"name": "hub1", "site": "redmond", "url": f"http://127.0.0.1:{free_port()}",
         "data_dir": "./hub1"},
    ]  # fmt: skip
    base.mkdir(parents=True, exist_ok=True)
    (base / "token").write_text(secrets.token_urlsafe(32) + "\n")
    os.chmod(base / "token", 0o600)
    path = base / "cluster.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def batch_move(config_path: Path, base: Path, env: dict[str, str]) -> None:
    """Two mailboxes in DB1, a batch moving them to DB2, a worker running it; its report."""
    conf = ["--config", str(config_path)]
    for name in ("carol", "dave"):
        if cli.main(["mailbox", "create", name, "--database", "DB1", *conf]):
            raise SystemExit(f"could not create {name}")
        if cli.main(["mailbox", "put", name, "--database", "DB1", "--count", "200", *conf]):
            raise SystemExit(f"could not fill {name}")
    mrs = [sys.executable, "-m", "mrs_client.cli"]
    subprocess.run(
        [*mrs, "batch", "create", "wave1", "--mailboxes", "carol", "dave", "--to", "DB2", *conf],
        env=env,
        check=True,
    )
    worker = subprocess.Popen(
        [
            *mrs,
            "serve",
            *conf,
            "--poll",
            "200ms",
            "--health-check-interval",
            "1s",
            "--flush-retry-interval",
            "500ms",
        ],
        stdout=open(base / "mrs-worker.log", "ab"),  # noqa: SIM115 - the child owns it
        stderr=subprocess.STDOUT,
        env=env,
    )
    try:
        state: dict[str, int] = {}

        def completed() -> bool | None:  # the batch's own word that its moves are done
            nonlocal state
            listed = subprocess.run(
                [*mrs, "batch", "list", "--json", *conf],
                env=env,
                capture_output=True,
                text=True,
                check=True,
            )
            (wave,) = [b for b in json.loads(listed.stdout) if b["name"] == "wave1"]
            state = wave["by_state"]
            if state["Failed"] or worker.poll() is not None:
                raise SystemExit(f"the batch did not complete: {state} (mrs-worker.log)")
            return True if state["Completed"] == 2 else None

        if wait_for(completed, 300) is None:
            raise SystemExit(
                f"the batch did not complete within 5 minutes: {state} (mrs-worker.log)"
            )
    finally:
        worker.terminate()
        worker.wait(timeout=60)
    subprocess.run([*mrs, "batch", "report", "wave1", *conf], env=env, check=True)


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
        sizes = mail_sizes(items, seed=1, large_every=400)
        large = [s for s in sizes if s >= 1 << 20]
        step(
            f"Write {items} items of real mail into alice: most of a few KB, 50 per "
            f"transaction (group commit, fsync); {len(large)} of "
            f"{', '.join(f'{s / (1 << 20):.1f}' for s in large)} MiB, each its own "
            "transaction across many 1 MiB log generations"
        )
        started = time.perf_counter()
        last = None
        for batch in batches(
            generated_items(items, sizes, "Inbox"), max_items=50, max_bytes=512 * 1024
        ):
            last = await call(
                "POST", "mbx1", "/v1/databases/DB1/mailboxes/alice/items", json={"items": batch}
            )
        print(
            f"{items} items ({sum(sizes) / 1e6:.0f} MB) in {time.perf_counter() - started:.2f}s; "
            f"last commit at LSN {last['lsn']}"
        )
        # Both databases took writes: the open log of each holds acknowledged commits, which
        # count in the copy queue and reach the copies once a roll closes it (else the idle
        # roll does, every 15 minutes / LLR depth: 90 s here).
        step("Roll the logs on demand (what the mover does after its final sync)")
        for db, node in (("DB1", "mbx1"), ("DB2", "mbx2")):
            print(await call("POST", node, f"/v1/databases/{db}/roll-log"))

        step("Wait for every passive copy to copy, inspect and replay the closed generations")
        await asyncio.to_thread(wait_caught_up, config_path)
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
    nodes: list[Started] = []
    env = {k: v for k, v in os.environ.items() if k != "DG_AUTH_TOKEN"}
    for node in yaml.safe_load(config_path.read_text())["nodes"]:
        log = open(base / f"{node['name']}.log", "ab")  # noqa: SIM115 - the child owns it
        procs.append(
            subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "replication_node.cli.main",
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
        nodes.append(
            Started(f"node {node['name']}", node["url"] + "/healthz", Path(log.name), procs[-1])
        )
        print(f"started node {node['name']} ({node['site']}) at {node['url']}, log {log.name}")
    api = None
    try:
        loaded = yaml.safe_load(config_path.read_text())
        hub = loaded["transports"][0]
        procs.append(
            subprocess.Popen(
                [sys.executable, "-m", "transport.cli", "serve", "--config", str(config_path),
                 "--name", hub["name"]],
                stdout=open(base / "hub1.log", "ab"),  # noqa: SIM115 - the child owns it
                stderr=subprocess.STDOUT, env=env,
            )
        )  # fmt: skip
        print(f"started transport {hub['name']} at {hub['url']}, log {base / 'hub1.log'}")
        wait_healthy(nodes)
        wait_healthy([Started("transport hub1", hub["url"] + "/healthz", base / "hub1.log",
                              procs[-1])])  # fmt: skip
        # Started before the writes, so that its queue-length history (the report's input)
        # sees the copies fall behind under the writes and catch up.
        step("Start the Data Guarantee service (gRPC) over the nodes; it records history")
        api = subprocess.Popen(
            [sys.executable, "-m", "guarantee_api.cli", "serve", "--config", str(config_path)],
            stdout=open(base / "guarantee-api.log", "ab"),  # noqa: SIM115 - the child owns it
            stderr=subprocess.STDOUT,
            env=env,
        )
        # /healthz answers 200 once the service has polled every node once (SERVING)
        health = f"http://{loaded['guarantee_api']['http_listen']}/healthz"
        wait_healthy([Started("the guarantee service", health, base / "guarantee-api.log", api)])
        asyncio.run(run(config_path, args.items))
        step(
            "Move mailbox alice from DB1 to DB2, gated on the data guarantee (mrs move), while "
            "the transport delivers mail to alice and bob"
        )
        with MailDuring(config_path) as mail:
            subprocess.run(
                [
                    sys.executable, "-m", "mrs_client.cli", "move", "--config", str(config_path),
                    "--mailbox", "alice", "--to", "DB2", "--health-check-interval", "1s",
                    "--flush-retry-interval", "500ms",
                ],
                env=env,
                check=True,  # a demo whose move fails must say so with its exit code
            )  # fmt: skip
        mail.drained()
        subprocess.run(
            [sys.executable, "-m", "transport.cli", "status", "--config", str(config_path),
             "--via", "hub1"], env=env, check=True,
        )  # fmt: skip
        cli.main(["mailbox", "where", "alice", "--config", str(config_path)])
        mbx2 = next(n["url"] for n in loaded["nodes"] if n["name"] == "mbx2")
        for mailbox in ("alice", "bob"):
            print(f"  {mailbox}: {mail.delivered_once(mbx2, 'DB2', mailbox)}")
        subprocess.run(
            [
                sys.executable,
                "-m",
                "mrs_client.cli",
                "list",
                "--config",
                str(config_path),
            ],
            env=env,
            check=False,
        )
        step("A migration batch: carol and dave moved by an mrs serve worker (mrs batch)")
        batch_move(config_path, base, env)
        step("Switch DB2 over to its copy on mbx3 (no log lost), then the cluster's status")
        if cli.main(["db", "switchover", "DB2", "--to", "mbx3", "--config", str(config_path)]):
            raise SystemExit("the switchover failed")
        # The old active dismounts and follows the new one: wait for that, not a fixed time.
        wait_copy(config_path, "DB2", "mbx2", "Passive")
        cli.main(["status", "--config", str(config_path)])
        step("The log stream of DB1 on the active (mbx1) and on a passive copy (mbx3)")
        for node in ("mbx1", "mbx3"):
            logs = sorted((base / node / "DB1" / "logs").glob("E0*.log"))
            print(f"  {node}: {[p.name for p in logs]}")
        first = base / "mbx3" / "DB1" / "logs" / "E00000001.log"
        if first.exists():
            cli.main(["log", "dump", str(first)])
        mounted = active_copies(config_path)
    finally:
        if api is not None:
            procs.append(api)
        for proc in procs:
            proc.send_signal(signal.SIGTERM)
        for proc in procs:
            proc.wait(timeout=30)
    step("Cluster stopped; files are under " + str(base))
    step("The header of each database's active copy: a stop asked for ends in a Clean Shutdown")
    dirty = not_clean(base, mounted)
    print("\n".join(dirty) if dirty else "every active copy shut down cleanly")
    return report(base, env) or (1 if dirty else 0)


def report(base: Path, env: dict[str, str]) -> int:
    """Aggregate the history the demo's guarantee service wrote, and write the report."""
    step("Aggregate the guarantee service's queue-length history with Spark (spark-metrics)")
    history, metrics, page = base / "history", base / "metrics", base / "report.html"
    # The demo runs for seconds, not hours: 1 s windows (one poll each) show its course.
    tool = [sys.executable, "-m", "spark_metrics.cli"]
    aggregate = [*tool, "aggregate", "--input", str(history), "--output", str(metrics)]
    if subprocess.run([*aggregate, "--window", "1s"], env=env, check=False).returncode:
        print("spark-metrics aggregate failed; see above", file=sys.stderr)
        return 1
    written = [*tool, "report", "--input", str(metrics), "--output", str(page)]
    if subprocess.run(written, env=env, check=False).returncode:
        print("spark-metrics report failed; see above", file=sys.stderr)
        return 1
    step(f"The replication report is at {page}  (open file://{page} in a browser)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
