"""IMAP (issue 50, step 9): the front beside Dovecot 2.3, each holding the same folder.

    .venv/bin/python bench/imap.py [--small] [--messages 10000] [--rounds 3] [--idle 50]
        [--mbsync-cap 180] [--sessions 1000] [--max-front-rss-mib 6144]
        [--phases flags,bodies,mbsync] [--max-open-seconds 900] [--no-fetches]
        [--scale [--at-once 4]] [--profile PY_SPY]
        [--dir var/bench-imap] [--keep]

The figures in bench/README.md: `--rounds 2 --mbsync-cap 180 --max-open-seconds 300
--profile .../py-spy`, then `--no-fetches --max-open-seconds 300` for IDLE and memory.

Dovecot is the anchor: a private Dovecot (tests/mail_servers.py: Debian's dovecot-lmtpd and
dovecot-imapd, its own configuration on a loopback port, Maildir, `mail_fsync = always`,
STARTTLS).  Ours: two `replication-node serve` over TLS (DB1 active on mbx1, a copy on mbx2),
`transport serve` with its LMTP listener, and one `python -m imap_front serve` (the lab of
tests/imap_front/test_imap_e2e.py).  Both get the same `--messages` messages into one user's
INBOX through their own LMTP (bench/lmtp.py's MIME: nine of 4 KiB for one of 100 KiB), 16
sessions at once; ours waits until the transport counts every one Delivered.

Measured, the sides alternating phase by phase, `--rounds` times after one warm-up round
(not counted: the page cache, Dovecot's index, the front's imports), every client over
STARTTLS, logged in before its clock starts:
- `SELECT INBOX` + `UID FETCH 1:* (FLAGS)` on a new session: messages/s;
- `UID FETCH 1:* (BODY.PEEK[])` (the folder selected before the clock): MB/s (10^6) of the
  literals read;
- `mbsync` (Debian isync) of INBOX into an empty Maildir: messages/s (stopped after
  `--mbsync-cap` seconds, its rate then what it had copied by then, and said so);
the best of the rounds per side (the machine is shared: the least disturbed), with each
round's figures printed; the ratio ours / Dovecot (target >= 0.5 each); `--phases bodies`
(for instance) measures only those named.
- IDLE: a client selected in INBOX and idling on each side; `--idle` messages of 4 KiB
  delivered one at a time through each side's LMTP (alternating sides), each timed from its
  MAIL FROM to the idler reading `* n EXISTS`: p50 / p99 (target p99 < 1 s).
- Memory per idle session (as bench/imap_library.py idle): `--sessions` sessions on the
  front, each STARTTLS, LOGIN, SELECT INBOX (the whole folder), IDLE, two at a time; the
  front's RSS once it stops moving, after one warm session and after all, over the sessions
  (target < 200 KB).  Stopped early, and said so, if the front's RSS passes
  `--max-front-rss-mib` (the machine is shared) or opening them takes `--max-open-seconds`.

`--scale` (no fetches; bench/imap_scale.py): `--sessions` idle sessions on each side, the
front's first, left open, memory read from /proc at a tenth, a quarter, a half and all (the
front's VmRSS, VmHWM and Pss; Dovecot's Rss, Pss and USS summed over its processes), then
`--idle` deliveries, alternating sides, each timed to every idler's `* n EXISTS`.

Every fetch is checked: as many FETCH answers as messages, and each body's literal read
whole.  `--small`: 200 messages, one round, 5 IDLE messages, 20 sessions: the script
checked in a minute (the figures mean nothing).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import date
from enum import StrEnum
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import imap_scale  # noqa: E402
from lmtp import (  # noqa: E402
    DOMAIN,
    KIB,
    MB,
    Batch,
    deliver,
    large_template,
    load,
    percentile,
    small_template,
)
from workdir import add_work_dir, work_dir  # noqa: E402

from tests.imap_front.harness import Front  # noqa: E402
from tests.mail_servers import HOST, Dovecot, start_dovecot  # noqa: E402
from tests.pki import issue, make_ca  # noqa: E402
from tests.replication_node.test_node_identity_e2e import NODE_CERT, TlsCluster, client  # noqa: E402
from tests.transport.harness import Hubs  # noqa: E402

DB = "DB1"
ACTIVE, PASSIVE, HUB, FRONT = "mbx1", "mbx2", "hub1", "imap1"
MAILBOX = "user000"  # lmtp.Batch's recipient with one mailbox: user000@bench.test
ADDRESS = f"{MAILBOX}@{DOMAIN}"
PASSWORD = "bench-imap-password"
LARGE_EVERY = 10  # one message in ten is the 100 KiB one
TIMEOUT = 600.0  # a socket read: only bounds a failure


LABELS = {
    "flags": "SELECT + UID FETCH 1:* (FLAGS)",
    "bodies": "UID FETCH 1:* (BODY.PEEK[])",
    "mbsync": "mbsync of INBOX",
}


class Side(StrEnum):
    DOVECOT = "dovecot"
    FRONT = "front"


# ---- a plain IMAP client: the least work per line, so the servers are what is timed ------


class Imap:
    """One IMAP session over STARTTLS, logged in: commands sent, answers read whole."""

    def __init__(self, port: int, ctx: ssl.SSLContext, user: str) -> None:
        raw = socket.create_connection((HOST, port), timeout=TIMEOUT)
        f = raw.makefile("rb")
        assert f.readline().startswith(b"* OK"), "greeting"
        raw.sendall(b"s STARTTLS\r\n")
        while not (line := f.readline()).startswith(b"s "):
            pass
        assert line.startswith(b"s OK"), line
        self.sock = ctx.wrap_socket(raw, server_hostname=HOST)
        self.file = self.sock.makefile("rb", buffering=1 << 20)
        self.n = 0
        self.command(f'LOGIN "{user}" "{PASSWORD}"')

    def command(self, text: str) -> tuple[int, int]:
        """Send `text`, read to its tagged OK: (untagged FETCH answers, literal bytes)."""
        self.n += 1
        tag = b"t%d" % self.n
        self.sock.sendall(tag + b" " + text.encode() + b"\r\n")
        return self.read_to(tag)

    def read_to(self, tag: bytes) -> tuple[int, int]:
        fetches = literal = 0
        read, readline = self.file.read, self.file.readline
        while True:
            line = readline()
            if not line:
                raise RuntimeError("the server closed the connection")
            if line.startswith(tag + b" "):
                if not line.startswith(tag + b" OK"):
                    raise RuntimeError(f"{line!r}")
                return fetches, literal
            if line.startswith(b"* ") and b" FETCH " in line[:20]:
                fetches += 1
            while line.endswith(b"}\r\n"):  # a literal, then the rest of the line
                n = int(line[line.rindex(b"{") + 1 : -3].rstrip(b"+"))
                got = read(n)
                if len(got) != n:
                    raise RuntimeError("a literal cut short")
                literal += n
                line = readline()

    def close(self) -> None:
        with contextlib.suppress(OSError, RuntimeError):
            self.command("LOGOUT")
        self.sock.close()


# ---- the two sides ------------------------------------------------------------------------


@dataclass
class Servers:
    """Dovecot and our cluster, transport and front; their ports and the users to log in."""

    pki: Path
    ca: Path
    dovecot: Dovecot | None = None
    cluster: TlsCluster | None = None
    hubs: Hubs | None = None
    front: Front | None = None

    def imap_port(self, side: Side) -> int:
        return self.dovecot.imap_port if side == Side.DOVECOT else self.front.port

    def lmtp_port(self, side: Side) -> int:
        return self.dovecot.port if side == Side.DOVECOT else self.hubs.lmtp_ports[HUB]

    def user(self, side: Side) -> str:
        return ADDRESS if side == Side.DOVECOT else MAILBOX

    def cert(self, side: Side) -> Path:
        """The server's own certificate (mbsync pins it: it matches no IP address)."""
        return self.pki / ("dovecot.pem" if side == Side.DOVECOT else f"{FRONT}.pem")

    def context(self) -> ssl.SSLContext:
        return ssl.create_default_context(cafile=str(self.ca))

    def session(self, side: Side) -> Imap:
        return Imap(self.imap_port(side), self.context(), self.user(side))


