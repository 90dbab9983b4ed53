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
_start = _LOW + (os.getpid() * 97) % (_HIGH - _LOW)
_PORTS = itertools.cycle([*range(_start, _HIGH), *range(_LOW, _start)])


def free_port(host: str = "127.0.0.1") -> int:
    """A port nothing listens on at `host`, outside the ephemeral range."""
    for _ in range(_HIGH - _LOW):
        port = next(_PORTS)
        with socket.socket() as s:
            try:
                s.bind((host, port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free port between {_LOW} and {_HIGH} on {host}")
