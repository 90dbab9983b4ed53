"""What runs while a fault strikes, and what it records: a writer (every answer to every
write, with the epoch and generation of an acknowledged one), a mover (a real `mrs move`
subprocess), and a recorder of the guarantee service's answers (Health for the move's
target, Flush for the writer's latest acknowledged write).

Nothing here judges: `invariants.py` reads what these recorded.  Every record is frozen and
carries the monotonic time it was made, so a fault's window can be laid over it.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import grpc

from guarantee_api._generated.dataguarantee.v1 import data_guarantee_pb2 as pb
from guarantee_api._generated.dataguarantee.v1 import data_guarantee_pb2_grpc as pb_grpc
from tests.cluster_harness import ROOT, TOKEN, LocalCluster

SHORT = aiohttp.ClientTimeout(total=3)


@dataclass(frozen=True)
class Answer:
    """One write and what came back (code 0: no answer: refused, reset or timed out)."""

    item: str
    node: str
    sent: float
    answered: float
    code: int
    epoch: int = 0
    generation: int = 0
    offset: int = 0
    error: str = ""

    @property
    def acked(self) -> bool:
        return 200 <= self.code < 300


async def find_active(cluster: LocalCluster, db: str, nodes: list[str]) -> str | None:
    """The node whose copy of `db` says Active and Mounted, asked with a short timeout."""
    for node in nodes:
        with contextlib.suppress(aiohttp.ClientError, TimeoutError, AssertionError, KeyError):
            status, body = await cluster.call("GET", node, "/v1/status", timeout=SHORT)
            for copy in body.get("copies", []) if status == 200 else []:
                if copy["database"] == db and (copy["role"], copy["status"]) == (
                    "Active",
                    "Mounted",
                ):
                    return node
    return None


@dataclass
class Writer:
    """Writes one item at a time to `db`'s active (found again after any failed write)."""

    cluster: LocalCluster
    db: str
    mailbox: str
    nodes: list[str]
    target: str
    prefix: str = "w"
    body: int = 300
    answers: list[Answer] = field(default_factory=list)
    stopped: bool = False

    async def run(self) -> None:
        path = f"/v1/databases/{self.db}/mailboxes/{self.mailbox}/items"
        i = 0
        while not self.stopped:
            item, node, sent = f"{self.prefix}{i}", self.target, time.monotonic()
            epoch = generation = offset = 0
            error = ""
            try:
                code, body = await self.cluster.call(
                    "POST",
                    node,
                    path,
                    json={"item_id": item, "subject": item, "body": "w" * self.body},
                    timeout=SHORT,
                )
                if isinstance(body, dict) and 200 <= code < 300:
                    epoch = body["epoch"]
                    generation, offset = body["lsn"]["generation"], body["lsn"]["offset"]
                elif isinstance(body, dict):
                    error = str(body.get("error", ""))
            except (aiohttp.ClientError, TimeoutError) as exc:
                code, error = 0, type(exc).__name__
            answer = Answer(
                item, node, sent, time.monotonic(), code, epoch, generation, offset, error
            )
            self.answers.append(answer)
            i += 1
            if answer.acked:
                await asyncio.sleep(0.02)  # pace the load, not a wait for readiness
            else:
                found = await find_active(self.cluster, self.db, self.nodes)
                self.target = found or self.target
                await asyncio.sleep(0.1)  # nothing mounted yet: ask again shortly

    def acked(self) -> list[Answer]:
        return [a for a in self.answers if a.acked]

    async def acks_after(
        self, n: int, since: float = 0.0, timeout: float = 120, node: str | None = None
    ) -> None:
        """Wait until `n` writes sent after `since` (to `node`, if named) are acknowledged."""
        deadline = time.monotonic() + timeout
        while (
            sum(1 for a in self.answers if a.acked and a.sent >= since and node in (None, a.node))
            < n
        ):
            if time.monotonic() > deadline:
                raise AssertionError(f"{n} acknowledged writes after the mark: timed out")
            await asyncio.sleep(0.05)

    async def answers_after(self, n: int, since: float, timeout: float = 120) -> None:
        """Wait until `n` writes sent after `since` got any answer (or none: a failed one)."""
        deadline = time.monotonic() + timeout
        while sum(1 for a in self.answers if a.sent >= since) < n:
            if time.monotonic() > deadline:
                raise AssertionError(f"{n} answers after the mark: timed out")
            await asyncio.sleep(0.05)