async def start(base: Path, sessions: int) -> Servers:
    pki = base / "pki"
    pki.mkdir()
    ca = make_ca(pki, "ca")
    for name in (ACTIVE, PASSIVE, HUB, FRONT, "dovecot"):
        issue(pki, name, ca, NODE_CERT.format(name=name))
    s = Servers(pki, ca[0])
    s.dovecot = start_dovecot(
        [ADDRESS], base / "logs", imap_port=0, password=PASSWORD,
        tls=(pki / "dovecot.pem", pki / "dovecot.key"), max_clients=sessions + 10,
    )  # fmt: skip
    cluster = s.cluster = TlsCluster(
        base / "cluster", nodes=[(ACTIVE, "redmond"), (PASSIVE, "redmond")],
        databases=[{"name": DB, "copies": [{"node": ACTIVE, "activation_preference": 1},
                                           {"node": PASSIVE, "activation_preference": 2}]}],
        defaults={"failover_after": None},
    )  # fmt: skip
    cluster.config["tls"] = {
        "cert_file": str(pki / "{node}.pem"), "key_file": str(pki / "{node}.key"),
        "ca_file": str(ca[0]),
    }  # fmt: skip
    s.hubs = Hubs(cluster, HUB, scheme="https", mail_ports=True,
                  mail={"trusted_networks": ["127.0.0.1/32"], "hostname": "hub1.test"})  # fmt: skip
    cluster.config["transport"] = {"max_dumpster_size_per_database": 4_000_000_000}
    s.front = Front(cluster, FRONT, {MAILBOX: (MAILBOX, PASSWORD)},
                    max_sessions=sessions + 100, max_sessions_per_user=sessions + 50)  # fmt: skip
    cluster.session = client(ca[0])
    await cluster.start()
    await cluster.wait_status(ACTIVE, DB, "Mounted")
    await cluster.wait_status(PASSIVE, DB, "Healthy")
    await cluster.ok("PUT", ACTIVE, f"/v1/databases/{DB}/mailboxes/{MAILBOX}")
    await s.hubs.start(HUB)
    await s.front.start()
    return s


