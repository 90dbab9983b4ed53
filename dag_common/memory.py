"""A process's memory: the allocator told to give large blocks back, what the process holds
(`/proc/self/status`), and a budget of bytes in flight that work waits for instead of growing
the process.

**Why the allocator is set.**  glibc serves a block of 128 KiB or more with its own `mmap`
and unmaps it when it is freed, but it raises that threshold to the size of every such block
freed (up to 32 MiB), so after the first large item is freed the next ones of its size come
from the heap and the arenas, which keep freed memory: a node that wrote 10 items of 30 MiB
held 420 MB idle, against 61 MB at rest (bench/README.md, memory).  Setting the threshold
fixes it (`mallopt(M_MMAP_THRESHOLD)` turns the adjustment off), so every large body is its
own mapping, returned to the kernel when its last reference goes: RSS follows the bodies
alive, at the cost of an `mmap`/`munmap` per large block (microseconds, against the
milliseconds a megabyte of body costs to write and fsync).  `MALLOC_MMAP_THRESHOLD_` in the
environment does the same, but only for a process started with it; this works wherever the
code runs (a test, the demo, a pod).  On a libc without `mallopt` (musl) it does nothing.

**The budget** (`MemoryBudget`) counts the bytes of bodies a process holds for requests in
flight.  A request takes its share before it reads a body and gives it back when it is done;
past the budget it waits a short while, then is refused (`Overloaded`, a 503 with
`Retry-After`): a burst of large writes is served at the rate memory allows, never by
growing the process to the pod's limit.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import ctypes.util
import logging
from asyncio import selector_events, sslproto
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

logger = logging.getLogger(__name__)

# glibc's mallopt parameters (malloc.h).
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
_M_ARENA_MAX = -8
# Blocks from this size on get their own mapping: glibc's default threshold, held fixed.
MMAP_THRESHOLD = 128 * 1024
# Free memory at the top of the heap past this is given back at once (glibc's default too).
TRIM_THRESHOLD = 128 * 1024
# The threshold this process's allocator holds (`bound_allocator`), for `bound_socket_reads`.
_mmap_threshold = MMAP_THRESHOLD
# A busy process's heap (`busy_heap`), one that gives it back itself once quiet
# (`trim_when_quiet`): blocks up to HEAP_BLOCKS come from the heap (two generations of the
# seeds' 1 MiB log files, a message's parts and reads, with room), HEAP_TOP is kept free at
# its top, and every thread shares one arena (`malloc_trim` gives back the free top of the
# main one only).  Why, and what it saves: `replication_node/storage/idle_memory.py`.
HEAP_BLOCKS = 2 * 1024 * 1024
HEAP_TOP = 16 * 1024 * 1024
HEAP_ARENAS = 1
# How long a process must have done nothing before `trim_when_quiet` trims its heap.
QUIET = 5.0


def bound_allocator(
    *,
    mmap_threshold: int = MMAP_THRESHOLD,
    trim_threshold: int = TRIM_THRESHOLD,
    arenas: int | None = None,
) -> bool:
    """Hold glibc's mmap threshold at its default, so freed large blocks go back to the
    kernel (see the module's docstring); True if the allocator took it.

    A process that frees and takes blocks of one size all the time, and gives its heap back
    itself once idle (`trim_heap`), may hold its blocks up to `mmap_threshold` in the heap
    and keep `trim_threshold` free at an arena's top: a replication node's 1 MiB parts and
    generations (`replication_node/storage/idle_memory.py` says what that saves and what
    it costs).  A block past `mmap_threshold` is still its own mapping, freed at once.
    `arenas`: at most this many malloc arenas (`M_ARENA_MAX`), set before threads make
    their own: `malloc_trim` gives back the free top of the main arena only, so a process
    that keeps free memory at arenas' tops has its threads share the main one."""
    name = ctypes.util.find_library("c")
    if name is None:
        return False
    try:
        libc = ctypes.CDLL(name)
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    global _mmap_threshold
    ok = mallopt(_M_MMAP_THRESHOLD, mmap_threshold) == 1
    if ok:
        _mmap_threshold = mmap_threshold
    ok = mallopt(_M_TRIM_THRESHOLD, trim_threshold) == 1 and ok
    if arenas is not None:
        ok = mallopt(_M_ARENA_MAX, arenas) == 1 and ok
    if not ok:
        logger.info("the C library did not take mallopt: freed large blocks may be kept")
    return ok


def busy_heap() -> bool:
    """`bound_allocator` for a process that takes and frees blocks of about a megabyte all
    the time and trims its heap itself once quiet (HEAP_BLOCKS, HEAP_TOP, HEAP_ARENAS)."""
    return bound_allocator(mmap_threshold=HEAP_BLOCKS, trim_threshold=HEAP_TOP, arenas=HEAP_ARENAS)


async def trim_when_quiet(
    activity: Callable[[], object],
    sleep: Callable[[float], Awaitable[None]],
    *,
    every: float = QUIET,
) -> None:
    """Every `every` seconds, give the heap's free memory back (`trim_heap`, in a thread) if
    `activity()` is what it was at the last look: what a `busy_heap` keeps (up to HEAP_TOP,
    and the free pages inside) goes back to the kernel once the process is quiet, at the
    cost of a millisecond or so a look while it stays quiet, and nothing while busy."""
    last: object = object()  # no mark before the first look
    while True:
        await sleep(every)
        mark = activity()
        if mark == last:
            await asyncio.to_thread(trim_heap)
        last = mark


def trim_heap() -> bool:
    """Give the free memory of every malloc arena back to the kernel (`malloc_trim(0)`);
    True if the C library has it.

    The mmap threshold (`bound_allocator`) sends large blocks back as they are freed, but
    smaller ones (SQLite's pages of 32 KiB, the rows and strings of a batch) come from the
    heap and, in a worker thread, from that thread's arena; freed, they stay resident until
    the arena's top is free, which a long-lived allocation above them can prevent for good.
    `malloc_trim(0)` walks every arena and returns each free page inside it too.  It costs a
    walk of the free lists (milliseconds): for a process gone idle, not per request."""
    name = ctypes.util.find_library("c")
    if name is None:
        return False
    try:
        trim = ctypes.CDLL(name).malloc_trim
    except (OSError, AttributeError):
        return False
    trim.argtypes = [ctypes.c_size_t]
    trim(0)
    return True


# What asyncio reads a TLS connection's bytes into, per connection, at most (see below).
TLS_READ_BUFFER = 16 * 1024


def bound_tls_buffers(size: int = TLS_READ_BUFFER) -> None:
    """Each TLS connection asyncio makes from now on in this process (served, `start_tls`, or
    a client's) reads into a buffer of `size` bytes instead of 256 KiB.

    asyncio's `SSLProtocol` allocates `max_size` (256 KiB) per connection and zero-fills it,
    so the whole of it is resident for as long as the connection lives: an idling IMAP
    session holds two (its client's connection and its long poll to the node), half a
    megabyte of a session's 940 KiB (tracemalloc, 10 against 20 sessions; issue 50).  A
    smaller buffer costs only more reads for a large body: one TLS record carries at most
    16 KiB of it anyway.  asyncio offers no setting for it: the class attribute it reads at
    each connection's start is set, in the serving process only."""
    if size < 1024:
        raise ValueError(f"a TLS read buffer of {size} bytes is too small")
    sslproto.SSLProtocol.max_size = size


# What asyncio reads a plain socket's bytes into, per read, at most (see below): its own
# size where the allocator serves it from the heap (`busy_heap`), else this bound.
ASYNCIO_READ_SIZE = 256 * 1024
SOCKET_READ_SIZE = 64 * 1024


def bound_socket_reads(size: int | None = None) -> None:
    """Each plain (not TLS) socket asyncio's own event loop serves or connects in this process
    reads at most `size` bytes at a time: by default asyncio's own 256 KiB if the allocator
    serves a block of that size from the heap (`busy_heap`: a node's), 64 KiB if not.
    asyncio's loop only: uvloop's (`dag_common/event_loop.py`, the transport's) reads into one
    buffer of the loop's and has no per-read allocation to bound; `event_loop.run` calls
    this only when it runs asyncio's loop.

    asyncio's transport allocates a fresh bytes object of its `max_size` (256 KiB) for every
    `recv`, and shrinks it to what came.  Past the allocator's mmap threshold
    (`bound_allocator`) that block is its own `mmap`, page faults on every page the kernel
    copies into, and a `munmap`: per MiB received, 4-8 mappings and 256 faults (strace and
    perf of a node taking 1 MiB messages: a node's sockets' reads were the largest single
    source of its page faults, issue 49).  Below the threshold the block comes from the
    heap and its pages are reused, already mapped.  The reads are then as large as the heap
    allows: each read is a trip through the protocol's Python (aiohttp's parser, a stream's
    feed, the reader's wake-up), and a node taking 1 MiB messages in 64 KiB reads rather
    than 256 KiB ones used ~4 % more CPU a MiB (bench/README.md, "lmtp: a node's socket
    reads"). A TLS connection reads through `SSLProtocol`'s buffer instead
    (`bound_tls_buffers`).  asyncio offers no setting: the class attribute each transport
    reads is set, in the serving process only (a loop's transports other than asyncio's
    selector ones never read it)."""
    if size is None:
        size = ASYNCIO_READ_SIZE if _mmap_threshold > ASYNCIO_READ_SIZE else SOCKET_READ_SIZE
    if size < 1024 or size >= _mmap_threshold:
        raise ValueError(
            f"a socket read of {size} bytes: 1024 up to the allocator's mmap threshold "
            f"({_mmap_threshold}) only"
        )
    selector_events._SelectorSocketTransport.max_size = size


@dataclass(frozen=True, slots=True)
class ResidentMemory:
    """What a process holds in RAM now (`VmRSS`) and at most since it started (`VmHWM`),
    in bytes."""

    resident: int
    peak: int


def resident_memory(pid: int | str = "self") -> ResidentMemory:
    """`pid`'s resident memory from `/proc/PID/status` (Linux)."""
    fields: dict[str, int] = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            fields[key] = int(value.split()[0]) * 1024  # kB
    return ResidentMemory(fields.get("VmRSS", 0), fields.get("VmHWM", 0))


class Overloaded(Exception):
    """The budget has no room for this much within the wait: answer 503 and `Retry-After`."""

    def __init__(self, message: str, retry_after: float) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class MemoryBudget:
    """Bytes of bodies in flight, at most `limit`.  A share over the whole limit is taken
    alone (when nothing else is in flight), so one item as large as the limit allows is
    still served.  Waiters are served in order: a large share is not starved by small ones
    slipping past it.  `wait` None: a share waits as long as it takes (the mover's work
    waits; a node's request is refused after its wait)."""

    def __init__(self, limit: int, *, wait: float | None = 5.0) -> None:
        """`wait`: how long a share waits for room before `Overloaded`; None, or a patient
        share (background work with nobody to answer 503 to), as long as it takes."""
        if limit <= 0:
            raise ValueError("a memory budget is a positive number of bytes")
        self.limit = limit
        self.wait = wait
        self.in_use = 0
        self.refused = 0
        self.granted = 0  # shares granted so far (taken or acquired): moves with every body
        self._waiters: list[tuple[int, asyncio.Future[None]]] = []

    @property
    def waiting(self) -> int:
        """Shares waiting for room, in order."""
        return sum(not fut.done() for _, fut in self._waiters)

    def _fits(self, size: int) -> bool:
        return self.in_use == 0 or self.in_use + size <= self.limit

    def _wake(self) -> None:
        while self._waiters:
            size, fut = self._waiters[0]
            if fut.done():
                self._waiters.pop(0)
                continue
            if not self._fits(size):
                return
            self._waiters.pop(0)
            self.in_use += size
            self.granted += 1
            fut.set_result(None)

    async def acquire(self, size: int, what: str, *, patient: bool = False) -> None:
        """Take `size` bytes, waiting up to `wait` seconds for them (`patient`: as long as it
        takes); `Overloaded` then."""
        if not self._waiters and self._fits(size):
            self.in_use += size
            self.granted += 1
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append((size, fut))
        try:
            if patient:
                await asyncio.shield(fut)
            else:
                await asyncio.wait_for(asyncio.shield(fut), self.wait)
        except TimeoutError:
            if fut.done() and not fut.cancelled():  # granted as the wait ended
                return
            fut.cancel()
            self._wake()
            self.refused += 1
            raise Overloaded(
                f"{what} would take {size} bytes of memory with {self.in_use} of the "
                f"{self.limit}-byte budget in flight; try again shortly",
                retry_after=max(1.0, self.wait or 0.0),
            ) from None
        except BaseException:
            if fut.done() and not fut.cancelled():
                self.release(size)
            else:
                fut.cancel()
                self._wake()
            raise

    def take(self, size: int) -> None:
        """Count `size` bytes already held (what a read turned out to hold), without waiting:
        work that asks next waits for them to be given back."""
        self.in_use += size
        self.granted += 1

    def release(self, size: int) -> None:
        """Give back `size` bytes taken with `acquire` or `take`."""
        self.in_use = max(0, self.in_use - size)
        self._wake()

    @contextlib.asynccontextmanager
    async def share(self, size: int, what: str, *, patient: bool = False) -> AsyncIterator[None]:
        """`size` bytes taken for the block's duration (`acquire`)."""
        await self.acquire(size, what, patient=patient)
        try:
            yield
        finally:
            self.release(size)


def memory_limit(
    root: Path = Path("/sys/fs/cgroup"), cgroups: Path = Path("/proc/self/cgroup")
) -> int | None:
    """The memory limit of this process's cgroup (a pod's `resources.limits.memory`), in
    bytes; None without one.  The process's own group as /proc/self/cgroup names it (cgroup
    v2's `memory.max`, "max": none; v1's `memory.limit_in_bytes`, a value near 2^63: none),
    else the mount's root, which is the group itself inside a container with its own cgroup
    namespace."""
    candidates = []
    try:
        for line in cgroups.read_text().splitlines():
            _, controllers, group = line.split(":", 2)
            if controllers == "":
                candidates.append(root / group.lstrip("/") / "memory.max")
            elif "memory" in controllers.split(","):
                candidates.append(root / "memory" / group.lstrip("/") / "memory.limit_in_bytes")
    except OSError:
        pass
    candidates += [root / "memory.max", root / "memory" / "memory.limit_in_bytes"]
    for path in candidates:
        try:
            value = path.read_text().strip()
        except OSError:
            continue
        if value == "max":
            return None
        try:
            limit = int(value)
        except ValueError:
            continue
        return limit if limit < 1 << 60 else None
    return None