@dataclass(frozen=True)
class GuaranteeAnswer:
    """One answer of the guarantee service (status ERROR: the call itself failed)."""

    kind: str  # Health | Flush
    database: str
    at: float
    status: str  # SATISFIED | NOT_SATISFIED | RETRY | ERROR
    item: str = ""  # Flush: the write asked about
    reason: str = ""
    lost: bool = False


@dataclass
class Recorder:
    """Asks the guarantee service, over and over, about the move's target (Health) and the
    writer's latest acknowledged write (Flush by LSN with its epoch)."""

    address: str
    health_db: str
    writer: Writer
    answers: list[GuaranteeAnswer] = field(default_factory=list)
    stopped: bool = False

    async def run(self) -> None:
        meta = (("authorization", f"Bearer {TOKEN}"),)
        async with grpc.aio.insecure_channel(self.address) as channel:
            stub = pb_grpc.DataGuaranteeStub(channel)
            while not self.stopped:
                await self._ask(
                    "Health",
                    self.health_db,
                    "",
                    stub.CheckReplicationHealth(
                        pb.CheckReplicationHealthRequest(database=self.health_db, caller_id="r"),
                        metadata=meta,
                        timeout=2,
                    ),
                )
                acked = self.writer.acked()
                if acked:
                    last = acked[-1]
                    lsn = pb.Lsn(generation=last.generation, offset=last.offset, epoch=last.epoch)
                    request = pb.CheckReplicationFlushRequest(
                        database=self.writer.db, caller_id="r", lsn=lsn
                    )
                    await self._ask(
                        "Flush",
                        self.writer.db,
                        last.item,
                        stub.CheckReplicationFlush(request, metadata=meta, timeout=2),
                    )
                await asyncio.sleep(0.25)  # the pace of asking

    async def _ask(self, kind: str, db: str, item: str, call: Any) -> None:
        try:
            reply = await call
            status = pb.Status.Name(reply.status)
            self.answers.append(
                GuaranteeAnswer(kind, db, time.monotonic(), status, item, reply.reason, reply.lost)
            )
        except grpc.aio.AioRpcError as exc:
            self.answers.append(
                GuaranteeAnswer(kind, db, time.monotonic(), "ERROR", item, exc.code().name)
            )

    def counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for a in self.answers:
            key = f"{a.kind} {a.status}" + (f" {a.reason}" if a.status == "ERROR" else "")
            out[key] = out.get(key, 0) + 1
        return out


def mrs_command(cluster: LocalCluster, *args: str) -> list[str]:
    """`mrs ARGS` on the cluster's config and the suite's requests file."""
    return [
        sys.executable,
        "-m",
        "mrs_client.cli",
        *args,
        "--config",
        str(cluster.config_path),
        "--requests-db",
        str(cluster.root / "moves.db"),
    ]


@dataclass
class MoveRun:
    """One `mrs move` (or `mrs resume`) process: when it ran, how it ended, what it said."""

    args: tuple[str, ...]
    started: float = 0.0
    ended: float = 0.0
    returncode: int | None = None
    output: str = ""
    proc: asyncio.subprocess.Process | None = None


@dataclass
class Mover:
    """Runs the real mover as a subprocess (so a fault can kill or stop it), optionally under
    an environment of its own (libfaketime)."""

    cluster: LocalCluster
    env: dict[str, str] = field(default_factory=dict)
    runs: list[MoveRun] = field(default_factory=list)

    async def run(self, *args: str) -> MoveRun:
        run = MoveRun(tuple(args), started=time.monotonic())
        self.runs.append(run)
        run.proc = await asyncio.create_subprocess_exec(
            *mrs_command(self.cluster, *args),
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            env={**self.cluster.env(), **self.env},
            cwd=ROOT,
        )
        out, _ = await run.proc.communicate()
        run.output, run.returncode, run.ended = (
            out.decode(errors="replace"),
            run.proc.returncode,
            (time.monotonic()),
        )
        return run

    @property
    def current(self) -> MoveRun | None:
        return self.runs[-1] if self.runs else None

    def in_flight(self) -> bool:
        return self.current is not None and self.current.returncode is None

    def requests_db(self) -> Path:
        return self.cluster.root / "moves.db"