async def stop(s: Servers) -> None:
    try:
        if s.front:
            s.front.stop()
        if s.hubs:
            s.hubs.stop_all()
        if s.cluster:
            await s.cluster.close()
    finally:
        if s.dovecot:
            s.dovecot.stop()


async def delivered(s: Servers, count: int) -> None:
    """Until the transport counts `count` deliveries Delivered (none poisoned)."""
    while True:
        status, state = await s.hubs.call("GET", HUB, "/v1/queue")
        assert status == 200, state
        d = state["deliveries"]
        assert not d["Poison"], f"the transport poisoned deliveries: {d}"
        if d["Delivered"] >= count and d["Queued"] == 0:
            return
        await asyncio.sleep(0.2)  # the next look at the queue's counts


# ---- the phases ---------------------------------------------------------------------------


@dataclass
class Figure:
    side: Side
    what: str  # flags | bodies | mbsync
    seconds: float
    messages: int
    bytes: int = 0
    partial: bool = False  # stopped at its cap: the rate of what was done by then

    @property
    def rate(self) -> float:
        return self.messages / self.seconds

    @property
    def mb_s(self) -> float:
        return self.bytes / self.seconds / MB


def flags(s: Servers, side: Side, n: int) -> Figure:
    m = s.session(side)
    t0 = time.perf_counter()
    m.command("SELECT INBOX")
    fetches, _ = m.command("UID FETCH 1:* (FLAGS)")
    took = time.perf_counter() - t0
    m.close()
    assert fetches == n, f"{side}: {fetches} FETCH answers, {n} messages"
    return Figure(side, "flags", took, n)


def bodies(s: Servers, side: Side, n: int) -> Figure:
    m = s.session(side)
    m.command("SELECT INBOX")
    t0 = time.perf_counter()
    fetches, size = m.command("UID FETCH 1:* (BODY.PEEK[])")
    took = time.perf_counter() - t0
    m.close()
    assert fetches == n, f"{side}: {fetches} FETCH answers, {n} messages"
    return Figure(side, "bodies", took, n, size)


