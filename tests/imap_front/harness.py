"""An IMAP front process beside a LocalCluster: its users file and settings added to the
cluster's config, started on a free port, stopped; raw sockets for bad input."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

from argon2 import PasswordHasher

from tests.cluster_harness import ROOT, LocalCluster, wait_until
from tools.ports import free_port

# Cheap parameters for the tests' hashes (a login each test; the defaults take 64 MiB).
HASHER = PasswordHasher(time_cost=1, memory_cost=8192, parallelism=1)


class Front:
    """One `python -m imap_front serve` of `cluster`, named `name` (its certificate's)."""

    def __init__(
        self, cluster: LocalCluster, name: str, users: dict[str, tuple[str, str]], **imap: Any
    ) -> None:
        """`users`: name -> (mailbox, password); `imap`: the config's imap settings."""
        self.cluster = cluster
        self.name = name
        self.port = free_port()
        users_file = cluster.root / "imap-users.yaml"
        users_file.write_text(
            "".join(
                f"{user}:\n  mailbox: {mailbox}\n  password: '{HASHER.hash(password)}'\n"
                for user, (mailbox, password) in users.items()
            )
        )
        cluster.config["imap"] = {"users_file": str(users_file), "invalid_login_delay": 0, **imap}
        cluster.write_config()
        self.proc: subprocess.Popen[bytes] | None = None
        self.metrics_port = free_port()
        self.config_path = cluster.config_path  # another: the front sees other node urls

    @property
    def log_path(self) -> Path:
        return self.cluster.root / f"{self.name}.log"

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    async def start(self) -> None:
        log = open(self.log_path, "ab")  # noqa: SIM115 - the child owns it
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "imap_front", "serve", "--config",
             str(self.config_path), "--name", self.name, "--port", str(self.port),
             "--metrics-port", str(self.metrics_port)],
            stdout=log, stderr=subprocess.STDOUT, env=self.cluster.env(), cwd=ROOT,
        )  # fmt: skip
        proc = self.proc

        async def greets() -> bool:
            if proc.poll() is not None:
                raise RuntimeError(f"imap front exited: {self.log()[-2000:]}")
            reader, writer = await asyncio.open_connection("127.0.0.1", self.port)
            try:
                return (await reader.readline()).startswith(b"* OK")
            finally:
                writer.close()

        await wait_until("imap front greets", greets, timeout=30, every=0.05,
                         tolerate=(OSError,))  # fmt: skip

    def kill(self) -> None:
        """kill -9: the front's sessions end with no word to their clients."""
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
            self.proc = None

    def stop(self) -> None:
        if self.proc is None:
            return
        self.proc.terminate()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise AssertionError(f"imap front did not stop: {self.log()[-3000:]}") from None
        finally:
            self.proc = None


def raw_session(port: int, payload: bytes, *, quiet: float = 1.0) -> tuple[bytes, bool]:
    """Send `payload` after the greeting; what came back until quiet, and whether the front
    closed the connection."""
    with socket.create_connection(("127.0.0.1", port)) as s:
        s.settimeout(10)
        s.recv(4096)
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            s.sendall(payload)
        s.settimeout(quiet)
        out = b""
        try:
            while chunk := s.recv(65536):
                out += chunk
            return out, True
        except TimeoutError:
            return out, False
        except ConnectionResetError:
            return out, True
