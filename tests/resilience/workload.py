"""What runs while a fault strikes, and what it records: a writer (every answer to every
write, with the epoch and generation of an acknowledged one), a sender of messages to the
transport (every answer to every submission), a mover (a real `mrs move` subprocess), and
a recorder of the guarantee service's answers (Health for the move's target, Flush for the
writer's latest acknowledged write).

Nothing here judges: `invariants.py` reads what these recorded.  Every record is frozen and
carries the monotonic time it was made, so a fault's window can be laid over it.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import aiohttp
import grpc

from dag_common._generated.dataguarantee.v1 import data_guarantee_pb2 as pb
from dag_common._generated.dataguarantee.v1 import data_guarantee_pb2_grpc as pb_grpc
from tests.cluster_harness import ROOT, TOKEN, LocalCluster, wait_until
from tests.transport.harness import Hubs

T = TypeVar("T")

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
        await wait_until(
            f"{n} acknowledged writes after the mark",
            lambda: (
                sum(
                    1
                    for a in self.answers
                    if a.acked and a.sent >= since and node in (None, a.node)
                )
                >= n
            ),
            timeout=timeout,
            every=0.05,
        )

    async def answers_after(self, n: int, since: float, timeout: float = 120) -> None:
        """Wait until `n` writes sent after `since` got any answer (or none: a failed one)."""
        await wait_until(
            f"{n} answers after the mark",
            lambda: sum(1 for a in self.answers if a.sent >= since) >= n,
            timeout=timeout,
            every=0.05,
        )


@dataclass(frozen=True)
class Submission:
    """One submission of a message to the transport and what came back (code 0: no answer:
    refused, reset or timed out).  The message's subject is its id."""

    message_id: str
    sent: float
    answered: float
    code: int
    error: str = ""

    @property
    def accepted(self) -> bool:
        """201: queued durably; 200: the same id was accepted before."""
        return self.code in (200, 201)

    @property
    def refused(self) -> bool:
        """A definite no: 4xx (the message is wrong) or 503 (not accepted, submit again).
        Anything else not accepted (no answer, another 5xx) may have been accepted."""
        return 400 <= self.code < 500 or self.code == 503