def mbsync(s: Servers, side: Side, n: int, base: Path, cap: float) -> Figure:
    """`mbsync` of INBOX into an empty Maildir; stopped after `cap` seconds, if it runs that
    long, its rate then the messages it had copied over the `cap` (`partial`)."""
    binary = shutil.which("mbsync")
    assert binary, "mbsync is missing: install Debian's 'isync' (make system-deps does)"
    root = base / f"mbsync-{side}"
    shutil.rmtree(root, ignore_errors=True)
    (root / "md").mkdir(parents=True)
    config = root / "mbsyncrc"
    config.write_text(
        f"IMAPAccount a\nHost {HOST}\nPort {s.imap_port(side)}\nUser {s.user(side)}\n"
        f"Pass {PASSWORD}\nSSLType STARTTLS\nCertificateFile {s.cert(side)}\n"
        "SystemCertificates no\nAuthMechs PLAIN\n\nIMAPStore remote\nAccount a\n\n"
        f"MaildirStore local\nPath {root}/md/\nInbox {root}/inbox\n\n"
        "Channel c\nFar :remote:\nNear :local:\nPatterns INBOX\nCreate Near\nSyncState *\n"
    )
    log = root / "mbsync.log"
    t0 = time.perf_counter()
    with open(log, "wb") as out:
        proc = subprocess.Popen([binary, "-c", str(config), "-q", "-a"], stdout=out,
                                stderr=subprocess.STDOUT)  # fmt: skip
        try:
            proc.wait(timeout=cap)
            partial = False
        except subprocess.TimeoutExpired:
            proc.terminate()
            proc.wait()
            partial = True
    took = cap if partial else time.perf_counter() - t0
    assert partial or proc.returncode == 0, log.read_text()[-3000:]
    files = [p for d in ("cur", "new") for p in (root / "inbox" / d).iterdir()]
    assert partial or len(files) == n, f"{side}: mbsync copied {len(files)} of {n}"
    size = sum(p.stat().st_size for p in files)
    shutil.rmtree(root)
    return Figure(side, "mbsync", took, len(files), size, partial=partial)


def idle_latencies(s: Servers, count: int, templates: tuple[bytes, ...]) -> dict[Side, list]:
    """`count` messages to each side, one at a time, alternating: MAIL FROM to `* n EXISTS`."""
    out: dict[Side, list[float]] = {side: [] for side in Side}
    idlers: dict[Side, tuple[Imap, int]] = {}
    for side in Side:
        m = s.session(side)
        m.n += 1
        tag = b"t%d" % m.n
        m.sock.sendall(tag + b" SELECT INBOX\r\n")
        exists = 0
        while not (line := m.file.readline()).startswith(tag):
            if line.endswith(b" EXISTS\r\n"):
                exists = int(line.split()[1])
        m.sock.sendall(b"i IDLE\r\n")
        while not m.file.readline().startswith(b"+ "):
            pass
        idlers[side] = (m, exists)
    for k in range(count):
        for side in Side:
            m, exists = idlers[side]
            batch = Batch(f"id{side[:2]}", templates, 1, 1, first=k)
            began: list[float] = []
            port = s.lmtp_port(side)
            sender = threading.Thread(
                target=lambda b=batch, p=port, t=began: (
                    t.append(time.perf_counter()),
                    deliver(p, b, 1),
                ),
                daemon=True,
            )
            sender.start()
            while True:
                line = m.file.readline()
                if not line:
                    raise RuntimeError(f"{side}: the idling session closed")
                if line.endswith(b" EXISTS\r\n") and int(line.split()[1]) > exists:
                    seen = time.perf_counter()
                    break
            sender.join()
            out[side].append(seen - began[0])
            idlers[side] = (m, int(line.split()[1]))
    for m, _ in idlers.values():
        m.sock.sendall(b"DONE\r\n")
        m.close()
    return out


# ---- memory per idle session ----------------------------------------------------------------


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError("no VmRSS")


def settled_rss_kib(pid: int, every: float = 0.2, timeout: float = 60.0) -> int:
    """The RSS once two reads `every` seconds apart agree (as bench/imap_library.py)."""
    deadline = time.monotonic() + timeout
    last = rss_kib(pid)
    while time.monotonic() < deadline:
        time.sleep(every)
        now = rss_kib(pid)
        if now == last:
            return now
        last = now
    return last


async def idle_session(port: int, ctx: ssl.SSLContext) -> asyncio.StreamWriter:
    """STARTTLS, LOGIN, SELECT INBOX, IDLE: the session left idling."""
    r, w = await asyncio.open_connection(HOST, port)

    async def to(prefix: bytes) -> None:
        while not (line := await asyncio.wait_for(r.readline(), TIMEOUT)).startswith(prefix):
            if not line or line[:2] == prefix[:2]:  # closed, or NO / BAD
                raise RuntimeError(f"{prefix!r}: {line!r}")

    await to(b"* OK")
    w.write(b"s STARTTLS\r\n")
    await to(b"s OK")
    await w.start_tls(ctx, server_hostname=HOST)
    w.write(f'a LOGIN {MAILBOX} "{PASSWORD}"\r\nb SELECT INBOX\r\n'.encode())
    await to(b"a OK")
    await to(b"b OK")
    w.write(b"c IDLE\r\n")
    await to(b"+")
    return w


