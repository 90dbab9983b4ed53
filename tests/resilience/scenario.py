"""One scenario's life over the namespace lab: the cluster (three nodes in two sites and
etcd, each in its own namespace; the guarantee service, a transport and the mover in the
root namespace), the load (a writer on DB1, messages through the transport to a mailbox on
DB1, a move of a mailbox from DB1 to DB2, the guarantee recorder), the fault the test
injects at a point its seed chooses, the healing, and then the reading of every copy, the
transport's queue drained, and the invariants, ending in one line of figures and a failure
that names the scenario, its seed and every invariant broken.

Mailboxes on DB1: bob (the writer's), alice (the move's, to DB2), carol (the transport's).

DB1 (the writer's and the move's source): mbx1, mbx2 (redmond), mbx3 (dublin), mbx1 first.
DB2 (the move's target, SecondCopy): mbx2, mbx3, mbx1, mbx2 first.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import signal
import subprocess
import time
from collections.abc import AsyncIterator
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from dag_common.config import load_config
from dag_common.model import GuaranteeStatus
from mrs_client.move_store import open_move_store
from mrs_client.move_store.interface import MoveRecord, MoveStore
from mrs_client.policy import MoveStep
from tests.cluster_harness import THREE_NODES, LocalCluster, wait_until
from tests.mrs_client.e2e import live, shorten_guarantee_waits
from tests.mrs_client.e2e import seed as seed_mailbox
from tests.netns import NetnsLab, NetnsUnavailable, cluster_in_namespaces
from tests.replication_node.e2e import converged as rolled_and_replayed
from tests.resilience import invariants as inv
from tests.resilience.conftest import LINES
from tests.resilience.faults import Faults
from tests.resilience.workload import (
    SHORT,
    Answer,
    MovePoint,
    Mover,
    Recorder,
    Sender,
    Writer,
    find_active,
)
from tests.transport.harness import Hubs

NODES = [n for n, _ in THREE_NODES]
COPIES = {
    "DB1": frozenset({"mbx1", "mbx2", "mbx3"}),
    "DB2": frozenset({"mbx2", "mbx3", "mbx1"}),
}
NEEDED = 2  # SecondCopy: the active and one more copy
TTL = "3s"
MIN_ANSWERS = 5  # the service's answers a guarantee fault's window must hold
# The longest the guarantee service may leave every call unanswered (the recorder asks
# three questions five times a second, each with a 2 s deadline) outside a fault on it.
SILENCE_LIMIT = 5.0
HUB = "hub1"  # the lab's transport
MAIL = "carol"  # its recipient, on DB1 (the writer's database)
SETTLE = 120  # seconds the end waits for a settling step (convergence, a drained queue)
# What a call to a node or the transport may raise while it cannot answer yet: "not yet".
UNANSWERED = (aiohttp.ClientError, AssertionError, KeyError, TimeoutError, ValueError)


class LabHubs(Hubs):
    """The lab's transports, listening on the bridge's address (`host`): the nodes, each in
    its own namespace, must reach them to ask for a dumpster redelivery."""

    def __init__(self, cluster: LocalCluster, host: str, *names: str, **settings: Any) -> None:
        self.host = host  # before Hubs writes the config with each url
        super().__init__(cluster, *names, **settings)

    def url(self, name: str) -> str:
        return f"http://{self.host}:{self.ports[name]}"


def databases(
    dial: str,
    block_mode: bool,
    synchronous_copies: int | None = None,
    copy_extra: dict[tuple[str, str], dict[str, Any]] | None = None,
) -> list[dict[str, Any]]:
    """The two databases; `copy_extra[(db, node)]`: a copy's own settings (a replay lag)."""
    extra = copy_extra or {}
    dbs = [
        {
            "name": "DB1",
            "auto_database_mount_dial": dial,
            "block_mode": block_mode,
            **({"synchronous_copies": synchronous_copies} if synchronous_copies else {}),
            "copies": [
                {"node": "mbx1", "activation_preference": 1},
                {"node": "mbx2", "activation_preference": 2},
                {"node": "mbx3", "activation_preference": 3},
            ],
        },
        {
            "name": "DB2",
            "auto_database_mount_dial": dial,
            "data_move_replication_constraint": "SecondCopy",
            "copies": [
                {"node": "mbx2", "activation_preference": 1},
                {"node": "mbx3", "activation_preference": 2},
                {"node": "mbx1", "activation_preference": 3},
            ],
        },
    ]
    for db in dbs:
        for copy in db["copies"]:
            copy.update(extra.get((db["name"], copy["node"]), {}))
    return dbs


