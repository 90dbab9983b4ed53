"""bench/imap.py --scale: many idle sessions on one server, its memory as they grow, and how
fast a delivered message reaches every one of them (issue 50: "a front's memory per idle
session (target < 200 KB), 1,000 idle sessions on one front"; IDLE p99 < 1 s).

The clients are cheap: asyncio streams speaking the few commands (STARTTLS, LOGIN, SELECT,
IDLE) in one process, not a thread or an imaplib per session.  Each holds two descriptors
at most, so the script raises its own RLIMIT_NOFILE to its hard limit (`raise_nofile`); the
servers it starts inherit that limit.

Memory, read from /proc once the reading stops moving:
- the front (one process): VmRSS and VmHWM from /proc/PID/status, Pss from smaps_rollup;
- Dovecot (a process per session, `imap`, and in its default high-security mode a login
  process per TLS session, `imap-login`, that stays to proxy the TLS): the sums of Rss, Pss
  and Private (Private_Clean + Private_Dirty, USS) over every process under Dovecot's
  master, read from /proc/PID/smaps_rollup.  A sum of Rss counts each shared library once
  per process; Pss shares it out, so its sum is the memory the processes take together.
"""

from __future__ import annotations

import asyncio
import contextlib
import resource
import ssl
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

TIMEOUT = 600.0  # a read: only bounds a failure


def raise_nofile(need: int) -> tuple[int, int]:
    """RLIMIT_NOFILE's soft limit raised to its hard one; an error if that is below `need`
    (the clients' sockets and the servers', which inherit it).  The limits, after."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    if hard != resource.RLIM_INFINITY and hard < need:
        raise SystemExit(
            f"RLIMIT_NOFILE's hard limit is {hard}, under the {need} descriptors "
            f"this run needs: raise it (ulimit -Hn, or LimitNOFILE=) or open fewer sessions"
        )
    return resource.getrlimit(resource.RLIMIT_NOFILE)


# ---- memory from /proc ----------------------------------------------------------------------


def status_kib(pid: int) -> dict[str, int]:
    """VmRSS and VmHWM of `pid`, KiB."""
    out = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key = line.split(":", 1)[0]
        if key in ("VmRSS", "VmHWM"):
            out[key] = int(line.split()[1])
    return out


def rollup_kib(pid: int) -> dict[str, int]:
    """Rss, Pss and Private (USS) of `pid` from /proc/PID/smaps_rollup, KiB."""
    got: dict[str, int] = {}
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[2] == "kB":
            got[parts[0].rstrip(":")] = int(parts[1])
    return {"Rss": got["Rss"], "Pss": got["Pss"],
            "Private": got["Private_Clean"] + got["Private_Dirty"]}  # fmt: skip


def descendants(root: int) -> list[int]:
    """Every process under `root` (not itself), by the parent pids /proc gives."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            fields = stat.read_text().rsplit(")", 1)[1].split()
            children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    out, todo = [], [root]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def front_memory(pid: int) -> dict[str, int]:
    """The front's VmRSS, VmHWM and Pss, KiB."""
    return {"rss": (s := status_kib(pid))["VmRSS"], "hwm": s["VmHWM"],
            "pss": rollup_kib(pid)["Pss"]}  # fmt: skip


def dovecot_memory(master: int) -> dict[str, int]:
    """Rss, Pss and Private summed over Dovecot's master and everything under it, KiB, and
    how many `imap` and `imap-login` processes there are."""
    out = {"rss": 0, "pss": 0, "uss": 0, "imap": 0, "imap-login": 0, "processes": 0}
    for pid in [master, *descendants(master)]:
        try:
            r = rollup_kib(pid)
            name = Path(f"/proc/{pid}/comm").read_text().strip()
        except OSError:  # gone meanwhile
            continue
        out["rss"] += r["Rss"]
        out["pss"] += r["Pss"]
        out["uss"] += r["Private"]
        out["processes"] += 1
        if name in ("imap", "imap-login"):
            out[name] += 1
    return out


def settled(read: Callable[[], dict[str, int]], key: str, every: float = 0.5,
            timeout: float = 60.0) -> dict[str, int]:  # fmt: skip
    """`read()` once its `key` stops moving (two reads `every` seconds apart within 0.2%)."""
    deadline = time.monotonic() + timeout
    last = read()
    while time.monotonic() < deadline:
        time.sleep(every)
        now = read()
        if abs(now[key] - last[key]) <= last[key] / 500:
            return now
        last = now
    return last


# ---- the idling clients ---------------------------------------------------------------------


@dataclass
class Idler:
    """One session left in IDLE: its stream and the EXISTS it was last shown."""

    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    exists: int


