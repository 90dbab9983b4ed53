"""A transport process beside a LocalCluster: added to its config, started, asked, killed."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import aiohttp

from tests.cluster_harness import ROOT, LocalCluster, wait_until
from tools.ports import free_port


class Hubs:
    """The transports of `cluster`, as processes."""

    def __init__(
        self, cluster: LocalCluster, *names: str, scheme: str = "http", mail_ports: bool = False,
        **settings: Any,
    ) -> None:  # fmt: skip
        """`mail_ports`: each transport gets an SMTP and an LMTP port (smtp_ports, lmtp_ports)."""
        self.cluster = cluster
        self.scheme = scheme
        self.ports = {name: free_port() for name in names}
        self.smtp_ports = {name: free_port() for name in names} if mail_ports else {}
        self.lmtp_ports = {name: free_port() for name in names} if mail_ports else {}
        cluster.config["transports"] = [
            {"name": n, "site": "redmond", "url": self.url(n), "data_dir": n,
             **({"smtp_port": self.smtp_ports[n], "lmtp_port": self.lmtp_ports[n]}
                if mail_ports else {})}
            for n in names
        ]  # fmt: skip
        cluster.config["transport"] = {
            "redelivery_interval": "200ms", "retry_interval": "50ms",
            "retry_max_interval": "500ms", **settings,
        }  # fmt: skip
        cluster.write_config()
        self.procs: dict[str, subprocess.Popen[bytes]] = {}

    def url(self, name: str) -> str:
        return f"{self.scheme}://127.0.0.1:{self.ports[name]}"

    def log(self, name: str) -> str:
        path = self.cluster.root / f"{name}.log"
        return path.read_text(errors="replace") if path.exists() else ""

    async def start(self, name: str) -> None:
        log = open(self.cluster.root / f"{name}.log", "ab")  # noqa: SIM115 - the child owns it
        proc = subprocess.Popen(
            [sys.executable, "-m", "transport.cli", "serve", "--config",
             str(self.cluster.config_path), "--name", name],
            stdout=log, stderr=subprocess.STDOUT, env=self.cluster.env(), cwd=ROOT,
        )  # fmt: skip
        self.procs[name] = proc

        async def healthy() -> bool:
            if proc.poll() is not None:
                raise RuntimeError(f"transport {name} exited: {self.log(name)[-2000:]}")
            status, _ = await self.call("GET", name, "/healthz")
            return status == 200

        await wait_until(f"transport {name} healthy", healthy, timeout=30, every=0.05,
                         tolerate=(aiohttp.ClientError,))  # fmt: skip

    def kill(self, name: str) -> None:
        proc = self.procs.pop(name)
        proc.kill()
        proc.wait()

    def stop_all(self) -> None:
        for name in list(self.procs):
            proc = self.procs.pop(name)
            proc.terminate()
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
                tail = self.log(name)[-3000:]
                raise AssertionError(f"transport {name} did not stop: {tail}") from None

    async def call(self, method: str, name: str, path: str, **kw: Any) -> tuple[int, Any]:
        session = self.cluster.session
        assert session is not None
        async with session.request(method, self.url(name) + path, **kw) as resp:
            return resp.status, await resp.json(content_type=None)

    async def submit(self, name: str, message_id: str, *to: str, body: str = "") -> tuple[int, Any]:
        message = {
            "message_id": message_id,
            "recipients": list(to),
            "subject": f"subject of {message_id}",
            "body": body or f"body of {message_id}",
        }
        return await self.call("POST", name, "/v1/messages", json=message)  # fmt: skip

    async def drained(self, name: str, timeout: float = 60) -> dict[str, Any]:
        """Wait until nothing waits in the transport's queue; its /v1/queue."""
        state: dict[str, Any] = {}

        async def empty() -> bool:
            nonlocal state
            _, state = await self.call("GET", name, "/v1/queue")
            return state["waiting"] == 0 and state["deliveries"]["Queued"] == 0

        await wait_until(f"transport {name} drained", empty, timeout=timeout, every=0.05)
        return state


def tls_mail_hub(cluster: LocalCluster, name: str = "hub1") -> Hubs:
    """One transport `name` over HTTPS (a TlsCluster's certificate for it) with its SMTP and
    LMTP listeners, trusting 127.0.0.1 and naming itself `<name>.test`."""
    mail = {"trusted_networks": ["127.0.0.1/32"], "hostname": f"{name}.test"}
    return Hubs(cluster, name, scheme="https", mail_ports=True, mail=mail)


def queued_messages(queue: Path) -> dict[str, tuple[bytes, list[str]]]:
    """Message id -> (its bytes, its recipients), read from a transport's queue file `queue`
    and its body files (`transport/bodies.py`), read-only."""
    with sqlite3.connect(f"file:{queue}?mode=ro", uri=True) as conn:
        out = {}
        for message_id, body, file in conn.execute("SELECT message_id, body, file FROM messages"):
            to = [r for (r,) in conn.execute(
                "SELECT recipient FROM deliveries WHERE message_id=? ORDER BY id", (message_id,)
            )]  # fmt: skip
            if file is not None:
                body = (queue.parent / f"{queue.name}.bodies" / file).read_bytes()
            out[message_id] = (bytes(body), to)
        return out