async def idle_memory(
    s: Servers, sessions: int, cap_kib: int, cap_seconds: float, at_once: int = 2
) -> dict:
    pid = s.front.proc.pid
    ctx = s.context()
    warm = [await idle_session(s.front.port, ctx)]
    before = await asyncio.to_thread(settled_rss_kib, pid)
    writers: list[asyncio.StreamWriter] = []
    t0 = time.perf_counter()
    stopped = ""
    while len(writers) < sessions:
        if rss_kib(pid) > cap_kib:
            stopped = f"stopped at {len(writers)}: the front's RSS passed {cap_kib >> 10} MiB"
            break
        if time.perf_counter() - t0 > cap_seconds:
            stopped = f"stopped at {len(writers)}: {cap_seconds:g} s spent opening sessions"
            break
        n = min(at_once, sessions - len(writers))
        opened = await asyncio.gather(
            *(idle_session(s.front.port, ctx) for _ in range(n)), return_exceptions=True
        )
        writers += [w for w in opened if isinstance(w, asyncio.StreamWriter)]
        failed = [e for e in opened if isinstance(e, BaseException)]
        if failed:  # the measure of what was opened stands; why it stopped is said
            stopped = f"stopped at {len(writers)}: a session failed: {failed[0]}"
            break
    took = time.perf_counter() - t0
    after = await asyncio.to_thread(settled_rss_kib, pid)
    for w in writers + warm:
        w.close()
    return {
        "sessions": len(writers),
        "rss_before_kib": before,
        "rss_after_kib": after,
        "kib_per_idle_session": round((after - before) / len(writers), 1),
        "sessions_per_s": round(len(writers) / took, 1),
        "stopped": stopped,
    }


# ---- many idle sessions: memory as they grow, and IDLE with all of them idling (--scale) ----


