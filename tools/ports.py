"""Pick a local port to listen on, for the demo, the benches, the tutorial and the tests that
start real processes (beside the product: no product code listens on a port it picked)."""

from __future__ import annotations

import itertools
import os
import socket

# Ports come from below the kernel's ephemeral range (32768-60999 on Linux by default): a port
# the kernel hands out for bind(0) is also one it may give the next outgoing connection as its
# source port, and with a dozen processes dialling each other a port picked that way can be
# taken between the pick and the listen (a CI run lost a guarantee-api start to a failure at
# startup that this explains). Each process starts at its own offset and hands out in turn.
_LOW, _HIGH = 20000, 32000


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


def free_port(host: str = "127.0.0.1") -> int:
    """A port nothing listens on at `host`, outside the ephemeral range (and, under xdist,
    inside this worker's slice of it)."""
    for _ in range(_high - _low):
        port = next(_PORTS)
        with socket.socket() as s:
            try:
                s.bind((host, port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free port between {_low} and {_high} on {host}")