async def open_idler(port: int, ctx: ssl.SSLContext, host: str, login: bytes) -> Idler:
    """STARTTLS, `login` (`LOGIN user "password"`), SELECT INBOX, IDLE: the session idling."""
    r, w = await asyncio.open_connection(host, port)
    exists = 0

    async def to(prefix: bytes) -> None:
        nonlocal exists
        while not (line := await asyncio.wait_for(r.readline(), TIMEOUT)).startswith(prefix):
            if not line or line[:2] == prefix[:2]:  # closed, or NO / BAD
                raise RuntimeError(f"{prefix!r}: {line!r}")
            if line.endswith(b" EXISTS\r\n"):
                exists = int(line.split()[1])

    try:
        await to(b"* OK")
        w.write(b"s STARTTLS\r\n")
        await to(b"s OK")
        await w.start_tls(ctx, server_hostname=host)
        w.write(b"a " + login + b"\r\nb SELECT INBOX\r\n")
        await to(b"a OK")
        await to(b"b OK")
        w.write(b"c IDLE\r\n")
        await to(b"+")
    except BaseException:
        w.close()
        raise
    return Idler(r, w, exists)


@dataclass
class Opened:
    """What `open_idlers` did: the sessions, the memory at each checkpoint, why it stopped."""

    idlers: list[Idler]
    memory: list[tuple[int, dict[str, int]]]  # (sessions open, the reading)
    seconds: float
    stopped: str = ""


async def open_idlers(
    opener: Callable[[], Awaitable[Idler]],
    n: int,
    *,
    at_once: int,
    checkpoints: list[int],
    measure: Callable[[], dict[str, int]],
    cap_seconds: float,
    give_up: Callable[[dict[str, int]], str] = lambda _: "",
) -> Opened:
    """`n` sessions opened `at_once` at a time; `measure()` (in a thread) after one warm
    session (checkpoint 0: the imports, first-use caches) and at each of `checkpoints`."""
    idlers = [await opener()]
    memory = [(0, await asyncio.to_thread(measure))]
    out = Opened([], memory, 0.0)
    t0 = time.perf_counter()
    marks = sorted(c for c in checkpoints if 0 < c <= n)
    while len(out.idlers) < n:
        if marks and len(out.idlers) >= marks[0]:
            reading = await asyncio.to_thread(measure)
            memory.append((len(out.idlers), reading))
            marks = [m for m in marks if m > len(out.idlers)]
            out.stopped = give_up(reading)
            if out.stopped:
                break
        if time.perf_counter() - t0 > cap_seconds:
            out.stopped = f"stopped at {len(out.idlers)}: {cap_seconds:g} s spent opening"
            break
        k = min(at_once, n - len(out.idlers), (marks[0] - len(out.idlers)) if marks else n)
        got = await asyncio.gather(*(opener() for _ in range(k)), return_exceptions=True)
        out.idlers += [g for g in got if isinstance(g, Idler)]
        failed = [g for g in got if isinstance(g, BaseException)]
        if failed:  # what was opened is measured; why it stopped is said
            out.stopped = f"stopped at {len(out.idlers)}: a session failed: {failed[0]!r}"
            break
    out.seconds = time.perf_counter() - t0
    if not memory or memory[-1][0] != len(out.idlers):
        memory.append((len(out.idlers), await asyncio.to_thread(measure)))
    out.idlers += idlers  # the warm one idles too, counted in the notifications
    return out


def per_session(memory: list[tuple[int, dict[str, int]]], key: str) -> list[tuple[int, float]]:
    """(sessions, KiB a session since the warm reading) at each checkpoint."""
    base = memory[0][1][key]
    return [(n, (m[key] - base) / n) for n, m in memory[1:] if n]


@dataclass
class Round:
    """One delivery: when it began, and when each idler read its EXISTS."""

    began: float
    seen: list[float] = field(default_factory=list)
    all_seen: asyncio.Event = field(default_factory=asyncio.Event)


async def notifications(
    idlers: list[Idler], deliver_one: Callable[[int], Any], count: int, *, bound: float = 120.0
) -> list[list[float]]:
    """`count` messages delivered one at a time (`deliver_one(k)`, blocking, in a thread);
    for each, the seconds from its start to each idler reading `* n EXISTS` past what it
    had.  A delivery that not every idler sees within `bound` seconds fails the run."""
    current: list[Round] = []

    async def watch(idler: Idler) -> None:
        while line := await idler.reader.readline():
            if line.endswith(b" EXISTS\r\n") and (n := int(line.split()[1])) > idler.exists:
                idler.exists = n
                now = time.perf_counter()
                if current:
                    r = current[-1]
                    r.seen.append(now - r.began)
                    if len(r.seen) == len(idlers):
                        r.all_seen.set()

    watchers = [asyncio.create_task(watch(i)) for i in idlers]
    try:
        out = []
        for k in range(count):
            r = Round(time.perf_counter())
            current.append(r)
            await asyncio.to_thread(deliver_one, k)
            try:
                await asyncio.wait_for(r.all_seen.wait(), bound)
            except TimeoutError:
                raise RuntimeError(
                    f"delivery {k}: {len(r.seen)} of {len(idlers)} idlers saw it in {bound:g} s"
                ) from None
            out.append(r.seen)
        return out
    finally:
        for w in watchers:
            w.cancel()


async def close_all(idlers: list[Idler]) -> None:
    """DONE and LOGOUT written to each, then closed."""
    for i in idlers:
        with contextlib.suppress(OSError, RuntimeError):
            i.writer.write(b"DONE\r\nz LOGOUT\r\n")
            i.writer.close()