async def scale(s: Servers, args: argparse.Namespace, templates: tuple[bytes, ...]) -> dict:
    """`--sessions` idle sessions on each side (the front's first, then Dovecot's, both left
    open), memory read at a tenth, a quarter, a half and all; then `--idle` messages, one
    at a time and alternating sides, each timed to every idler's `* n EXISTS`."""
    n = args.sessions
    marks = sorted({max(1, n // 10), max(1, n // 4), max(1, n // 2), n})
    ctx = s.context()
    cap_kib = args.max_front_rss_mib << 10
    out: dict[str, Any] = {"sessions": n, "front_nofile": nofile(s.front.proc.pid)}
    opened: dict[Side, imap_scale.Opened] = {}
    front, master = s.front.proc.pid, s.dovecot.proc.pid
    for side in (Side.FRONT, Side.DOVECOT):
        port, login = s.imap_port(side), f'LOGIN {s.user(side)} "{PASSWORD}"'.encode()

        def measure(side: Side = side) -> dict:
            if side == Side.FRONT:
                got = imap_scale.settled(lambda: imap_scale.front_memory(front), "rss")
            else:
                got = imap_scale.settled(lambda: imap_scale.dovecot_memory(master), "pss")
            print(f"  {side}: {got}; {load()}", flush=True)
            return got

        def give_up(m: dict, side: Side = side) -> str:
            if side == Side.FRONT and m["rss"] > cap_kib:
                return f"stopped: the front's RSS passed {cap_kib >> 10} MiB"
            return ""

        o = opened[side] = await imap_scale.open_idlers(
            lambda port=port, login=login: imap_scale.open_idler(port, ctx, HOST, login),
            n, at_once=args.at_once, checkpoints=marks, measure=measure,
            cap_seconds=args.max_open_seconds, give_up=give_up,
        )  # fmt: skip
        out[f"{side}_memory"] = o.memory
        out[f"{side}_open_seconds"] = o.seconds
        out[f"{side}_stopped"] = o.stopped
        print(f"  {side}: at " + ", ".join(str(c) for c, _ in o.memory) + f" sessions; "
              f"{o.seconds:.1f} s to open them", flush=True)  # fmt: skip
        if o.stopped:
            print(f"  {side}: {o.stopped}", flush=True)
    seen: dict[Side, list[list[float]]] = {side: [] for side in Side}
    for k in range(args.idle):
        for side in Side if k % 2 == 0 else reversed(Side):
            port = s.lmtp_port(side)

            def one(_: int, port: int = port, side: Side = side, k: int = k) -> None:
                deliver(port, Batch(f"sc{side[:2]}", templates, 1, 1, first=k), 1)

            seen[side] += await imap_scale.notifications(opened[side].idlers, one, 1)
        print(f"  delivery {k}: " + ", ".join(
            f"{side} p50 {percentile(seen[side][-1], 0.5) * 1e3:.0f} ms, last "
            f"{max(seen[side][-1]) * 1e3:.0f} ms" for side in Side) + f"; {load()}",
            flush=True)  # fmt: skip
    for side in Side:
        every = [t for r in seen[side] for t in r]
        out[f"{side}_idlers"] = len(opened[side].idlers)
        out[f"{side}_idle_ms"] = {
            "p50": percentile(every, 0.5) * 1e3, "p99": percentile(every, 0.99) * 1e3,
            "first_p50": percentile([min(r) for r in seen[side]], 0.5) * 1e3,
            "last_p50": percentile([max(r) for r in seen[side]], 0.5) * 1e3,
            "last_max": max(max(r) for r in seen[side]) * 1e3,
        }  # fmt: skip
        await imap_scale.close_all(opened[side].idlers)
    return out


def nofile(pid: int) -> str:
    """The process's RLIMIT_NOFILE, soft / hard, from /proc/PID/limits."""
    for line in Path(f"/proc/{pid}/limits").read_text().splitlines():
        if line.startswith("Max open files"):
            soft, hard = line.split()[3:5]
            return f"{soft} / {hard}"
    return "?"


# ---- the run ------------------------------------------------------------------------------


@dataclass
class Results:
    rounds: list[list[Figure]] = field(default_factory=list)
    idle: dict[Side, list[float]] = field(default_factory=dict)
    memory: dict[str, Any] = field(default_factory=dict)
    sizes: dict[str, int] = field(default_factory=dict)
    scale: dict[str, Any] = field(default_factory=dict)

    def best(self, side: Side, what: str) -> Figure:
        figures = [f for r in self.rounds[1:] or self.rounds for f in r]
        mine = [f for f in figures if f.side == side and f.what == what]
        return max(mine, key=lambda f: f.rate)


async def run(base: Path, args: argparse.Namespace) -> Results:
    small = tuple(small_template(k) for k in range(LARGE_EVERY - 1))
    templates = (*small, large_template(0, target=100 * KIB))
    batch = Batch("fold", templates, 1, args.messages)
    res = Results(sizes={"4k": len(small[0]), "100k": len(templates[-1])})
    print(f"messages: {args.messages}, 4 KiB {len(small[0])} B, 100 KiB {len(templates[-1])} B",
          flush=True)  # fmt: skip
    s = await start(base, args.sessions)
    try:
        t0 = time.perf_counter()
        await asyncio.to_thread(deliver, s.lmtp_port(Side.DOVECOT), batch, 16)
        print(f"dovecot: {args.messages} delivered in {time.perf_counter() - t0:.1f} s",
              flush=True)  # fmt: skip
        t0 = time.perf_counter()
        await asyncio.to_thread(deliver, s.lmtp_port(Side.FRONT), batch, 16)
        await delivered(s, args.messages)
        print(f"ours: {args.messages} delivered and durable in {time.perf_counter() - t0:.1f} s",
              flush=True)  # fmt: skip
        os.sync()
        if args.scale:
            res.scale = await scale(s, args, small)
            return res
        phases: list[tuple[str, Callable[[Side], Figure]]] = [
            ("flags", lambda side: flags(s, side, args.messages)),
            ("bodies", lambda side: bodies(s, side, args.messages)),
            ("mbsync", lambda side: mbsync(s, side, args.messages, base, args.mbsync_cap)),
        ]
        phases = [(what, phase) for what, phase in phases if what in args.phases]
        for r in range(0 if args.no_fetches else args.rounds + 1):
            figures = []
            for _, phase in phases:
                order = list(Side) if r % 2 == 0 else list(reversed(Side))
                for side in order:
                    f = await asyncio.to_thread(phase, side)
                    figures.append(f)
                    stopped = " (stopped)" if f.partial else ""
                    print(f"  round {r}{' (warm-up)' if r == 0 else ''} {side} {f.what}: "
                          f"{f.seconds:.2f} s, {f.messages} messages{stopped}, "
                          f"{f.rate:.1f} msg/s, {f.mb_s:.1f} MB/s; {load()}",
                          flush=True)  # fmt: skip
            res.rounds.append(figures)
        if args.profile and not args.no_fetches:
            await asyncio.to_thread(profile, s, args)
        res.idle = await asyncio.to_thread(idle_latencies, s, args.idle, small)
        for side, lat in res.idle.items():
            print(f"  IDLE {side}: p50 {percentile(lat, 0.5) * 1e3:.0f} ms, "
                  f"p99 {percentile(lat, 0.99) * 1e3:.0f} ms", flush=True)  # fmt: skip
        res.memory = await idle_memory(
            s, args.sessions, args.max_front_rss_mib << 10, args.max_open_seconds
        )
        print(f"  memory: {res.memory}", flush=True)
    finally:
        await stop(s)
    return res


def profile(s: Servers, args: argparse.Namespace) -> None:
    """py-spy (`--profile PATH-TO-PY-SPY`) on the front while it answers each phase once."""
    pid = s.front.proc.pid
    phases: list[tuple[str, Callable[..., Figure]]] = [
        ("flags", flags),
        ("bodies", bodies),
        ("mbsync", lambda s, side, n: mbsync(s, side, n, Path(args.dir).resolve(), 30.0)),
    ]
    for what, phase in (p for p in phases if p[0] in args.phases):
        out = Path(args.dir).resolve() / f"profile-{what}.txt"
        spy = subprocess.Popen(
            [args.profile, "record", "-p", str(pid), "-f", "raw", "-o", str(out), "-r", "200"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        time.sleep(1.0)  # py-spy attaches
        phase(s, Side.FRONT, args.messages)
        spy.send_signal(2)
        spy.wait(timeout=60)
        print(f"  profile of {what}: {out}", flush=True)


def report(args: argparse.Namespace, res: Results) -> None:
    print(f"\n{date.today().isoformat()} - nproc {os.cpu_count()}, {platform.platform()}, "
          f"Python {platform.python_version()}; {'--small' if args.small else 'full sizes'}; "
          f"{args.messages} messages (4 KiB {res.sizes['4k']} B, one in {LARGE_EVERY} of 100 KiB "
          f"{res.sizes['100k']} B), {args.rounds} rounds; {load()}\n")  # fmt: skip
    summary: dict[str, Any] = {"date": date.today().isoformat(), "small": args.small,
                               "messages": args.messages}  # fmt: skip
    if args.scale:
        return report_scale(res.scale, summary)
    print("| measure | Dovecot | front | **front / Dovecot** | target |")
    print("|---|---:|---:|---:|---|")
    for what, unit, value in (
        ()
        if args.no_fetches
        else (
            (w, u, v)
            for w, u, v in (
                ("flags", "msg/s", lambda f: f.rate),
                ("bodies", "MB/s", lambda f: f.mb_s),
                ("mbsync", "msg/s", lambda f: f.rate),
            )
            if w in args.phases
        )
    ):
        d, o = (value(res.best(side, what)) for side in (Side.DOVECOT, Side.FRONT))
        label = LABELS[what]
        for f in (res.best(side, what) for side in Side):
            if f.partial:
                label += f" ({f.side}: stopped after {f.seconds:g} s, {f.messages} copied)"
        print(f"| {label}, {unit} | {d:.1f} | {o:.1f} | **{o / d:.2f}** | >= 0.5 |")
        summary |= {f"dovecot_{what}": d, f"front_{what}": o, f"ratio_{what}": o / d}
    for side in Side:
        lat = res.idle[side]
        p50, p99 = percentile(lat, 0.5) * 1e3, percentile(lat, 0.99) * 1e3
        print(f"| IDLE delivery to EXISTS ({side}), p50 / p99 ms | | | {p50:.0f} / {p99:.0f} "
              f"| p99 < 1000 |")  # fmt: skip
        summary |= {f"{side}_idle_p50_ms": p50, f"{side}_idle_p99_ms": p99}
    mem = res.memory
    print(f"| memory per idle session, KiB ({mem['sessions']} sessions, RSS "
          f"{mem['rss_before_kib'] / 1024:.0f} → {mem['rss_after_kib'] / 1024:.0f} MiB) | | "
          f"{mem['kib_per_idle_session']:.0f} | | < 195 KiB |")  # fmt: skip
    if mem["stopped"]:
        print(f"(memory: {mem['stopped']})")
    summary |= {"kib_per_idle_session": mem["kib_per_idle_session"],
                "idle_sessions": mem["sessions"]}  # fmt: skip
    print(json.dumps(summary))


def report_scale(sc: dict[str, Any], summary: dict[str, Any]) -> None:
    """--scale: memory a session at each checkpoint, and IDLE with every session idling."""
    print(f"front's RLIMIT_NOFILE (soft / hard): {sc['front_nofile']}")
    print("| side | sessions | memory (KiB) | KiB a session since the warm one |")
    print("|---|---:|---|---:|")
    for side, key in ((Side.FRONT, "rss"), (Side.DOVECOT, "pss")):
        mem = sc[f"{side}_memory"]
        base = mem[0][1]
        print(f"| {side} | 1 (warm) | {base} | |")
        for n, m in mem[1:]:
            per = (m[key] - base[key]) / n if n else 0.0
            print(f"| {side} | {n} | {m} | {key} {per:.1f} |")
        per = imap_scale.per_session(mem, key)
        summary[f"{side}_kib_per_session_{key}"] = per[-1][1] if per else 0.0
        summary[f"{side}_sessions"] = mem[-1][0]
        if side == Side.DOVECOT and per:
            summary["dovecot_kib_per_session_rss"] = (mem[-1][1]["rss"] - base["rss"]) / mem[-1][0]
        if sc[f"{side}_stopped"]:
            print(f"({side}: {sc[f'{side}_stopped']})")
    summary["front_hwm_kib"] = sc["front_memory"][-1][1]["hwm"]
    for side in Side:
        ms = sc[f"{side}_idle_ms"]
        print(f"| IDLE, {side}, {sc[f'{side}_idlers']} idlers: every idler p50 / p99 "
              f"{ms['p50']:.0f} / {ms['p99']:.0f} ms; first idler p50 {ms['first_p50']:.0f}; "
              f"last idler p50 {ms['last_p50']:.0f}, max {ms['last_max']:.0f} ms |")  # fmt: skip
        summary[f"{side}_idle_p50_ms"], summary[f"{side}_idle_p99_ms"] = ms["p50"], ms["p99"]
    print(json.dumps(summary))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, help="in the folder (10000)")
    parser.add_argument("--rounds", type=int, help="measured rounds after the warm-up (3)")
    parser.add_argument("--idle", type=int, help="IDLE deliveries per side (50)")
    parser.add_argument("--sessions", type=int, help="idle sessions on the front (1000)")
    parser.add_argument("--max-front-rss-mib", type=int, default=6144,
                        help="stop opening idle sessions past this RSS of the front")  # fmt: skip
    parser.add_argument("--max-open-seconds", type=float, default=900,
                        help="stop opening idle sessions after this long")  # fmt: skip
    parser.add_argument("--mbsync-cap", type=float, default=180,
                        help="seconds an mbsync may run: past it, the rate so far")  # fmt: skip
    parser.add_argument("--phases", default="flags,bodies,mbsync",
                        help="the fetch phases measured, comma-separated (all three)")  # fmt: skip
    parser.add_argument("--no-fetches", action="store_true",
                        help="skip the fetch and mbsync rounds: IDLE and memory only")  # fmt: skip
    parser.add_argument("--profile", metavar="PY_SPY",
                        help="py-spy's path: profile the front's fetches once")  # fmt: skip
    parser.add_argument("--scale", action="store_true",
                        help="no fetches: --sessions idle sessions on each side, memory as "
                        "they grow, then --idle deliveries timed to every idler")  # fmt: skip
    parser.add_argument("--at-once", type=int, default=4,
                        help="--scale: sessions opened at once")  # fmt: skip
    add_work_dir(parser, "var/bench-imap")
    parser.add_argument("--small", action="store_true",
                        help="200 messages, 1 round, 5 IDLE, 20 sessions: a minute")  # fmt: skip
    args = parser.parse_args()
    args.messages = args.messages or (200 if args.small else 10_000)
    args.rounds = args.rounds or (1 if args.small else 3)
    args.idle = args.idle or (5 if args.small else 50)
    args.sessions = args.sessions or (20 if args.small else 1000)
    args.phases = [p for p in args.phases.split(",") if p]
    if not set(args.phases) <= set(LABELS):
        parser.error(f"--phases: of {', '.join(LABELS)}")
    if min(args.messages, args.rounds, args.idle, args.sessions) < 1:
        parser.error("--messages, --rounds, --idle, --sessions: >= 1")
    if args.scale:  # two descriptors a session on each side, the servers' own besides
        imap_scale.raise_nofile(4 * args.sessions + 1000)
    started = time.perf_counter()
    # a TERM (a run stopped from another shell: a background job ignores INT) stops the
    # servers on the way out, as an interrupt does
    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
    with work_dir(args) as base:
        base.chmod(0o755)
        res = asyncio.run(run(base, args))
    report(args, res)
    print(f"(whole run: {time.perf_counter() - started:.1f} s)")


if __name__ == "__main__":
    main()
