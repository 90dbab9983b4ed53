"""Real node processes on loopback for end-to-end tests: write a config with free ports,
start `replication-node serve` per node, talk to them over HTTP with the cluster token."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import yaml

from dag_common.auth import bearer

ROOT = Path(__file__).resolve().parents[1]
TOKEN = "test-token-0123456789abcdef"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_etcd(data: Path) -> tuple[str, subprocess.Popen[bytes]]:
    """A one-member etcd (Debian's etcd-server) on free ports; its client URL and process."""
    binary = shutil.which("etcd")
    assert binary, "etcd is missing: install Debian's 'etcd-server' package (make system-deps does)"
    client, peer = free_port(), free_port()
    proc = subprocess.Popen(
        [
            binary,
            "--data-dir", str(data / "member"),
            "--listen-client-urls", f"http://127.0.0.1:{client}",
            "--advertise-client-urls", f"http://127.0.0.1:{client}",
            "--listen-peer-urls", f"http://127.0.0.1:{peer}",
            "--initial-advertise-peer-urls", f"http://127.0.0.1:{peer}",
            "--initial-cluster", f"default=http://127.0.0.1:{peer}",
        ],
        stdout=open(data / "etcd.log", "wb"),  # noqa: SIM115 - the child owns it
        stderr=subprocess.STDOUT,
    )  # fmt: skip
    url = f"http://127.0.0.1:{client}"
    deadline = time.monotonic() + 15
    while True:
        try:
            with urllib.request.urlopen(f"{url}/health", timeout=1) as resp:
                if resp.status == 200:
                    return url, proc
        except OSError:
            pass
        if time.monotonic() > deadline or proc.poll() is not None:
            proc.kill()
            raise RuntimeError(f"etcd did not start: {(data / 'etcd.log').read_text()[-2000:]}")
        time.sleep(0.05)


class LocalCluster:
    """A cluster config on disk and one OS process per node."""

    def __init__(
        self,
        root: Path,
        *,
        nodes: list[tuple[str, str]],
        databases: list[dict[str, Any]],
        defaults: dict[str, Any] | None = None,
        config_refresh: str = "1s",
    ) -> None:
        self.root = root
        self.ports = {name: free_port() for name, _ in nodes}
        self.config: dict[str, Any] = {
            "cluster": "test",
            "cluster_store": {"kind": "embedded", "path": "cluster.db"},
            "defaults": {"log_file_size": "64KiB", "llr_depth": 2, **(defaults or {})},
            "nodes": [
                {"name": n, "site": site, "url": f"http://127.0.0.1:{self.ports[n]}", "data_dir": n}
                for n, site in nodes
            ],
            "databases": databases,
            "guarantee_api": {
                "listen": f"127.0.0.1:{free_port()}",
                "http_listen": f"127.0.0.1:{free_port()}",
                "poll_interval": "200ms",
                "history_dir": "history",
            },
        }
        self.config_refresh = config_refresh
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.session: aiohttp.ClientSession | None = None
        self.write_config()

    @property
    def config_path(self) -> Path:
        return self.root / "cluster.yaml"

    def write_config(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        self.config_path.write_text(yaml.safe_dump(self.config, sort_keys=False))

    def url(self, node: str) -> str:
        return f"http://127.0.0.1:{self.ports[node]}"

    def env(self) -> dict[str, str]:
        return {**os.environ, "DG_AUTH_TOKEN": TOKEN, "PYTHONPATH": str(ROOT)}

    # ---- processes -------------------------------------------------------------------

    def start_node(self, node: str, *, env: dict[str, str] | None = None) -> None:
        log = open(self.root / f"{node}.log", "ab")  # noqa: SIM115 - the child owns it
        self.procs[node] = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "replication_node.cli.main",
                "serve",
                "--config",
                str(self.config_path),
                "--node",
                node,
                "--config-refresh",
                self.config_refresh,
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            env={**self.env(), **(env or {})},
            cwd=ROOT,
        )

    async def start(self, *nodes: str) -> None:
        names = nodes or tuple(self.ports)
        for node in names:
            self.start_node(node)
        if self.session is None:
            self.session = aiohttp.ClientSession(
                headers=bearer(TOKEN), timeout=aiohttp.ClientTimeout(total=30)
            )
        for node in names:
            await self.wait_healthy(node)

    async def wait_healthy(self, node: str, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            proc = self.procs[node]
            if proc.poll() is not None:
                raise RuntimeError(f"{node} exited: {self.log(node)[-2000:]}")
            try:
                async with self.session.get(f"{self.url(node)}/healthz") as resp:  # type: ignore[union-attr]
                    if resp.status == 200:
                        return
            except aiohttp.ClientError:
                pass
            await asyncio.sleep(0.05)
        raise TimeoutError(f"{node} not healthy: {self.log(node)[-2000:]}")

    def log(self, node: str) -> str:
        path = self.root / f"{node}.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def kill(self, node: str) -> None:
        proc = self.procs.pop(node)
        proc.send_signal(signal.SIGKILL)
        proc.wait()

    def terminate(self, node: str) -> None:
        proc = self.procs.pop(node)
        proc.terminate()
        proc.wait(timeout=30)

    async def close(self) -> None:
        for node in list(self.procs):
            self.terminate(node)
        if self.session:
            await self.session.close()

    # ---- HTTP ------------------------------------------------------------------------

    async def call(self, method: str, node: str, path: str, **kw: Any) -> tuple[int, Any]:
        async with self.session.request(method, f"{self.url(node)}{path}", **kw) as resp:  # type: ignore[union-attr]
            try:
                body = await resp.json()
            except aiohttp.ContentTypeError:
                body = await resp.read()
            return resp.status, body

    async def ok(self, method: str, node: str, path: str, **kw: Any) -> Any:
        status, body = await self.call(method, node, path, **kw)
        assert status < 300, f"{method} {path} on {node}: {status} {body}"
        return body

    async def status(self, node: str) -> dict[str, dict[str, Any]]:
        """The node's copies by database."""
        body = await self.ok("GET", node, "/v1/status")
        return {c["database"]: c for c in body["copies"]}

    async def items(self, node: str, db: str, mailbox: str) -> dict[str, dict[str, Any]]:
        body = await self.ok("GET", node, f"/v1/databases/{db}/mailboxes/{mailbox}/items")
        return {i["item_id"]: i for i in body["items"]}

    def node_cli(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        """Run `replication-node ARGS --config <this cluster's config>` as an operator would."""
        return subprocess.run(
            [
                sys.executable,
                "-m",
                "replication_node.cli.main",
                *args,
                "--config",
                str(self.config_path),
            ],
            capture_output=True,
            text=True,
            env=self.env(),
            cwd=ROOT,
            timeout=timeout,
        )

    async def start_guarantee_api(self, timeout: float = 30) -> subprocess.Popen[bytes]:
        """Start `guarantee-api serve` on this cluster's config; return once it is SERVING."""
        from grpc import aio
        from grpc_health.v1 import health_pb2, health_pb2_grpc

        log = open(self.root / "guarantee.log", "ab")  # noqa: SIM115 - the child owns it
        proc = subprocess.Popen(
            [sys.executable, "-m", "guarantee_api.cli", "serve", "--config", str(self.config_path)],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=self.env(),
            cwd=ROOT,
        )
        deadline = time.monotonic() + timeout
        async with aio.insecure_channel(self.config["guarantee_api"]["listen"]) as channel:
            health = health_pb2_grpc.HealthStub(channel)
            while time.monotonic() < deadline:
                if proc.poll() is not None:
                    raise RuntimeError(f"guarantee-api exited with {proc.returncode}")
                try:
                    reply = await health.Check(health_pb2.HealthCheckRequest(), timeout=1)
                    if reply.status == health_pb2.HealthCheckResponse.SERVING:
                        return proc
                except aio.AioRpcError:
                    pass
                await asyncio.sleep(0.1)
        proc.kill()
        raise TimeoutError("guarantee-api did not become SERVING")

    async def wait_status(self, node: str, database: str, status: str) -> None:
        """Wait until `node` reports its copy of `database` in `status` (e.g. Mounted)."""

        async def reached() -> bool:
            return (await self.status(node))[database]["status"] == status

        await self.wait_for(f"{database}\\{node} to be {status}", reached)

    async def wait_for(
        self, what: str, check: Callable[[], Awaitable[bool]], timeout: float = 60
    ) -> None:
        """Poll `check` until it is true; fail with `what` after `timeout` seconds."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                if await check():
                    return
            except (aiohttp.ClientError, AssertionError, KeyError):
                pass
            await asyncio.sleep(0.1)
        raise AssertionError(f"timed out waiting for {what}")


FAKETIME_LIB = Path("/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1")


def faketime_env(offset: str) -> dict[str, str]:
    """The environment that runs a process `offset` off the real clock (libfaketime, Debian's
    `faketime` package): both wall and monotonic time, as a whole machine's clock would be."""
    return {"LD_PRELOAD": str(FAKETIME_LIB), "FAKETIME": offset}


@contextlib.contextmanager
def size_limited_disk(where: Path, size: str) -> Iterator[Callable[[], None]]:
    """A tmpfs of `size` mounted at `where` (a node's data directory): a disk that fills.
    Yields a function that grows it to 256 MiB (space comes back).  Skips the test, with the
    reason, where mounting is not allowed."""
    import pytest

    where.mkdir(parents=True, exist_ok=True)
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)],
        capture_output=True,
        text=True,
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a size-limited tmpfs here: {mounted.stderr.strip()}")

    def grow() -> None:
        subprocess.run(["mount", "-o", "remount,size=256m", str(where)], check=True)

    try:
        yield grow
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)
