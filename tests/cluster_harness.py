"""The tests' one harness: real node processes on loopback (write a config with free ports,
start `replication-node serve` per node, talk to them over HTTP with the cluster token), and
what every test suite shares: `wait_until` (wait for a thing, never a fixed time),
`serve_app` (an aiohttp app on a port the OS picks), `cluster_config` (a config's dict)."""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import yaml
from aiohttp import web

from dag_common.auth import bearer
from replication_node.taskdump import TASK_DUMP_END
from tools.ports import free_port

ROOT = Path(__file__).resolve().parents[1]
TOKEN = "test-token-0123456789abcdef"
# The topology most tests over real processes run: two nodes in one site, one in another.
THREE_NODES = [("mbx1", "redmond"), ("mbx2", "redmond"), ("mbx3", "dublin")]
# Every node and guarantee-api process the harness starts, for tests/leftover_processes.py
# (one still running after its test's teardown is killed there, and the test fails).
STARTED: list[subprocess.Popen[bytes]] = []


Check = Callable[[], bool] | Callable[[], Awaitable[bool]]


async def wait_until(
    what: str,
    check: Check,
    *,
    timeout: float = 60,
    every: float = 0.02,
    tolerate: tuple[type[BaseException], ...] = (),
) -> None:
    """Wait until `check()` (plain or async) is true; fail naming `what` after `timeout`
    seconds.  `tolerate`: exceptions that mean "not yet" (a node still starting)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            result = check()
            if inspect.isawaitable(result):
                result = await result
            if result:
                return
        except tolerate:
            pass
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g}s waiting for {what}")
        await asyncio.sleep(every)


async def serve_app(
    app: web.Application, *, host: str = "127.0.0.1", port: int = 0
) -> tuple[web.AppRunner, str]:
    """Serve `app` on `port` (0: one the OS picks); its runner (to clean up) and base URL."""
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, host, port).start()
    address = runner.addresses[0]
    return runner, f"http://{host}:{address[1]}"


def cluster_config(
    nodes: list[tuple[str, str, str]],
    databases: list[dict[str, Any]],
    **sections: Any,
) -> dict[str, Any]:
    """A cluster config as a dict: `nodes` as (name, site, url), each node's data_dir its
    name; `sections` (defaults, guarantee_api, cluster_store, …) as given."""
    return {
        "cluster": "test",
        **sections,
        "nodes": [
            {"name": name, "site": site, "url": url, "data_dir": name} for name, site, url in nodes
        ],
        "databases": databases,
        "guarantee_api": sections.get("guarantee_api")
        or {"listen": f"127.0.0.1:{free_port()}", "http_listen": f"127.0.0.1:{free_port()}"},
    }


def write_cluster_config(path: Path, config: dict[str, Any]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def start_etcd(
    data: Path,
    *,
    server_cert: tuple[Path, Path] | None = None,
    client_ca: Path | None = None,
    auth_token: str | None = None,
    host: str = "127.0.0.1",
    prefix: list[str] | None = None,
) -> tuple[str, subprocess.Popen[bytes]]:
    """A one-member etcd (Debian's etcd-server) on free ports; its client URL and process.
    `host`: the address it listens on; `prefix`: the command it runs under (a netns).

    `server_cert` (certificate, key): clients speak https:// to it.  `client_ca`: etcd asks
    every client for a certificate signed by that CA (--client-cert-auth).  `auth_token`:
    etcd's --auth-token (`simple`, or `jwt,pub-key=...`), used once auth is enabled.  Readiness
    is read from /health on a plain metrics listener, which needs no client certificate."""
    binary = shutil.which("etcd")
    assert binary, "etcd is missing: install Debian's 'etcd-server' package (make system-deps does)"
    client, peer, metrics = free_port(), free_port(), free_port()
    scheme = "https" if server_cert else "http"
    url = f"{scheme}://{host}:{client}"
    args = [
        *(prefix or []),
        binary,
        "--data-dir", str(data / "member"),
        "--listen-client-urls", url,
        "--advertise-client-urls", url,
        "--listen-metrics-urls", f"http://{host}:{metrics}",
        "--listen-peer-urls", f"http://{host}:{peer}",
        "--initial-advertise-peer-urls", f"http://{host}:{peer}",
        "--initial-cluster", f"default=http://{host}:{peer}",
    ]  # fmt: skip
    if server_cert:
        args += ["--cert-file", str(server_cert[0]), "--key-file", str(server_cert[1])]
    if client_ca:
        args += ["--client-cert-auth", "--trusted-ca-file", str(client_ca)]
    if auth_token:
        args += ["--auth-token", auth_token]
    proc = subprocess.Popen(
        args,
        stdout=open(data / "etcd.log", "wb"),  # noqa: SIM115 - the child owns it
        stderr=subprocess.STDOUT,
    )
    deadline = time.monotonic() + 15
    while True:
        try:
            with urllib.request.urlopen(f"http://{host}:{metrics}/health", timeout=1) as resp:
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
        hosts: dict[str, str] | None = None,
        prefix: dict[str, list[str]] | None = None,
        cluster_store: dict[str, Any] | None = None,
    ) -> None:
        """`hosts`: the address each node listens on (127.0.0.1 if not named); `prefix`: the
        command each node's process runs under (`ip netns exec NS`); `cluster_store`: the
        config's cluster store (one embedded file if not given)."""
        self.root = root
        self.hosts = hosts or {}
        self.prefix = prefix or {}
        self.ports = {name: free_port() for name, _ in nodes}  # a new netns has all free
        self.config = cluster_config(
            [(n, site, self.url(n)) for n, site in nodes],
            databases,
            cluster_store=cluster_store or {"kind": "embedded", "path": "cluster.db"},
            defaults={"log_file_size": "64KiB", "llr_depth": 2, **(defaults or {})},
            guarantee_api={
                "listen": f"127.0.0.1:{free_port()}",
                "http_listen": f"127.0.0.1:{free_port()}",
                "poll_interval": "200ms",
                "history_dir": "history",
            },
        )
        self.config_refresh = config_refresh
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.session: aiohttp.ClientSession | None = None
        self.write_config()

    @property
    def config_path(self) -> Path:
        return self.root / "cluster.yaml"

    def write_config(self) -> None:
        write_cluster_config(self.config_path, self.config)

    def url(self, node: str) -> str:
        return f"http://{self.hosts.get(node, '127.0.0.1')}:{self.ports[node]}"

    def env(self) -> dict[str, str]:
        return {**os.environ, "DG_AUTH_TOKEN": TOKEN, "PYTHONPATH": str(ROOT)}

    # ---- processes -------------------------------------------------------------------

    def start_node(self, node: str, *, env: dict[str, str] | None = None) -> None:
        log = open(self.root / f"{node}.log", "ab")  # noqa: SIM115 - the child owns it
        self.procs[node] = subprocess.Popen(
            [
                *self.prefix.get(node, []),
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
        STARTED.append(self.procs[node])

    async def start(self, *nodes: str) -> None:
        names = nodes or tuple(self.ports)
        for node in names:
            self.start_node(node)
        if self.session is None:
            self.session = aiohttp.ClientSession(
                headers=bearer(TOKEN), timeout=aiohttp.ClientTimeout(total=30)
            )
        try:
            for node in names:
                await self.wait_healthy(node)
        except BaseException:
            # A fixture whose start fails never reaches its teardown: the nodes started here
            # would outlive the test and hold their ports (a CI run found two such nodes of a
            # failed setup still serving 45 minutes later).
            for node in names:
                if self.procs[node].poll() is None:
                    self.procs[node].kill()
                    self.procs[node].wait()
            raise

    async def wait_healthy(self, node: str, timeout: float = 30) -> None:
        async def healthy() -> bool:
            if self.procs[node].poll() is not None:
                raise RuntimeError(f"{node} exited: {self.log(node)[-2000:]}")
            async with self.session.get(f"{self.url(node)}/healthz") as resp:  # type: ignore[union-attr]
                return resp.status == 200

        try:
            await wait_until(
                f"{node} healthy", healthy, timeout=timeout, every=0.05,
                tolerate=(aiohttp.ClientError,),
            )  # fmt: skip
        except AssertionError:
            raise TimeoutError(f"{node} not healthy: {self.log(node)[-2000:]}") from None

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
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            # A node that does not stop: what it was waiting on, so that CI shows it.
            tail = self.dump_tasks(node, proc)
            proc.kill()
            proc.wait()
            raise AssertionError(f"node {node} did not stop within 30s; its log:\n{tail}") from None

    def dump_tasks(self, node: str, proc: subprocess.Popen[bytes] | None = None) -> str:
        """Every thread's stack (SIGUSR2, answered even while the event loop is stuck) and
        the tasks' whole await chains (SIGUSR1) into the node's log; the log's tail."""
        proc = proc or self.procs[node]
        before = len(self.log(node))
        proc.send_signal(signal.SIGUSR2)
        proc.send_signal(signal.SIGUSR1)
        deadline = time.monotonic() + 5
        while TASK_DUMP_END not in self.log(node)[before:] and time.monotonic() < deadline:
            time.sleep(0.05)  # until the dump ends in the log (or 5 s: its loop is stuck)
        return "\n".join(self.log(node).splitlines()[-300:])

    async def close(self) -> None:
        """Stop every node, the session closed, even when one of them does not stop: the
        first such failure is raised after the rest are down (one hung node must not leave
        the others running into the next test)."""
        failure: AssertionError | None = None
        for node in list(self.procs):
            try:
                self.terminate(node)
            except AssertionError as exc:
                failure = failure or exc
        if self.session:
            await self.session.close()
        if failure is not None:
            raise failure

    # ---- HTTP ------------------------------------------------------------------------

    async def call(self, method: str, node: str, path: str, **kw: Any) -> tuple[int, Any]:
        try:
            async with self.session.request(method, f"{self.url(node)}{path}", **kw) as resp:  # type: ignore[union-attr]
                try:
                    body = await resp.json()
                except aiohttp.ContentTypeError:
                    body = await resp.read()
                return resp.status, body
        except TimeoutError:
            # A node that never answered within the session's 30 s: what its request waits on
            # (a product bug to find).  A caller's own `timeout` expects it may not answer.
            if "timeout" in kw or node not in self.procs or self.procs[node].poll() is not None:
                raise
            tail = self.dump_tasks(node)
            raise AssertionError(
                f"{method} {path} on {node}: no answer; its log:\n{tail}"
            ) from None

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

    def node_cli(
        self, *args: str, timeout: float = 120, env: dict[str, str] | None = None
    ) -> subprocess.CompletedProcess[str]:
        """Run `replication-node ARGS --config <this cluster's config>` as an operator would
        (`env`: variables to set beside this cluster's, e.g. another token)."""
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
            env={**self.env(), **(env or {})},
            cwd=ROOT,
            timeout=timeout,
        )

    async def start_guarantee_api(
        self, timeout: float = 30, env: dict[str, str] | None = None
    ) -> subprocess.Popen[bytes]:
        """Start `guarantee-api serve` on this cluster's config; return once it is SERVING
        (`env`: variables to set beside this cluster's, e.g. libfaketime's)."""
        from grpc import aio
        from grpc_health.v1 import health_pb2, health_pb2_grpc

        log = open(self.root / "guarantee.log", "ab")  # noqa: SIM115 - the child owns it
        proc = subprocess.Popen(
            [sys.executable, "-m", "guarantee_api.cli", "serve", "--config", str(self.config_path)],
            stdout=log,
            stderr=subprocess.STDOUT,
            env={**self.env(), **(env or {})},
            cwd=ROOT,
        )
        STARTED.append(proc)
        deadline = time.monotonic() + timeout
        async with aio.insecure_channel(self.config["guarantee_api"]["listen"]) as channel:
            health = health_pb2_grpc.HealthStub(channel)
            while time.monotonic() < deadline:
                if proc.poll() is not None:
                    said = (self.root / "guarantee.log").read_text(errors="replace")[-2000:]
                    raise RuntimeError(f"guarantee-api exited with {proc.returncode}: {said}")
                try:
                    reply = await health.Check(health_pb2.HealthCheckRequest(), timeout=1)
                    if reply.status == health_pb2.HealthCheckResponse.SERVING:
                        return proc
                except aio.AioRpcError:
                    pass
                await asyncio.sleep(0.1)
        proc.kill()
        said = (self.root / "guarantee.log").read_text(errors="replace")[-2000:]
        raise TimeoutError(f"guarantee-api did not become SERVING: {said}")

    async def wait_status(self, node: str, database: str, status: str) -> None:
        """Wait until `node` reports its copy of `database` in `status` (e.g. Mounted)."""

        async def reached() -> bool:
            return (await self.status(node))[database]["status"] == status

        await self.wait_for(f"{database}\\{node} to be {status}", reached)

    async def lossy_failover(self, dead: str, to: str, database: str = "DB1") -> dict[str, Any]:
        """kill -9 `dead` (the active of `database`), then mount `to`'s copy as an operator
        does after a loss: resumed, seen DisconnectedAndHealthy, activated under
        BestAvailability, Mounted; the activation's answer (`lost_logs`, ...)."""
        self.kill(dead)
        await self.ok("POST", to, f"/v1/databases/{database}/copies/{to}/resume")
        await self.wait_status(to, database, "DisconnectedAndHealthy")
        activated = await self.ok(
            "POST", to, f"/v1/databases/{database}/activate",
            json={"node": to, "mount_dial_override": "BestAvailability"},
        )  # fmt: skip
        await self.wait_status(to, database, "Mounted")
        return activated

    async def wait_for(self, what: str, check: Check, timeout: float = 60) -> None:
        """`wait_until`, taking a node that does not answer yet as "not yet"."""
        await wait_until(
            what, check, timeout=timeout, every=0.1,
            tolerate=(aiohttp.ClientError, AssertionError, KeyError),
        )  # fmt: skip


FAKETIME_LIB = Path("/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1")


def libfaketime_env(**settings: str) -> dict[str, str]:
    """The environment that runs a process under libfaketime (Debian's `faketime` package)
    with `settings`, its FAKETIME* variables.  Wall time only: the monotonic clock is one
    per machine, and these node processes share one machine's embedded cluster store, whose
    leases expire by it (a node on another machine would use etcd, whose leases expire by
    etcd's clock).  Python's `time.sleep`, which libfaketime breaks with that setting, is
    mended at the process's start (`tests/faketime_site`)."""
    return {
        "LD_PRELOAD": str(FAKETIME_LIB),
        "FAKETIME_DONT_FAKE_MONOTONIC": "1",
        "PYTHONPATH": f"{ROOT / 'tests' / 'faketime_site'}{os.pathsep}{ROOT}",
        **settings,
    }


def faketime_env(offset: str) -> dict[str, str]:
    """The environment that runs a process `offset` off the real clock (`+2h`, `-90s`) for
    its whole life (`libfaketime_env`)."""
    return libfaketime_env(FAKETIME=offset)


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
