"""LMTP delivery (issue 49): the transport's LMTP listener beside Dovecot's, in one run.

    .venv/bin/python bench/lmtp.py [--small] [--sides dovecot,alone,transport] [--sessions 16]
        [--mailboxes 100] [--count-4k 10000] [--count-1m 500] [--dir var/bench-lmtp]

Dovecot is the anchor: a private Dovecot (tests/mail_servers.py: Debian's dovecot-lmtpd, its
own configuration on a loopback port, Maildir, `mail_fsync = always`, mail written as an
unprivileged user), whose `250` after DATA means the message is on disk.  Our side: a real
local cluster (two `replication-node serve` processes on loopback, DB1 active on mbx1 with a
passive copy on mbx2, log_file_size 1 MiB and llr_depth 10, no automatic failover: as
bench/transport.py) and one `transport serve` process, hub1, with its LMTP listener; a message
counts as delivered once it is durable on DB1's active, the transport's own `delivered` time
(`GET /v1/messages/{id}`, the wall time at which the active acknowledged the batch holding it,
read after the phase on the same clock as the start).

Our side is run twice, each on a cluster of its own: `alone`, DB1 on mbx1 without a passive
copy, and `transport`, DB1 with its passive on mbx2 (the figures recorded since the bench
began).  The issue measures ours "until durable on the recipient database's active", which
`alone` is: the processes a message waits for, the transport and the active, on the
machine's two vCPUs.  In `transport` the passive, which in a deployment runs on a server of
its own, takes a third of the same two vCPUs (its replay and the active's log shipping to it,
~8 ms of CPU a MiB: bench/lmtp_costs.py), and the active's durability waits for none of it;
both ratios are reported, beside each other.  Both clusters are up throughout; what the
ones idle during a phase use is reported with it (`beside_cpu`).

Messages are realistic MIME made with the `email` package: 4 KiB ones (multipart/alternative,
a text and an HTML part) and 1 MiB ones (multipart/mixed, a short letter and a PDF-like
attachment in base64), each with its own Message-ID, one recipient each, sent by `smtplib.LMTP`
over `--sessions` concurrent sessions (threads, one connection each, a transaction at a time)
to `--mailboxes` mailboxes (`userNNN@bench.test`; on our side the mailboxes `userNNN` of DB1,
which the transport finds by the address's local part).  Both sides get the same bytes.

Phases, in this order: 4 KiB to Dovecot, then to each of ours, 1 MiB likewise; each
after a warm-up (one message per mailbox, not counted: Dovecot creates its Maildirs, the
transport fills its directory cache) and a `sync` so that no phase pays another's writeback.
A phase's time runs from its first MAIL FROM to its last `250` (Dovecot) or to the last
message durable on the active (ours).  Reported per side: messages/s for 4 KiB, MB/s (10^6)
for 1 MiB, and the p50/p99 latency of the final `250` (MAIL FROM to the reply after DATA);
for ours also to durable on the active; the ratios ours / Dovecot (targets: >= 1.0 for
4 KiB messages/s, >= 0.7 for 1 MiB MB/s).  For ours, the CPU seconds each server process
(the transport, the active, the passive) used in the phase, beside the client's, and the
page faults each took (minor and major: `/proc/PID/stat`).

Checked at the end, so that a broken run cannot be reported: every Maildir holds exactly the
messages sent to it, each as sent below the trace headers; every message sent to ours is
Delivered to DB1 once (the queue's counts), none poisoned, and every 25th of each phase, read
back from DB1's active (`GET …/items/{id}/message`), ends with the bytes sent.

`--small`: 400 and 20 messages, to check the script in seconds (the figures mean nothing).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import random
import smtplib
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import date
from email.message import EmailMessage
from email.policy import SMTP
from email.utils import formatdate
from enum import StrEnum
from pathlib import Path
from typing import Any
from urllib.parse import quote

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.workdir import add_work_dir, run_and_report  # noqa: E402
from dag_common.api_types import item_id_for  # noqa: E402
from tests.cluster_harness import LocalCluster, wait_until  # noqa: E402
from tests.mail_servers import HOST, Dovecot, start_dovecot  # noqa: E402
from tests.transport.harness import Hubs  # noqa: E402

DB = "DB1"
ACTIVE, PASSIVE = "mbx1", "mbx2"
HUB = "hub1"
DOMAIN = "bench.test"
SENDER = f"sender@{DOMAIN}"
KIB, MIB, MB = 1024, 1024 * 1024, 1e6
TEMPLATES = 16  # distinct bodies per size, used round-robin
# Fixed-width tokens in a template's headers, replaced per message (same length: the size
# holds).  None can occur in a body: '#', '@' and '-' are outside base64 and the word list.
ID_TOKEN = b"zzzz-00000000"  # the Message-ID's left part: side and size tag, number
TO_TOKEN = b"user000@"
SUBJECT_TOKEN = b"#00000000"
TEXT = """the quarterly figures are attached please review before our meeting on thursday
regarding budget forecast shipment invoice project status update déjà vu café naïve schedule
contract revision approved pending signature team office"""
WORDS = TEXT.split()


class Side(StrEnum):
    DOVECOT = "dovecot"
    TRANSPORT = "transport"  # ours: DB1 with its passive on mbx2 (the figures since 2026-11-29)
    ALONE = "alone"  # ours: DB1 on mbx1 alone, no passive sharing the machine (the measure)


COPIES = {Side.TRANSPORT: 2, Side.ALONE: 1}  # DB1's copies on each of our sides


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def own_cpu() -> float:
    t = os.times()
    return t.user + t.system


def stat_fields(pid: int) -> list[str]:
    """Process `pid`'s `/proc/PID/stat` past its command's name (Linux): [0] its state,
    [7] and [9] its minor and major faults, [11] and [12] its user and system ticks."""
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()


def process_stat(pid: int) -> tuple[float, int]:
    """CPU seconds (user + system) process `pid` has used, and the page faults (minor and
    major) it took."""
    fields = stat_fields(pid)
    cpu = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return cpu, int(fields[7]) + int(fields[9])


def process_cpu(pid: int) -> float:
    """CPU seconds (user + system) process `pid` has used (bench/node_messages.py's)."""
    return process_stat(pid)[0]


def load() -> str:
    one, five, _ = os.getloadavg()
    return f"load {one:.2f} (1 min), {five:.2f} (5 min)"


# ---- messages ------------------------------------------------------------------------------


def prose(rng: random.Random, n: int) -> str:
    """About `n` characters of text in lines of under 78."""
    words, line, size = [], [], 0
    while size < n:
        w = rng.choice(WORDS)
        line.append(w)
        size += len(w) + 1
        if sum(len(x) + 1 for x in line) > 70:
            words.append(" ".join(line))
            line = []
    words.append(" ".join(line))
    return "\n".join(words) + "\n"


def headers(msg: EmailMessage, subject: str) -> None:
    msg["From"] = f"Bench Sender <{SENDER}>"
    msg["To"] = f"{TO_TOKEN.decode()}{DOMAIN}"
    msg["Subject"] = f"{subject} {SUBJECT_TOKEN.decode()}"
    msg["Date"] = formatdate()
    msg["Message-ID"] = f"<{ID_TOKEN.decode()}@{DOMAIN}>"


def small_template(seed: int, target: int = 4 * KIB) -> bytes:
    """A 4 KiB multipart/alternative message (text and HTML), tokens in its headers."""

    def build(n: int) -> bytes:
        text = prose(random.Random(seed), n)
        msg = EmailMessage()
        headers(msg, "Weekly status")
        msg.set_content(text)
        paragraphs = "".join(f"<p>{line}</p>\n" for line in text.splitlines())
        msg.add_alternative(f"<html><body>\n{paragraphs}</body></html>\n", subtype="html")
        return msg.as_bytes(policy=SMTP)

    return _sized(build, target, start=1500)


def large_template(seed: int, target: int = MIB) -> bytes:
    """A 1 MiB multipart/mixed message: a short letter and an attachment in base64."""
    blob = random.Random(seed).randbytes(target)

    def build(n: int) -> bytes:
        msg = EmailMessage()
        headers(msg, "Signed contract")
        msg.set_content(prose(random.Random(seed), 600))
        msg.add_attachment(blob[:n], maintype="application", subtype="pdf",
                           filename=f"contract-{seed}.pdf")  # fmt: skip
        return msg.as_bytes(policy=SMTP)

    return _sized(build, target, start=target * 3 // 4)


def _sized(build: Callable[[int], bytes], target: int, *, start: int) -> bytes:
    """`build(n)` with the n that makes it closest to `target` bytes (it grows with n)."""
    n = start
    for _ in range(8):
        raw = build(n)
        if abs(len(raw) - target) <= 8:
            break
        n = max(1, n + int((target - len(raw)) * n / len(raw)))
    return raw


@dataclass(frozen=True)
class Batch:
    """The messages of one phase: template k % TEMPLATES, recipient k % mailboxes."""

    tag: str  # four characters: side and size, in every Message-ID
    templates: tuple[bytes, ...]
    mailboxes: int
    count: int
    first: int = 0  # numbers first .. first+count-1

    def message(self, k: int) -> tuple[str, bytes]:
        """(recipient, the message's bytes) of number `k`."""
        raw = self.templates[k % len(self.templates)]
        user = f"user{k % self.mailboxes:03d}"
        raw = raw.replace(ID_TOKEN, self.message_id_left(k).encode(), 1)
        raw = raw.replace(TO_TOKEN, f"{user}@".encode(), 1)
        raw = raw.replace(SUBJECT_TOKEN, f"#{k:08d}".encode(), 1)
        return f"{user}@{DOMAIN}", raw

    def message_id_left(self, k: int) -> str:
        return f"{self.tag}-{k:08d}"

    def message_id(self, k: int) -> str:
        return f"<{self.message_id_left(k)}@{DOMAIN}>"

    def numbers(self) -> range:
        return range(self.first, self.first + self.count)


# ---- the client ----------------------------------------------------------------------------


@dataclass
class Sent:
    """What one phase's sessions did: each message's (number, MAIL FROM time, seconds to
    its final 250); the phase's start and last 250 (wall clock)."""

    start: float = 0.0
    last: float = 0.0
    done: list[tuple[int, float, float]] = field(default_factory=list)

    @property
    def latencies(self) -> list[float]:
        return [d[2] for d in self.done]


def deliver(port: int, batch: Batch, sessions: int) -> Sent:
    """`batch` over `sessions` LMTP sessions at once, a transaction at a time each."""
    numbers = iter(batch.numbers())
    lock = threading.Lock()
    sent = Sent()
    errors: list[BaseException] = []

    def session() -> None:
        try:
            with smtplib.LMTP(HOST, port, local_hostname="bench.client") as lmtp:
                lmtp.timeout = 300
                while True:
                    with lock:
                        k = next(numbers, None)
                    if k is None or errors:
                        return
                    rcpt, raw = batch.message(k)
                    began = time.time()
                    t0 = time.perf_counter()
                    refused = lmtp.sendmail(SENDER, [rcpt], raw)  # raises unless 250
                    took = time.perf_counter() - t0
                    assert not refused, refused
                    with lock:
                        sent.done.append((k, began, took))
                        sent.last = max(sent.last, began + took)
        except BaseException as exc:
            errors.append(exc)

    sent.start = time.time()
    threads = [threading.Thread(target=session, daemon=True) for _ in range(sessions)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise RuntimeError(f"an LMTP session failed: {errors[0]!r}") from errors[0]
    assert len(sent.done) == batch.count, (len(sent.done), batch.count)
    return sent


# ---- the sides -----------------------------------------------------------------------------


class Ours:
    """The cluster and its transport with an LMTP listener."""

    def __init__(
        self, base: Path, args: argparse.Namespace, delivered_bytes: int, copies: int
    ) -> None:
        self.nodes = [ACTIVE, PASSIVE][:copies]
        self.cluster = LocalCluster(
            base,
            nodes=[(node, "redmond") for node in self.nodes],
            databases=[
                {
                    "name": DB,
                    "copies": [
                        {"node": node, "activation_preference": i}
                        for i, node in enumerate(self.nodes, start=1)
                    ],
                }
            ],
            defaults={"log_file_size": "1MiB", "llr_depth": 10, "failover_after": None},
        )
        self.hubs = Hubs(self.cluster, HUB, mail_ports=True)
        # The config's transport settings (not the tests' fast retries), the dumpster sized
        # to keep everything the run delivers.
        self.cluster.config["transport"] = {
            "max_dumpster_size_per_database": max(100_000_000, 2 * delivered_bytes)
        }
        self.cluster.write_config()
        self.mailboxes = [f"user{i:03d}" for i in range(args.mailboxes)]
        self.concurrency = args.sessions
        self.expected = 0  # deliveries the queue should count as Delivered

    @property
    def port(self) -> int:
        return self.hubs.lmtp_ports[HUB]

    def cpu(self) -> dict[str, tuple[float, int]]:
        """CPU seconds each of our server processes has used so far, and its page faults."""
        procs = {HUB: self.hubs.procs[HUB], **self.cluster.procs}
        return {name: process_stat(proc.pid) for name, proc in procs.items()}

    async def start(self) -> None:
        await self.cluster.start()
        await self.cluster.wait_status(ACTIVE, DB, "Mounted")
        if PASSIVE in self.nodes:
            await self.cluster.wait_status(PASSIVE, DB, "Healthy")
        for m in self.mailboxes:
            await self.cluster.ok("PUT", ACTIVE, f"/v1/databases/{DB}/mailboxes/{m}")
        await self.hubs.start(HUB)

    async def stop(self) -> None:
        try:
            self.hubs.stop_all()
        finally:
            await self.cluster.close()

    async def queue(self) -> dict[str, Any]:
        status, state = await self.hubs.call("GET", HUB, "/v1/queue")
        assert status == 200, f"GET /v1/queue: {status} {state}"
        return state

    async def durable(self, batch: Batch) -> dict[str, float]:
        """Wait until every message of `batch` is Delivered; each one's delivered time."""
        self.expected += batch.count

        async def all_delivered() -> bool:
            state = await self.queue()
            d = state["deliveries"]
            if d["Poison"]:
                raise AssertionError(f"the transport poisoned deliveries: {d}")
            return d["Queued"] == 0 and state["waiting"] == 0 and d["Delivered"] == self.expected

        await wait_until("every message durable on DB1's active", all_delivered, timeout=3600,
                         every=0.1)  # fmt: skip
        out: dict[str, float] = {}
        ids = iter(batch.numbers())

        async def reader() -> None:
            for k in ids:
                m = batch.message_id(k)
                status, body = await self.hubs.call("GET", HUB, f"/v1/messages/{quote(m, '')}")
                assert status == 200, f"GET /v1/messages/{m}: {status} {body}"
                (delivery,) = body["deliveries"]
                assert delivery["state"] == "Delivered" and delivery["database"] == DB, delivery
                out[m] = delivery["delivered"]

        await asyncio.gather(*(reader() for _ in range(self.concurrency)))
        return out

    async def check(self, batches: list[Batch], every: int = 25) -> dict[str, Any]:
        """Each message Delivered once (the queue's counts); every `every`-th of each batch
        read back from DB1's active ends with the bytes sent (above: the trace header)."""
        state = await self.queue()
        d = state["deliveries"]
        assert d == {"Queued": 0, "Delivered": self.expected, "Poison": 0}, state
        read = 0
        for batch in batches:
            for k in batch.numbers()[::every]:
                rcpt, raw = batch.message(k)
                mailbox, item = rcpt.split("@")[0], item_id_for(batch.message_id(k))
                path = f"/v1/databases/{DB}/mailboxes/{mailbox}/items/{item}/message"
                status, body = await self.cluster.call("GET", ACTIVE, path)
                assert status == 200 and isinstance(body, bytes), (path, status)
                assert body.endswith(raw), f"{batch.message_id(k)}: not the bytes sent"
                read += 1
        return {**d, "read_back": read}


def check_dovecot(dovecot: Dovecot, batches: list[Batch]) -> int:
    """Every Maildir holds exactly what was sent to it, each message as sent (below the
    trace headers Dovecot adds; it stores lines ending in LF)."""
    expected: dict[str, dict[str, bytes]] = {}
    for batch in batches:
        for k in batch.numbers():
            rcpt, raw = batch.message(k)
            expected.setdefault(rcpt, {})[batch.message_id(k)] = raw
    total = 0
    for rcpt, messages in expected.items():
        stored = dovecot.messages(rcpt)
        assert len(stored) == len(messages), f"{rcpt}: {len(stored)} stored, {len(messages)} sent"
        by_id = {}
        for raw in stored:
            for line in raw.split(b"\n"):
                if line.lower().startswith(b"message-id:"):
                    by_id[line.split(b":", 1)[1].strip().decode()] = raw
                    break
        assert set(by_id) == set(messages), f"{rcpt}: not the messages sent"
        for m, raw in messages.items():
            assert by_id[m].replace(b"\n", b"\r\n").endswith(raw), f"{rcpt} {m}: altered"
        total += len(stored)
    return total


# ---- the run -------------------------------------------------------------------------------

# Each of our sides' ratio to Dovecot, as the report names it.
RATIOS = {
    Side.ALONE: "the issue's measure (durable on DB1's active, no passive on the machine)",
    Side.TRANSPORT: "DB1's passive copy on the same two vCPUs",
}


@dataclass
class Phase:
    side: str
    size: str  # "4k" | "1m"
    count: int
    bytes: int
    seconds: float
    latencies: list[float]  # to the final 250
    durable: list[float] = field(default_factory=list)  # ours: to durable on the active
    client_cpu: float = 0.0  # CPU seconds of this process (the LMTP client) while sending
    # ours: CPU seconds of the transport and each node, from the phase's start to the last
    # message durable on the active
    server_cpu: dict[str, float] = field(default_factory=dict)
    server_faults: dict[str, int] = field(default_factory=dict)  # page faults, the same span
    # CPU seconds our clusters not in this phase (up, idle) used meanwhile
    beside_cpu: float = 0.0

    @property
    def rate(self) -> float:
        return self.count / self.seconds

    @property
    def mb_s(self) -> float:
        return self.bytes / self.seconds / MB

    @property
    def cpu_text(self) -> str:
        return ", ".join(f"{k} {v:.1f}" for k, v in self.server_cpu.items()) or "-"

    @property
    def faults_text(self) -> str:
        return ", ".join(f"{k} {v}" for k, v in self.server_faults.items()) or "-"


def cpu_of(clusters: list[Ours]) -> float:
    """CPU seconds the server processes of `clusters` have used so far, together."""
    return sum(cpu for ours in clusters for cpu, _ in ours.cpu().values())


async def run(base: Path, args: argparse.Namespace) -> dict[str, Any]:
    t0 = time.perf_counter()
    small = tuple(small_template(s) for s in range(TEMPLATES))
    large = tuple(large_template(s) for s in range(min(TEMPLATES, 8)))
    print(f"templates: 4k {len(small[0])} B, 1m {len(large[0])} B "
          f"({time.perf_counter() - t0:.1f} s)", flush=True)  # fmt: skip
    sizes = {"4k": (small, args.count_4k), "1m": (large, args.count_1m)}
    users = [f"user{i:03d}@{DOMAIN}" for i in range(args.mailboxes)]
    delivered_bytes = args.count_4k * len(small[0]) + args.count_1m * len(large[0])

    dovecot: Dovecot | None = None
    clusters: dict[str, Ours] = {}  # ours, by side
    phases: list[Phase] = []
    batches: dict[str, list[Batch]] = {side: [] for side in args.sides}
    out: dict[str, Any] = {}
    try:
        if Side.DOVECOT in args.sides:
            dovecot = start_dovecot(users, base / "logs")
            print(f"dovecot: LMTP on {dovecot.port}, {dovecot.root}", flush=True)
        for side in args.sides:
            if side in COPIES:
                ours = clusters[side] = Ours(base / side, args, delivered_bytes, COPIES[side])
                await ours.start()
                print(f"{side}: LMTP on {ours.port} (DB1's copies: {ours.nodes})", flush=True)
        ports = {side: ours.port for side, ours in clusters.items()}
        if dovecot:
            ports[Side.DOVECOT] = dovecot.port

        # warm-up, one message per mailbox, not counted
        for side in args.sides:
            warm = Batch(f"{side[:2]}wu", small, args.mailboxes, args.mailboxes)
            deliver(ports[side], warm, args.sessions)
            batches[side].append(warm)
            if side in clusters:
                await clusters[side].durable(warm)

        for size, (templates, count) in sizes.items():
            for side in args.sides:
                batch = Batch(f"{side[:2]}{size}", templates, args.mailboxes, count)
                os.sync()
                cpu = own_cpu()
                ours = clusters.get(side)
                servers = ours.cpu() if ours else {}
                others = [c for c in clusters.values() if c is not ours]
                beside = cpu_of(others)
                sent = await asyncio.to_thread(deliver, ports[side], batch, args.sessions)
                phase = Phase(side, size, count, count * len(templates[0]), 0.0, sent.latencies,
                              client_cpu=own_cpu() - cpu)  # fmt: skip
                batches[side].append(batch)
                if ours is None:
                    phase.seconds = sent.last - sent.start
                else:
                    times = await ours.durable(batch)
                    began = {batch.message_id(k): b for k, b, _ in sent.done}
                    phase.durable = [times[m] - began[m] for m in times]
                    assert min(phase.durable) > 0, "a message durable before it was sent"
                    phase.seconds = max(times.values()) - sent.start
                    after = ours.cpu()
                    phase.server_cpu = {k: v[0] - servers[k][0] for k, v in after.items()}
                    phase.server_faults = {k: v[1] - servers[k][1] for k, v in after.items()}
                phase.beside_cpu = cpu_of(others) - beside
                phases.append(phase)
                p50, p99 = (percentile(phase.latencies, q) * 1e3 for q in (0.5, 0.99))
                print(f"  {side} {size}: {count} in {phase.seconds:.2f} s, {phase.rate:.1f}/s, "
                      f"{phase.mb_s:.2f} MB/s, 250 p50 {p50:.1f} ms p99 {p99:.1f} ms"
                      + (f"; server CPU s {phase.cpu_text}; page faults {phase.faults_text}"
                         if phase.server_cpu else "")
                      + (f"; our clusters idle beside it {phase.beside_cpu:.1f} CPU s"
                         if others else ""),
                      flush=True)  # fmt: skip

        if dovecot:
            out["dovecot_checked"] = check_dovecot(dovecot, batches[Side.DOVECOT])
        out["ours_checked"] = {
            side: await ours.check(batches[side]) for side, ours in clusters.items()
        }
    except BaseException:
        for side, ours in clusters.items():
            for name in (*ours.nodes, HUB):
                path = ours.cluster.root / f"{name}.log"
                if path.exists():
                    tail = path.read_text(errors="replace")[-3000:]
                    print(f"--- {side}: {name} log (tail) ---\n{tail}", file=sys.stderr)
        raise
    finally:
        try:
            for ours in clusters.values():
                await ours.stop()
        finally:
            if dovecot:
                dovecot.stop()
    out["phases"] = phases
    return out


def report(args: argparse.Namespace, out: dict[str, Any]) -> None:
    phases: list[Phase] = out["phases"]

    def ms(values: list[float], q: float) -> str:
        return f"{percentile(values, q) * 1e3:.1f}" if values else "-"

    print(f"\n{date.today().isoformat()} - nproc {os.cpu_count()}, {platform.platform()}, "
          f"Python {platform.python_version()}; {'--small' if args.small else 'full sizes'}; "
          f"{args.sessions} LMTP sessions, {args.mailboxes} mailboxes; {load()}\n")  # fmt: skip
    print(
        "| side | size | messages | seconds | messages/s | MB/s | final 250 p50 ms | p99 ms "
        "| durable p50 ms | p99 ms | client CPU s | server CPU s |"
    )
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|")
    for p in phases:
        print(f"| {p.side} | {p.size} | {p.count} | {p.seconds:.2f} | {p.rate:.1f} | "
              f"{p.mb_s:.2f} | {ms(p.latencies, .5)} | {ms(p.latencies, .99)} | "
              f"{ms(p.durable, .5)} | {ms(p.durable, .99)} | {p.client_cpu:.1f} | "
              f"{p.cpu_text} |")  # fmt: skip
    by = {(p.side, p.size): p for p in phases}
    summary: dict[str, Any] = {"date": date.today().isoformat(), "small": args.small,
                               "sessions": args.sessions, "mailboxes": args.mailboxes}  # fmt: skip
    for p in phases:
        key = f"{p.side}_{p.size}"
        summary |= {f"{key}_per_s": p.rate, f"{key}_mb_s": p.mb_s,
                    f"{key}_p50_ms": percentile(p.latencies, .5) * 1e3,
                    f"{key}_p99_ms": percentile(p.latencies, .99) * 1e3}  # fmt: skip
    if (Side.DOVECOT, "4k") in by:
        print()
        for side, what in RATIOS.items():
            if (side, "4k") not in by:
                continue
            r4 = by[side, "4k"].rate / by[Side.DOVECOT, "4k"].rate
            r1 = by[side, "1m"].mb_s / by[Side.DOVECOT, "1m"].mb_s
            print(f"ours / Dovecot, {what}: 4 KiB messages/s **{r4:.2f}** (target >= 1.0), "
                  f"1 MiB MB/s **{r1:.2f}** (target >= 0.7)")  # fmt: skip
            key = "" if side == Side.TRANSPORT else f"_{side}"  # the first figures' names kept
            summary |= {f"ratio{key}_4k": r4, f"ratio{key}_1m": r1}
    checked = []
    if "dovecot_checked" in out:
        checked.append(
            f"Dovecot's Maildirs hold the {out['dovecot_checked']} messages sent, as sent"
        )
    for side, counts in out.get("ours_checked", {}).items():
        checked.append(
            f"{side}: the transport's queue and messages read back from DB1's active "
            f"(every 25th, as sent): {counts}"
        )
    print("checked: " + "; ".join(checked))
    print(json.dumps(summary))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sides", default="dovecot,alone,transport",
                        help="comma-separated: dovecot, alone, transport (all three)")  # fmt: skip
    parser.add_argument("--sessions", type=int, default=16, help="LMTP sessions at once")
    parser.add_argument("--mailboxes", type=int, default=100, help="recipients, round-robin")
    parser.add_argument("--count-4k", type=int, help="4 KiB messages per side (10000)")
    parser.add_argument("--count-1m", type=int, help="1 MiB messages per side (500)")
    add_work_dir(parser, "var/bench-lmtp")
    parser.add_argument("--small", action="store_true", help="400 and 20 messages: seconds")
    args = parser.parse_args()
    args.sides = [s.strip() for s in args.sides.split(",") if s.strip()]
    if not args.sides or set(args.sides) - set(Side):
        parser.error(f"--sides: any of {', '.join(Side)}")
    if args.count_4k is None:
        args.count_4k = 400 if args.small else 10_000
    if args.count_1m is None:
        args.count_1m = 20 if args.small else 500
    if min(args.sessions, args.mailboxes, args.count_4k, args.count_1m) < 1:
        parser.error("--sessions, --mailboxes, --count-4k, --count-1m: >= 1")
    run_and_report(args, run, report)


if __name__ == "__main__":
    main()
