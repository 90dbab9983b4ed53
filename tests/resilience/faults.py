"""The faults, each a small function (or pair: inject, heal) over the lab and its cluster:
signals to a process (kill -9, SIGSTOP/SIGCONT), iptables drops and random loss inside a
member's namespace, a token bucket (tbf) on a member's link, a disk filled with ballast, a
clock moved under a process started on a libfaketime spec file, and bytes flipped in or
cut off a closed log generation or a database file.

Each returns or records a `FaultWindow` (which copies it took out, and when) for the
invariants; none waits for the system to react, the scenario does that.
"""

from __future__ import annotations

import asyncio
import errno
import os
import random
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

from tests.cluster_harness import FAKETIME_LIB, LocalCluster, libfaketime_env
from tests.netns import NetnsLab
from tests.resilience.invariants import FaultWindow


@dataclass
class Faults:
    """The faults a scenario injected, with their windows (ended: when healed)."""

    windows: list[FaultWindow] = field(default_factory=list)
    _open: dict[str, tuple[frozenset[str], float]] = field(default_factory=dict)

    def begin(self, name: str, down: set[str] | frozenset[str] = frozenset()) -> None:
        self._open[name] = (frozenset(down), time.monotonic())

    def end(self, name: str) -> None:
        down, started = self._open.pop(name)
        self.windows.append(FaultWindow(name, down, started, time.monotonic()))

    def close(self) -> list[FaultWindow]:
        for name in list(self._open):
            self.end(name)
        return self.windows

    def names(self) -> str:
        return "+".join(w.name for w in self.windows) or "-"


# ---- processes ---------------------------------------------------------------------------


def signal_pid(pid: int, sig: signal.Signals) -> None:
    """A signal to one process we started (`ip netns exec` execs the command: its pid)."""
    os.kill(pid, sig)


def stop(cluster: LocalCluster, node: str) -> None:
    signal_pid(cluster.procs[node].pid, signal.SIGSTOP)


def cont(cluster: LocalCluster, node: str) -> None:
    signal_pid(cluster.procs[node].pid, signal.SIGCONT)


async def restart(cluster: LocalCluster, node: str, env: dict[str, str] | None = None) -> None:
    """Start a killed node again and wait until it answers /healthz."""
    cluster.start_node(node, env=env)
    await cluster.wait_healthy(node, timeout=60)


# ---- network -----------------------------------------------------------------------------


def lossy(net: NetnsLab, node: str, probability: float) -> None:
    """Drop `probability` of the packets in and out of `node`'s link, at random."""
    for chain, flag in (("INPUT", "-i"), ("OUTPUT", "-o")):
        net.exec(node, "iptables", "-A", chain, flag, "eth0", "-m", "statistic",
                 "--mode", "random", "--probability", f"{probability}", "-j", "DROP")  # fmt: skip


def slow_link(net: NetnsLab, node: str, rate: str = "512kbit") -> None:
    """A token bucket on `node`'s outgoing link: its peers get its logs at `rate`."""
    net.exec(node, "tc", "qdisc", "add", "dev", "eth0", "root", "tbf",
             "rate", rate, "burst", "32kbit", "latency", "500ms")  # fmt: skip


def fast_link(net: NetnsLab, node: str) -> None:
    net.exec(node, "tc", "qdisc", "del", "dev", "eth0", "root")


# ---- disks -------------------------------------------------------------------------------


BALLAST = "ballast"


def fill(where: Path) -> int:
    """Fill the file system under `where` with a ballast file until it is full; its size
    (0 on a disk already full)."""
    # Unbuffered: a buffered file keeps what did not fit of its last write (up to its 8 KiB
    # buffer) and fails again flushing it at close, out of `fill` (reported on the `with
    # open(...)` line, as if opening had failed): a disk with a page less than a whole
    # number of megabytes free did that.  A raw write takes what fits and says how much;
    # the next one fails with ENOSPC.
    written = 0
    for name, size in ((BALLAST, 1 << 20), (BALLAST + ".tail", 4096)):  # the last bytes too
        chunk = b"\0" * size
        with open(where / name, "wb", buffering=0) as f:
            try:
                while True:
                    written += f.write(chunk)
            except OSError as exc:
                if exc.errno != errno.ENOSPC:
                    raise
    return written


def leave_room(where: Path, room: int) -> int:
    """After `fill`: give back about `room` bytes of the ballast; how many were freed."""
    tail = where / (BALLAST + ".tail")
    tail.unlink(missing_ok=True)
    ballast = where / BALLAST
    size = ballast.stat().st_size
    os.truncate(ballast, max(0, size - room))
    return size - max(0, size - room)