@dataclass
class Scenario:
    """A running scenario: the lab, the cluster, the load, the faults and what was seen."""

    name: str
    seed: int
    net: NetnsLab
    cluster: LocalCluster
    api: subprocess.Popen[bytes]
    rng: random.Random
    writer: Writer
    recorder: Recorder
    mover: Mover
    hubs: Hubs
    sender: Sender
    faults: Faults = field(default_factory=Faults)
    notes: list[str] = field(default_factory=list)
    tasks: list[asyncio.Task[Any]] = field(default_factory=list)
    move_task: asyncio.Task[Any] | None = None
    fault_at: float = 0.0
    at_fault: MovePoint | None = None  # where the move was when the fault struck
    claims_in_flight: bool = False  # the scenario says its fault strikes a move in flight
    expectations: list[inv.Violation] = field(default_factory=list)  # the scenario's own
    kept: set[str] = field(default_factory=set)  # the writer's items on DB1's final active
    stopped_on_purpose: set[str] = field(default_factory=set)
    move_store: MoveStore | None = None  # opened at its first read, closed at the end

    # ---- the load ------------------------------------------------------------------

    def start_load(self, *, move: bool = True) -> None:
        self.tasks.append(asyncio.create_task(self.writer.run()))
        self.tasks.append(asyncio.create_task(self.sender.run()))
        self.tasks.append(asyncio.create_task(self.recorder.run()))
        if move:
            self.move_task = asyncio.create_task(
                self.mover.move("--mailbox", "alice", "--to", "DB2", *FAST_MOVE)
            )

    async def fault_point(self, first: int = 3, last: int = 8) -> None:
        """Wait for the move to start a step the seed chooses (its own progress line) and
        mark the fault's time there: the scenario claims the move is in flight at it."""
        step = self.rng.randint(first, last)
        if step == MoveStep.INITIAL_SYNC:  # the long step: somewhere inside it
            share = self.rng.choice([0.0, 0.25, 0.5, 0.75])
            await self.mover.wait_for_step(step)

            async def copied() -> bool:
                return await self._items_copied() >= share * ALICE or not self.mover.busy

            await wait_until(f"{share:.0%} of alice copied", copied, timeout=120, every=0.02)
            self.notes.append(f"{share:.0%} of the initial sync done")
        await self.move_reached(step)
        self.claims_in_flight = True

    async def _records(self) -> list[MoveRecord]:
        """The move requests, read from the move store in the cluster store (etcd here)."""
        if self.move_store is None:
            self.move_store = open_move_store(load_config(self.cluster.config_path))
        return await self.move_store.list()

    async def satisfied_steps(self, before: datetime) -> set[int]:
        """The steps at which the mover was answered Satisfied before `before` (wall time),
        as its move record keeps its guarantee answers (`mrs stats`)."""
        await self._records()
        assert self.move_store is not None
        return {
            row.step
            for record in await self.move_store.list()
            for row in await self.move_store.answers(record.id)
            if row.status == GuaranteeStatus.SATISFIED and datetime.fromisoformat(row.time) < before
        }

    async def _items_copied(self) -> int:
        """How many items the move's record says it has copied (0: no record yet)."""
        return max((r.items_copied for r in await self._records()), default=0)

    async def move_reached(self, step: int, timeout: float = 120) -> MovePoint:
        """Wait until the move starts `step` (or a later one, or ends); mark the fault's
        time and where the move was then."""
        await self.mover.wait_for_step(step, timeout=timeout)
        self.fault_at = time.monotonic()
        self.at_fault = self.mover.point(self.fault_at)
        return self.at_fault

    async def move_said(self, text: str) -> MovePoint:
        """Wait until the mover says `text` (the line it prints before a question it waits
        on); mark the fault's time there: the scenario claims the move is in flight."""
        await self.mover.wait_for_line(text)
        self.fault_at = time.monotonic()
        self.at_fault = self.mover.point(self.fault_at)
        self.claims_in_flight = True
        return self.at_fault

    async def guarantee_heard(self, since: float, n: int = MIN_ANSWERS) -> int:
        """Wait until the recorder has `n` answers of the service (not failed calls) about
        DB2's health since `since`; a violation is kept if it never has."""

        def heard() -> int:
            return len(self.recorder.answered(since, health_of="DB2"))

        try:
            await wait_until(f"{n} answers of the guarantee service", lambda: heard() >= n)
        except AssertionError:
            self.expectations.append(
                inv.Violation("too-few-answers", f"{heard()} Health answers since the heal")
            )
        return heard()

    async def move_id(self) -> str:
        return (await self._records())[-1].id

    async def probe(self, node: str, n: int) -> int:
        """Write `n` items straight to `node` (a stale active, say), recorded with the
        writer's answers; how many it acknowledged."""
        kept = (self.writer.target, self.writer.prefix)
        acked = 0
        for i in range(n):
            code, body = await self.cluster.call(
                "POST",
                node,
                f"/v1/databases/{self.writer.db}/mailboxes/bob/items",
                json={"item_id": f"probe-{node}-{len(self.writer.answers)}-{i}"},
                timeout=SHORT,
            )
            now = time.monotonic()
            ok = 200 <= code < 300 and isinstance(body, dict)
            self.writer.answers.append(
                Answer(
                    f"probe-{node}-{len(self.writer.answers)}-{i}",
                    node,
                    now,
                    now,
                    code,
                    body["epoch"] if ok else 0,
                    body["lsn"]["generation"] if ok else 0,
                )
            )
            acked += ok
        self.writer.target, self.writer.prefix = kept
        return acked

    async def reseed_failed(self) -> None:
        """The operator's part: reseed every copy that stopped and asks for one."""
        for db, nodes in COPIES.items():
            for node in sorted(nodes):
                try:
                    copy = await self.copy_state(node, db)
                except (aiohttp.ClientError, AssertionError, KeyError, TimeoutError):
                    continue
                if copy["status"] in ("FailedAndSuspended", "Failed") and copy["role"] != "Active":
                    await self.cluster.ok("POST", node, f"/v1/databases/{db}/copies/{node}/reseed")
                    self.notes.append(f"reseeded {db}\\{node} ({(copy.get('error') or '')[:80]})")

    async def restart_api(self, env: dict[str, str] | None = None) -> None:
        self.api = await self.cluster.start_guarantee_api(env=env)

    # ---- waiting -------------------------------------------------------------------

    async def mounted_elsewhere(self, db: str, old: str, timeout: float = 90) -> str:
        """Wait until a copy of `db` other than `old` is the mounted active; that node."""
        others = [n for n in NODES if n != old]
        found: list[str] = []

        async def check() -> bool:
            node = await find_active(self.cluster, db, others)
            found.append(node or "")
            return node is not None

        await self.cluster.wait_for(f"{db} mounted on one of {others}", check, timeout=timeout)
        return found[-1]

    async def active(self, db: str, timeout: float = 120) -> str:
        found: list[str] = []

        async def check() -> bool:
            node = await find_active(self.cluster, db, list(self.cluster.procs))
            found.append(node or "")
            return node is not None

        await self.cluster.wait_for(f"a mounted copy of {db}", check, timeout=timeout)
        return found[-1]

    async def copy_state(self, node: str, db: str) -> dict[str, Any]:
        return (await self.cluster.status(node))[db]

    # ---- the end -------------------------------------------------------------------

    async def finish(self) -> None:
        """Stop the load, let the move end, read every copy, check every invariant, print the
        line; fail naming the scenario, the seed and each invariant broken."""
        violations: list[inv.Violation] = list(self.expectations)
        self.writer.stopped = self.recorder.stopped = self.sender.stopped = True
        asked_until = time.monotonic()
        await asyncio.gather(*self.tasks, return_exceptions=True)
        faults = self.faults.close()
        if self.move_task is not None:
            try:
                await asyncio.wait_for(asyncio.shield(self.move_task), timeout=240)
            except TimeoutError:
                violations.append(
                    inv.Violation("move-not-finished", "the mover ran on 240s after healing")
                )
        actives: dict[str, str] = {}
        for db in ("DB1", "DB2"):
            try:
                actives[db] = await self.active(db)
                passives = [n for n in COPIES[db] if n != actives[db]]
                await self.cluster.wait_for(
                    f"{db} converged",
                    lambda db=db, passives=passives: self._rolled(db, actives[db], passives),
                    timeout=SETTLE,
                )
            except AssertionError as exc:
                states = await self._states(db)
                violations.append(inv.Violation("not-converged", f"{db}: {exc}; {states}"))
        held1 = await self._held("DB1", "bob")
        history = await self._history("DB1")
        if "DB1" in actives:
            on_active = set(held1.get(actives["DB1"], {}))
            violations += inv.acknowledged_writes_kept(self.writer.answers, on_active, history)
            violations += inv.converged(held1, actives["DB1"])
            lost = {a.item for a in self.writer.acked()} - on_active
            self.kept = on_active
        else:
            lost = set()
        violations += inv.one_writer_per_epoch(self.writer.answers)
        held_mail = -1
        if "DB1" in actives:
            mail, settled = await self._mail_settled(actives["DB1"])
            violations += settled
            violations += inv.messages_delivered_once(self.sender.answers, mail)
            held_mail = len(mail)
        violations += await self._no_poison()
        moves = await self._moves(actives.get("DB1"))
        if "DB2" in actives and "DB1" in actives:
            source = live(await self._items(actives["DB1"], "DB1", "alice"))
            target = {n: live(await self._items(n, "DB2", "alice")) for n in COPIES["DB2"]}
            violations += inv.moves_kept(moves, source, target, NEEDED)
            violations += inv.converged(await self._held("DB2", "alice"), actives["DB2"])
        errors = {f"{n} log": self.cluster.log(n) for n in NODES}
        violations += inv.no_needed_log_truncated(errors)
        violations += inv.no_false_satisfied(
            self.recorder.answers,
            lost_items=lost,
            faults=faults,
            copies=COPIES,
            needed=NEEDED,
            grace=GRACE,
        )
        violations += inv.service_kept_answering(
            self.recorder.answers, faults, until=asked_until, limit=SILENCE_LIMIT
        )
        exits = {n: p.poll() for n, p in self.cluster.procs.items()}
        exits["guarantee-api"] = self.api.poll()
        exits |= {f"transport {n}": p.poll() for n, p in self.hubs.procs.items()}
        violations += inv.processes_alive(exits)
        if self.claims_in_flight and not (self.at_fault and self.at_fault.in_flight):
            violations.append(
                inv.Violation(
                    "move-not-in-flight",
                    f"the fault was to strike the move between steps 3 and 9: {self.at_fault}",
                )
            )
        epochs = max((e.epoch for e in history), default=0)
        acked = len(self.writer.acked())
        line = (
            f"{self.name} seed={self.seed}: fault={faults_line(faults)} "
            f"{'; '.join(self.notes)}; writes acked={acked} "
            f"refused={len(self.writer.answers) - acked} lost={len(lost)} epochs={epochs} "
            f"move={'/'.join(m.state for m in moves) or '-'}"
            f" (mrs exit {','.join(str(r.returncode) for r in self.mover.runs) or '-'})"
            f" at the fault: {self.at_fault or '-'}"
            f"{' (in flight)' if self.at_fault and self.at_fault.in_flight else ''} "
            f"messages accepted/unanswered/refused={self.sender.counts()} held={held_mail} "
            f"guarantee={self.recorder.counts()} violations={len(violations)}"
        )
        LINES.append(line)
        print(line)
        for run in self.mover.runs:  # shown with -s, and kept in the record
            for t, said in run.lines:
                print(f"  mrs +{t - run.started:6.2f}s {said}")
        if violations:
            record = self.cluster.root / "record.json"
            record.write_text(
                json.dumps(
                    {
                        "writes": [asdict(a) for a in self.writer.answers],
                        "guarantee": [asdict(a) for a in self.recorder.answers],
                        "messages": [asdict(a) for a in self.sender.answers],
                        "faults": [asdict(w) | {"down": sorted(w.down)} for w in faults],
                        "history": [asdict(e) for e in history],
                        "lost": sorted(lost),
                        "mover": [
                            {"args": r.args, "exit": r.returncode, "lines": r.lines}
                            for r in self.mover.runs
                        ],
                    },
                    indent=1,
                )
            )
            raise AssertionError(
                f"scenario {self.name} (--seed {self.seed}) broke "
                + "; ".join(str(v) for v in dict.fromkeys(str(v) for v in violations[:12]))
                + f" (what was recorded: {record})"
            )

    async def _mail_settled(self, active: str) -> tuple[dict[str, str], list[inv.Violation]]:
        """Wait until no redelivery of DB1 is still asked of a transport (a lossy failover's
        new active asks every redelivery_interval until each answers) and the transport's
        queue has drained; then the transport's mailbox on DB1's active (item id -> subject,
        live items), and a violation for each wait that timed out."""
        out: list[inv.Violation] = []
        seen: dict[str, Any] = {}

        async def answered() -> bool:
            seen["redelivery"] = (
                await self.cluster.ok("GET", active, "/v1/databases/DB1/history")
            )["redelivery"]
            return not (seen["redelivery"] or {}).get("required")

        async def drained() -> bool:
            _, seen["queue"] = await self.hubs.call("GET", HUB, "/v1/queue", timeout=SHORT)
            return seen["queue"]["waiting"] == 0 and seen["queue"]["deliveries"]["Queued"] == 0

        for what, check, name in (
            ("DB1's dumpster redelivery answered", answered, "redelivery-not-answered"),
            (f"transport {HUB} drained", drained, "transport-not-drained"),
        ):
            try:
                await wait_until(what, check, timeout=SETTLE, every=0.1, tolerate=UNANSWERED)
            except AssertionError as exc:
                out.append(inv.Violation(name, f"{exc}: {seen}"))
        if (seen.get("redelivery") or {}).get("summary"):
            self.notes.append(f"DB1 {seen['redelivery']['summary']}")
        items = await self._items(active, "DB1", MAIL)
        return {k: v["subject"] for k, v in items.items() if not v["deleted"]}, out

    async def _no_poison(self) -> list[inv.Violation]:
        try:
            _, queue = await self.hubs.call("GET", HUB, "/v1/queue", timeout=SHORT)
            _, poison = await self.hubs.call("GET", HUB, "/v1/poison", timeout=SHORT)
            return inv.no_poison(queue["deliveries"]["Poison"], poison["poison"])
        except UNANSWERED as exc:
            return [inv.Violation("transport-unreadable", f"{HUB}: {type(exc).__name__} {exc}")]

    async def _rolled(self, db: str, active: str, passives: list[str]) -> bool:
        await rolled_and_replayed(self.cluster, db, active, passives)
        return True

    async def _states(self, db: str) -> str:
        out = []
        for node in COPIES[db]:
            try:
                c = await self.copy_state(node, db)
                out.append(
                    f"{node} {c['role']}/{c['status']} replayed={c['last_log_replayed']} "
                    f"error={c.get('error')}"
                )
            except (aiohttp.ClientError, AssertionError, KeyError, TimeoutError) as exc:
                out.append(f"{node} unreadable ({type(exc).__name__})")
        return ", ".join(out)

    async def _items(self, node: str, db: str, mailbox: str) -> dict[str, dict[str, Any]]:
        status, body = await self.cluster.call(
            "GET", node, f"/v1/databases/{db}/mailboxes/{mailbox}/items"
        )
        if status == 404:
            return {}
        assert status == 200, f"items of {mailbox} on {node}/{db}: {status} {body}"
        return {i["item_id"]: i for i in body["items"]}

    async def _held(self, db: str, mailbox: str) -> dict[str, dict[str, object]]:
        out: dict[str, dict[str, object]] = {}
        for node in COPIES[db]:
            items = await self._items(node, db, mailbox)
            out[node] = {
                k: (v["subject"], v["deleted"], hash(v.get("body"))) for k, v in items.items()
            }
        return out

    async def _history(self, db: str) -> list[inv.Epoch]:
        body = await self.cluster.ok("GET", NODES[0], f"/v1/databases/{db}/history")
        return [inv.Epoch.from_json(row) for row in body["epochs"]]

    async def _moves(self, source_active: str | None) -> list[inv.MoveOutcome]:
        records = await self._records()
        soft_deleted = False
        if source_active is not None:
            status, box = await self.cluster.call(
                "GET", source_active, "/v1/databases/DB1/mailboxes/alice"
            )
            soft_deleted = status == 200 and bool(box.get("soft_deleted"))
        return [inv.MoveOutcome(r.id, str(r.state), soft_deleted) for r in records]