@dataclass
class Sender:
    """Submits messages to the transport `hub` for `recipient`, a few a second, each with a
    unique id (its subject too) and a small body; one not accepted is submitted again under
    the same id, as a mail server does, up to `attempts` times, unless refused as wrong
    (4xx).  Every answer is recorded."""

    hubs: Hubs
    hub: str
    recipient: str
    prefix: str = "msg"
    pace: float = 0.25
    body: int = 100
    attempts: int = 3
    answers: list[Submission] = field(default_factory=list)
    stopped: bool = False

    async def run(self) -> None:
        n = 0
        while not self.stopped:
            message_id = f"<{self.prefix}{n}@resilience>"
            for _ in range(self.attempts):
                answer = await self._submit(message_id)
                self.answers.append(answer)
                if answer.accepted or 400 <= answer.code < 500 or self.stopped:
                    break
                await asyncio.sleep(self.pace)  # the sender's pause before submitting again
            n += 1
            await asyncio.sleep(self.pace)  # pace the load, not a wait for readiness

    async def _submit(self, message_id: str) -> Submission:
        message = {
            "message_id": message_id,
            "recipients": [self.recipient],
            "subject": message_id,
            "body": "t" * self.body,
        }
        sent = time.monotonic()
        error = ""
        try:
            code, body = await self.hubs.call(
                "POST", self.hub, "/v1/messages", json=message, timeout=SHORT
            )
            if isinstance(body, dict) and not 200 <= code < 300:
                error = str(body.get("error", ""))
        except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
            code, error = 0, type(exc).__name__
        return Submission(message_id, sent, time.monotonic(), code, error)

    def accepted(self) -> set[str]:
        return {a.message_id for a in self.answers if a.accepted}

    def counts(self) -> str:
        """Messages accepted, never answered (maybe accepted) and refused, in one word."""
        accepted = self.accepted()
        maybe = {a.message_id for a in self.answers if not a.refused} - accepted
        refused = {a.message_id for a in self.answers} - accepted - maybe
        return f"{len(accepted)}/{len(maybe)}/{len(refused)}"


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
    """Asks the guarantee service, over and over, about the health of `health_dbs` (the
    move's target, the writer's database) and the writer's latest acknowledged write (Flush
    by LSN with its epoch)."""

    address: str
    health_dbs: tuple[str, ...]
    writer: Writer
    answers: list[GuaranteeAnswer] = field(default_factory=list)
    stopped: bool = False
    pace: float = 0.2

    async def run(self) -> None:
        """Ask both questions every `pace` seconds, each call on its own (a frozen service
        leaves calls waiting while new ones are asked), until stopped."""
        meta = (("authorization", f"Bearer {TOKEN}"),)
        # reconnect within half a second of a restarted service, not grpc's growing backoff
        options = [
            ("grpc.initial_reconnect_backoff_ms", 100),
            ("grpc.min_reconnect_backoff_ms", 100),
            ("grpc.max_reconnect_backoff_ms", 500),
        ]
        calls: set[asyncio.Task[None]] = set()
        async with grpc.aio.insecure_channel(self.address, options=options) as channel:
            stub = pb_grpc.DataGuaranteeStub(channel)
            while not self.stopped:
                asks = [
                    self._ask(
                        "Health",
                        db,
                        "",
                        stub.CheckReplicationHealth(
                            pb.CheckReplicationHealthRequest(database=db, caller_id="r"),
                            metadata=meta,
                            timeout=2,
                        ),
                    )
                    for db in self.health_dbs
                ]
                acked = self.writer.acked()
                if acked:
                    last = acked[-1]
                    lsn = pb.Lsn(generation=last.generation, offset=last.offset, epoch=last.epoch)
                    request = pb.CheckReplicationFlushRequest(
                        database=self.writer.db, caller_id="r", lsn=lsn
                    )
                    asks.append(
                        self._ask(
                            "Flush",
                            self.writer.db,
                            last.item,
                            stub.CheckReplicationFlush(request, metadata=meta, timeout=2),
                        )
                    )
                for ask in asks:
                    task = asyncio.create_task(ask)
                    calls.add(task)
                    task.add_done_callback(calls.discard)
                await asyncio.sleep(self.pace)  # the pace of asking
            await asyncio.gather(*calls, return_exceptions=True)

    def answered(
        self, since: float, until: float | None = None, health_of: str | None = None
    ) -> list[GuaranteeAnswer]:
        """The service's own answers (not failed calls) recorded in [since, until]; only
        its Health answers about `health_of`, if named."""
        return [
            a
            for a in self.answers
            if a.status != "ERROR"
            and since <= a.at
            and (until is None or a.at <= until)
            and (health_of is None or (a.kind, a.database) == ("Health", health_of))
        ]

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
    ]


STEP_LINE = re.compile(r"^\S+ step (\d+): ")


@dataclass
class MoveRun:
    """One `mrs move` (or `mrs resume`) process: when it ran, how it ended, what it said
    (each line with the monotonic time it was read)."""

    args: tuple[str, ...]
    started: float = 0.0
    ended: float = 0.0
    returncode: int | None = None
    lines: list[tuple[float, str]] = field(default_factory=list)
    proc: asyncio.subprocess.Process | None = None

    @property
    def output(self) -> str:
        return "\n".join(line for _, line in self.lines)

    @property
    def recorded(self) -> bool:
        """Whether this run recorded a move request (`mrs move` says so in its first line)."""
        return any(" recorded: " in line for _, line in self.lines)

    def steps(self) -> list[tuple[float, int]]:
        """The steps this run started (its `step N: …` lines), with when each was read."""
        return [(t, int(m.group(1))) for t, line in self.lines if (m := STEP_LINE.match(line))]