def drain(where: Path) -> None:
    """Space comes back: the ballast is removed."""
    for name in (BALLAST, BALLAST + ".tail"):
        (where / name).unlink(missing_ok=True)


def closed_generations(cluster: LocalCluster, node: str, db: str) -> list[Path]:
    """The closed generation files under `node`'s copy of `db` (the open log excluded)."""
    logs = cluster.root / node / db / "logs"
    return sorted(p for p in logs.glob("E????????.log"))


def generation_of(path: Path) -> int:
    """The generation a closed log file's name says (E0000000A.log: 10)."""
    return int(path.name[1:9], 16)


def database_file(cluster: LocalCluster, node: str, db: str) -> Path:
    return cluster.root / node / db / f"{db}.sqlite"


def flip_byte(path: Path, rng: random.Random) -> int:
    """Flip one bit of one byte of `path` at a random offset; the offset."""
    size = path.stat().st_size
    offset = rng.randrange(size)
    with open(path, "r+b") as f:
        f.seek(offset)
        byte = f.read(1)[0]
        f.seek(offset)
        f.write(bytes([byte ^ (1 << rng.randrange(8))]))
        f.flush()
        os.fsync(f.fileno())
    return offset


def flip_in_row(path: Path, rng: random.Random, marker: bytes) -> tuple[str, int]:
    """Flip one bit of a letter inside a row of a database: a byte inside one of the places
    `marker` occurs, in the file or (rows not yet checkpointed) its WAL, where the running
    process reads it through its WAL index: a page that stays valid, a row that does not.
    The last bit of a lowercase letter: still text, another letter.  The file and offset."""
    places: list[tuple[Path, int]] = []
    for where in (path, path.with_name(path.name + "-wal")):
        data = where.read_bytes() if where.exists() else b""
        start = data.find(marker)
        while start != -1:
            places.append((where, start + len(marker) - 2))  # the "y" of "body"
            start = data.find(marker, start + 1)
    assert places, f"{marker!r} is in neither {path} nor its WAL"
    where, offset = rng.choice(places)
    with open(where, "r+b") as f:
        f.seek(offset)
        byte = f.read(1)[0]
        f.seek(offset)
        f.write(bytes([byte ^ 1]))
        f.flush()
        os.fsync(f.fileno())
    return where.name, offset


def truncate(path: Path, rng: random.Random) -> int:
    """Cut `path` at a random length shorter than it; the new length."""
    size = path.stat().st_size
    length = rng.randrange(max(1, size))
    os.truncate(path, length)
    return length


# ---- clocks ------------------------------------------------------------------------------


@dataclass
class FakeClock:
    """A process's wall clock read from a libfaketime spec file, moved at will (a jump
    forward or back, `+2h`, `-30m`); the monotonic clock is left real.

    libfaketime reads the file again at a clock call once `CACHE` seconds have passed (by
    the real clock) since it last did, not at every call (FAKETIME_NO_CACHE): it does at
    every timed wait on a condition variable too, which is how CPython's threads wait for
    the GIL.  mbx2 in clock-skew read it 85,000 times a second, with 3.7 times the CPU of
    mbx1; on a busy machine its lease renewals (every 1 s, TTL 3 s) came up to 1.9 s apart
    and its event loop stalled up to 0.9 s, and in CI DB2 failed over from it during the
    setup, before any fault.  A jump takes effect within 2 * CACHE seconds: `jump` waits."""

    spec: Path

    CACHE: ClassVar[int] = 1  # seconds; libfaketime counts whole ones

    def env(self) -> dict[str, str]:
        self.spec.write_text("+0\n") if not self.spec.exists() else None
        return libfaketime_env(
            FAKETIME_TIMESTAMP_FILE=str(self.spec), FAKETIME_CACHE_DURATION=str(self.CACHE)
        )

    async def jump(self, offset: str) -> None:
        """Move the clock to `offset` from the real one; return once every clock reading of
        the process sees it (it reads the file at the first call past its cache)."""
        tmp = self.spec.with_suffix(".tmp")
        tmp.write_text(f"{offset}\n")
        tmp.replace(self.spec)
        await asyncio.sleep(2 * self.CACHE + 0.5)


def faketime_available() -> bool:
    return FAKETIME_LIB.exists()


def iptables_rules(net: NetnsLab, node: str) -> str:
    """The rules in `node`'s namespace (for a failure message)."""
    done = subprocess.run([*net.prefix(node), "iptables", "-S"], capture_output=True, text=True)
    return done.stdout
