"""Pick a local port to listen on, for the demo, the benches, the tutorial and the tests that
start real processes (beside the product: no product code listens on a port it picked)."""

from __future__ import annotations

import fcntl
import itertools
import os
import socket
import tempfile
import time
from pathlib import Path

# Ports come from below the kernel's ephemeral range (32768-60999 on Linux by default): a port
# the kernel hands out for bind(0) is also one it may give the next outgoing connection as its
# source port, and with a dozen processes dialling each other a port picked that way can be
# taken between the pick and the listen (a CI run lost a guarantee-api start to a failure at
# startup that this explains). Each process starts at its own offset and hands out in turn.
_LOW, _HIGH = 20000, 32000
# A port picked is free at the pick, not yet bound: until its process listens, any other
# process could pick it too.  So every pick is also written down, machine-wide, for this long
# (RESERVED_FOR seconds, monotonic: one clock per machine, which libfaketime leaves alone), and
# no process on the machine picks a port written down by another in that time.  Slices and
# offsets alone did not hold: a worker's children, a bench or tutorial run, and other pytest
# runs on the same machine (a `pytest -n 2` has the same slices as the CI's) pick from the
# same range at offsets of their own.
RESERVED_FOR = 600.0
_RESERVATIONS = "DAG_PORT_RESERVATIONS"  # the file's path, if not the default (tests)


def _range(env: dict[str, str]) -> tuple[int, int]:
    """This process's share of the range.  Under pytest-xdist (`make test` runs the suite in
    workers, each a process of its own) worker N of M, and every process it starts (they
    inherit its environment), take the Nth of M slices: a port one worker picked and has not
    yet bound (a node still starting) is never one the other worker picks, whatever their
    offsets and however fast each hands ports out."""
    worker, count = env.get("PYTEST_XDIST_WORKER", ""), env.get("PYTEST_XDIST_WORKER_COUNT", "")
    if not (worker.startswith("gw") and worker[2:].isdigit() and count.isdigit()):
        return _LOW, _HIGH
    index, total = int(worker[2:]), max(int(count), 1)
    width = (_HIGH - _LOW) // total
    low = _LOW + (index % total) * width
    return low, low + width


_low, _high = _range(dict(os.environ))
_start = _low + (os.getpid() * 97) % (_high - _low)
_PORTS = itertools.cycle([*range(_start, _high), *range(_low, _start)])


def reservations_path() -> Path:
    """The machine's file of ports picked and not yet expired (`port expiry` lines)."""
    default = Path(tempfile.gettempdir()) / "dag-test-ports"
    return Path(os.environ.get(_RESERVATIONS) or default)


def _read(text: str, now: float) -> dict[int, float]:
    """The reservations in `text` still in force at `now` (one whose expiry lies further
    than RESERVED_FOR ahead, a second's slack for the rounding of what was written, is from a
    clock before a reboot: expired)."""
    held: dict[int, float] = {}
    for line in text.splitlines():
        try:
            port, expiry = line.split()
            held[int(port)] = float(expiry)
        except ValueError:
            continue  # a line cut by a full disk, say: that port is not held
    return {p: e for p, e in held.items() if now < e <= now + RESERVED_FOR + 1}


def free_port(host: str = "127.0.0.1") -> int:
    """A port nothing listens on at `host`, outside the ephemeral range (and, under xdist,
    inside this worker's slice of it), and one no process on this machine has picked in the
    last RESERVED_FOR seconds."""
    path = reservations_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # held for the pick: a few binds at most
        with os.fdopen(os.dup(fd), "r+") as file:
            now = time.monotonic()
            held = _read(file.read(), now)
            port = _pick(host, held)
            held[port] = now + RESERVED_FOR
            file.seek(0)
            file.truncate()
            file.write("".join(f"{p} {e:.3f}\n" for p, e in held.items()))
        return port
    finally:
        os.close(fd)  # releases the lock


def _pick(host: str, held: dict[int, float]) -> int:
    for _ in range(_high - _low):
        port = next(_PORTS)
        if port in held:
            continue
        with socket.socket() as s:
            try:
                s.bind((host, port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free port between {_low} and {_high} on {host}")