@dataclass(frozen=True)
class MovePoint:
    """Where the move was at an instant: the step its last step line named (0: none yet)
    and whether an `mrs` process was still running it."""

    step: int
    running: bool

    @property
    def in_flight(self) -> bool:
        """Between step 3 (the initial sync) and step 9 (unlock target), still running."""
        return self.running and 3 <= self.step <= 9

    def __str__(self) -> str:
        where = f"step {self.step}" if self.step else "no step yet"
        return f"{where}{'' if self.running else ', mover not running'}"


@dataclass
class Mover:
    """Runs the real mover as a subprocess (so a fault can kill or stop it), optionally under
    an environment of its own (libfaketime), reading its progress lines as they come."""

    cluster: LocalCluster
    env: dict[str, str] = field(default_factory=dict)
    runs: list[MoveRun] = field(default_factory=list)
    said: asyncio.Event = field(default_factory=asyncio.Event)
    busy: int = 0  # moves asked for (`move`, `resume`) and not yet ended, retries included

    async def run(self, *args: str) -> MoveRun:
        self.busy += 1
        try:
            return await self._run(*args)
        finally:
            self.busy -= 1
            self._wake()

    async def _run(self, *args: str) -> MoveRun:
        run = MoveRun(tuple(args), started=time.monotonic())
        self.runs.append(run)
        run.proc = await asyncio.create_subprocess_exec(
            *mrs_command(self.cluster, *args),
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            env={**self.cluster.env(), **self.env},
            cwd=ROOT,
        )
        assert run.proc.stdout is not None
        async for raw in run.proc.stdout:
            run.lines.append((time.monotonic(), raw.decode(errors="replace").rstrip("\n")))
            self._wake()
        run.returncode = await run.proc.wait()
        run.ended = time.monotonic()
        return run

    async def move(self, *args: str, attempts: int = 20) -> MoveRun:
        """`mrs move ARGS` as an operator runs it: asked again while it fails (exit 1)
        without recording anything (a node that cannot answer at submit)."""
        self.busy += 1
        try:
            for _ in range(attempts - 1):
                run = await self._run("move", *args)
                if run.returncode != 1 or run.recorded:
                    return run
                await asyncio.sleep(0.5)  # the operator's pause before asking again
            return await self._run("move", *args)
        finally:
            self.busy -= 1
            self._wake()

    def _wake(self) -> None:
        self.said.set()
        self.said = asyncio.Event()

    async def wait_for_step(self, step: int, timeout: float = 120) -> MovePoint:
        """Wait until the move starts `step` or a later one (or no mover runs any more)."""

        def reached() -> MovePoint | None:
            point = self.point()
            return point if point.step >= step or self._ended() else None

        return await self._until_said(reached, f"the move at step {step}", timeout)

    async def wait_for_line(self, text: str, timeout: float = 120) -> bool:
        """Wait until the mover says a line containing `text`; False if it ended first."""

        def said() -> bool | None:
            if any(text in line for run in self.runs for _, line in run.lines):
                return True
            return False if self._ended() else None

        return await self._until_said(said, f"the mover saying {text!r}", timeout)

    def _ended(self) -> bool:
        return bool(self.runs) and not self.busy

    async def _until_said(self, check: Callable[[], T | None], what: str, timeout: float) -> T:
        """`check()` again at every line the mover says, until it is not None."""
        deadline = time.monotonic() + timeout
        while (found := check()) is None:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"{what}: timed out at {self.point()}")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.said.wait(), timeout=left)
        return found

    def steps_between(self, start: float, end: float) -> list[int]:
        """The steps the move started between `start` and `end` (monotonic)."""
        return [s for run in self.runs for t, s in run.steps() if start <= t <= end]

    def point(self, at: float | None = None) -> MovePoint:
        """Where the move was at `at` (now, if None): the last step line read by then."""
        at = time.monotonic() if at is None else at
        steps = [s for run in self.runs for t, s in run.steps() if t <= at]
        current = self.current
        running = (
            current is not None
            and current.started <= at
            and (current.returncode is None or current.ended > at)
        )
        return MovePoint(steps[-1] if steps else 0, running)

    @property
    def current(self) -> MoveRun | None:
        return self.runs[-1] if self.runs else None

    def in_flight(self) -> bool:
        return self.current is not None and self.current.returncode is None
