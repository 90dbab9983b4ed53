"""The event loop a serving process runs on: uvloop's or asyncio's own, by process, or as asked.

**Why uvloop.**  For a small message the transport's hop is CPU-bound, and a good part of
that CPU is the event loop's own: py-spy of a 4 KiB LMTP run put 18 % of the transport in
asyncio's socket writes, the rest spread over aiosmtpd's command handling, the queue's group
commit and the delivery's aiohttp calls (about 1.4 ms of CPU a message).  uvloop (libuv, in
Cython) does the same work in C: the transport and the nodes on it (a `git archive` of main
with only the loop changed, two pairs alternating, `bench/lmtp.py --sides transport`) took
802 and 756 messages/s of 4 KiB against 675 and 626, the transport's CPU 5.7 / 5.9 s against
7.0 / 7.3, the active's 2.9 / 3.2 against 4.0 / 4.2: about 19 % less a message.  Full runs
on a loaded machine: 9 % and 22 % less CPU a 4 KiB message over the three processes
(bench/README.md, "lmtp: the transport and the nodes on uvloop").

**What it costs**: a node's CPU a MiB of 1 MiB messages rose 15-37 % on uvloop in the same
runs, from its reads (below): an aiohttp server reading 1 MiB bodies spends about 3 ms a MiB
on uvloop against 1 ms on asyncio's loop with `bound_socket_reads`.

**Who runs on it**: `transport serve`, by default: its hop is where a small message's CPU
goes, and its CPU a MiB of 1 MiB messages on uvloop was within 3-4 % of asyncio's (its
large reads cost it too, below, but it does less with each byte than a node does).
`replication-node serve` runs on asyncio's loop by default: it gains as much a small write
(the active's CPU 4.0 / 4.2 s against 2.9 / 3.2 above) but loses more on every large body it
takes (below), and
a node's large writes, replication and moves are where its memory and CPU bounds are set
(issues 49 and 52): a node's default changes when its reads of a large body no longer cost
a fresh mapping each.  `DG_EVENT_LOOP` sets either.  Who does not run on it, and why:
- the IMAP front (`imap-front serve`): its memory per idle session relies on
  `memory.bound_tls_buffers`, which sets asyncio's `SSLProtocol` buffer (16 KiB, not
  256); uvloop has its own TLS transport, which allocates 256 KiB a connection (touched as
  data comes) and has no setting for it.  It stays on asyncio's loop until measured no
  worse by bench/imap.py's memory per session;
- the guarantee service: gRPC's aio server runs its own I/O (grpcio's completion queue
  polled from the loop); the event loop's transports are not on its path;
- the mover and the command-line tools: short-lived, or waiting on nodes; the loop is not
  what their time goes to.

**What changes under uvloop.**  A plain socket's reads go into one buffer of the loop's
(250 KB, allocated once), and each read becomes a bytes object of what came: from the heap
up to the allocator's mmap threshold (128 KiB), a fresh mapping past it, which on loopback
is nearly every read of a large body (each faulted in page by page: ~760 faults a MiB).
`memory.bound_socket_reads`, which bounds asyncio's per-read allocation, does not apply and
is not called; uvloop has no setting for it.  The memory targets hold (bench/README.md:
peaks within a few MB of asyncio's, rest 3-4 MB higher).  TLS connections get
uvloop's TLS transport: a 256 KiB buffer each, from `malloc` (untouched pages are not
resident), where asyncio's zero-filled one was wholly resident.

**Asking for a loop**: `DG_EVENT_LOOP=asyncio` in a serving process's environment
runs it on asyncio's loop (with `bound_socket_reads`), to tell a fault of uvloop's from
ours; `DG_EVENT_LOOP=uvloop` runs a node on uvloop.  Nothing (or empty) leaves each process
its default (`run`'s `default`).  Another value is a config error.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Coroutine, Mapping
from enum import StrEnum
from typing import Any, TypeVar

import uvloop

from dag_common.errors import ConfigError
from dag_common.memory import bound_socket_reads

T = TypeVar("T")

ENV = "DG_EVENT_LOOP"


class EventLoop(StrEnum):
    """Which loop a serving process runs on."""

    UVLOOP = "uvloop"
    ASYNCIO = "asyncio"


def chosen(
    environ: Mapping[str, str] = os.environ, default: EventLoop = EventLoop.UVLOOP
) -> EventLoop:
    """The loop `environ` asks for (`DG_EVENT_LOOP`; `default` without it); ConfigError for
    a value that names none."""
    value = environ.get(ENV, "").strip().lower() or default
    try:
        return EventLoop(value)
    except ValueError:
        names = ", ".join(loop.value for loop in EventLoop)
        raise ConfigError(f"${ENV}={value!r}: not an event loop (one of {names})") from None


def run(
    coro: Coroutine[Any, Any, T],
    *,
    default: EventLoop,
    environ: Mapping[str, str] = os.environ,
) -> T:
    """Run `coro` to its end on the loop `environ` asks for, else on the process's `default`
    (see the module's docstring), as `asyncio.run` does: then the loop's async generators
    and default executor are closed."""
    try:
        loop = chosen(environ, default)
    except ConfigError:
        coro.close()  # never awaited: said, not warned about
        raise
    if loop is EventLoop.ASYNCIO:
        bound_socket_reads()
        return asyncio.run(coro)
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        return runner.run(coro)


def running() -> EventLoop:
    """The loop this coroutine runs on (a server says it beside its address)."""
    loop = asyncio.get_running_loop()
    return EventLoop.UVLOOP if isinstance(loop, uvloop.Loop) else EventLoop.ASYNCIO