GRACE = 3.0  # how stale the guarantee service's view of a copy may be (pushes, 200 ms polls)

# A move of ALICE items, SYNC_BATCH to a write: its steps 3 to 9 last seconds, not a
# blink, so a fault timed against its progress lines strikes it in flight.
ALICE = 600
SYNC_BATCH = "3"
FAST_MOVE = [
    "--sync-batch",
    SYNC_BATCH,
    "--health-check-interval",
    "200ms",
    "--stall-retry-interval",
    "300ms",
    "--flush-retry-interval",
    "200ms",
    "--stall-limit",
    "120s",
]


def faults_line(windows: list[inv.FaultWindow]) -> str:
    return "+".join(f"{w.name}({w.ended - w.started:.1f}s)" for w in windows) or "-"


@contextlib.asynccontextmanager
async def scenario(
    tmp_path: Path,
    name: str,
    seed: int,
    *,
    dial: str = "BestAvailability",
    block_mode: bool = True,
    node_env: dict[str, dict[str, str]] | None = None,
    mover_env: dict[str, str] | None = None,
    api_env: dict[str, str] | None = None,
    before_start: Any = None,
    synchronous_copies: int | None = None,
    copy_extra: dict[tuple[str, str], dict[str, Any]] | None = None,
    defaults: dict[str, Any] | None = None,
) -> AsyncIterator[Scenario]:
    """The lab up with the load's mailboxes seeded, everything replayed; torn down after.
    `node_env`: a node's extra environment (libfaketime); `before_start(cluster)`: runs
    once the config is written, before any node starts (a disk mounted under a node)."""
    scope = cluster_in_namespaces(
        tmp_path,
        nodes=THREE_NODES,
        databases=databases(dial, block_mode, synchronous_copies, copy_extra),
        defaults={"failover_after": "2s", "lease_ttl": TTL, **(defaults or {})},
    )
    try:
        net, cluster = await scope.__aenter__()
    except NetnsUnavailable as exc:
        pytest.skip(f"network namespaces cannot be made here: {exc}")
    api = None
    run: Scenario | None = None
    hubs: Hubs | None = None
    try:
        shorten_guarantee_waits(cluster)
        hubs = LabHubs(cluster, net.gateway, HUB)
        if before_start is not None:
            before_start(cluster)
        for node, env in (node_env or {}).items():
            cluster.start_node(node, env=env)
        await cluster.start(*[n for n in NODES if n not in (node_env or {})])
        for node in node_env or {}:
            await cluster.wait_healthy(node)
        api = await cluster.start_guarantee_api(env=api_env)
        await hubs.start(HUB)
        await cluster.wait_status("mbx1", "DB1", "Mounted")
        await cluster.wait_status("mbx2", "DB2", "Mounted")
        await seed_mailbox(cluster, ALICE)
        await cluster.ok("PUT", "mbx1", "/v1/databases/DB1/mailboxes/bob")
        await cluster.ok("PUT", "mbx1", f"/v1/databases/DB1/mailboxes/{MAIL}")
        await rolled_and_replayed(cluster, "DB1", "mbx1", ["mbx2", "mbx3"])
        await rolled_and_replayed(cluster, "DB2", "mbx2", ["mbx3", "mbx1"])
        writer = Writer(cluster, "DB1", "bob", NODES, "mbx1")
        run = Scenario(
            name=name,
            seed=seed,
            net=net,
            cluster=cluster,
            api=api,
            rng=random.Random(f"{name}:{seed}"),
            writer=writer,
            recorder=Recorder(cluster.config["guarantee_api"]["listen"], ("DB2", "DB1"), writer),
            mover=Mover(cluster, env=mover_env or {}),
            hubs=hubs,
            sender=Sender(hubs, HUB, MAIL),
        )
        try:
            yield run
        finally:
            run.writer.stopped = run.recorder.stopped = run.sender.stopped = True
            for proc in [r.proc for r in run.mover.runs if r.proc]:
                if proc.returncode is None:
                    with contextlib.suppress(ProcessLookupError):
                        proc.kill()
            await asyncio.gather(*run.tasks, return_exceptions=True)
            if run.move_task is not None:
                await asyncio.gather(run.move_task, return_exceptions=True)
            if run.move_store is not None:
                await run.move_store.aclose()
    finally:
        for proc in list(cluster.procs.values()):
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGCONT)  # a stopped node would not terminate
        api = run.api if run is not None else api
        if api is not None and api.poll() is None:
            api.send_signal(signal.SIGCONT)
            api.kill()
            api.wait(timeout=20)
        try:
            if hubs is not None:
                hubs.stop_all()
        finally:
            await scope.__aexit__(None, None, None)
