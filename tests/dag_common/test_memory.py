"""The process's memory: its cgroup's limit as a pod sets it, the budget of bodies in
flight (issue 52), and a node's allocator (issue 49)."""

from __future__ import annotations

import asyncio
import os
import ssl
import subprocess
import sys
from asyncio import selector_events, sslproto
from pathlib import Path

import pytest

from dag_common.memory import (
    MemoryBudget,
    Overloaded,
    bound_socket_reads,
    bound_tls_buffers,
    memory_limit,
)
from tests.cluster_harness import ROOT

GIB = 1 << 30
V1_NONE = "9223372036854771712"


async def until(condition) -> None:
    """Until `condition()` holds: the tasks started have run to where they wait."""
    while not condition():
        await asyncio.sleep(0)


def tree(root: Path, files: dict[str, str], cgroup: str) -> Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text + "\n")
    root.mkdir(parents=True, exist_ok=True)
    (root / "proc-self-cgroup").write_text(cgroup)
    return root / "proc-self-cgroup"


@pytest.mark.parametrize(
    ("files", "cgroup", "expected"),
    [
        # cgroup v2, the process's own group named
        ({"kubepods/pod1/memory.max": str(GIB)}, "0::/kubepods/pod1\n", GIB),
        ({"kubepods/pod1/memory.max": "max"}, "0::/kubepods/pod1\n", None),
        # v2 inside a container with its own namespace: the root is the group
        ({"memory.max": str(GIB)}, "0::/\n", GIB),
        # v1 (podman on a hybrid host): the host's path is not mounted inside, the root is
        ({"memory/memory.limit_in_bytes": str(GIB)}, "4:memory:/libpod_parent/ctr\n0::/\n", GIB),
        # v1, the process's own group; and no limit (2^63 rounded to pages)
        ({"memory/grp/memory.limit_in_bytes": str(GIB)}, "4:memory:/grp\n", GIB),
        ({"memory/grp/memory.limit_in_bytes": V1_NONE}, "4:memory:/grp\n", None),
        # nothing readable
        ({}, "0::/\n", None),
    ],
)
def test_the_memory_limit_of_the_process_s_cgroup(tmp_path, files, cgroup, expected):
    cgroups = tree(tmp_path / "fs", files, cgroup)
    assert memory_limit(tmp_path / "fs", cgroups) == expected


async def test_the_budget_serves_in_order_and_refuses_past_its_wait():
    budget = MemoryBudget(100, wait=0.05)
    await budget.acquire(60, "first")
    order: list[str] = []

    async def take(size: int, name: str) -> None:
        await budget.acquire(size, name, patient=True)
        order.append(name)

    large = asyncio.create_task(take(50, "large"))
    await until(lambda: budget.waiting == 1)
    small = asyncio.create_task(take(10, "small"))  # would fit, but waits behind `large`
    await until(lambda: budget.waiting == 2)
    assert order == [] and budget.in_use == 60
    with pytest.raises(Overloaded) as refused:
        await budget.acquire(10, "impatient")
    assert refused.value.retry_after >= 1 and budget.refused == 1
    budget.release(60)
    await asyncio.gather(large, small)
    assert order == ["large", "small"] and budget.in_use == 60


async def test_a_share_larger_than_the_budget_is_taken_alone():
    budget = MemoryBudget(10, wait=0.05)
    async with budget.share(25, "one large item"):
        assert budget.in_use == 25
        with pytest.raises(Overloaded):
            await budget.acquire(1, "beside it")
    assert budget.in_use == 0


async def test_tls_connections_made_after_the_bound_read_into_a_small_buffer(monkeypatch):
    """asyncio zero-fills 256 KiB per TLS connection (resident while it lives): after
    `bound_tls_buffers` a connection's protocol reads into 16 KiB; a size too small is
    refused and changes nothing."""
    monkeypatch.setattr(sslproto.SSLProtocol, "max_size", sslproto.SSLProtocol.max_size)
    loop = asyncio.get_running_loop()
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)

    def buffer() -> int:
        made = sslproto.SSLProtocol(loop, asyncio.Protocol(), context, None, server_side=True)
        return len(made.get_buffer(-1))

    assert buffer() == 256 * 1024
    bound_tls_buffers()
    assert buffer() == 16 * 1024
    with pytest.raises(ValueError, match="too small"):
        bound_tls_buffers(100)
    assert buffer() == 16 * 1024


async def test_plain_sockets_read_at_most_64_kib_at_a_time_after_the_bound(monkeypatch):
    """asyncio reads a plain socket 256 KiB at a time, a fresh mapping each past the
    allocator's threshold: after `bound_socket_reads` a connection's reads of a 4 MiB
    body are 64 KiB at most (all of it still arrives); a size at or past the threshold, or
    too small, is refused and changes nothing."""
    monkeypatch.setattr(
        selector_events._SelectorSocketTransport,
        "max_size",
        selector_events._SelectorSocketTransport.max_size,
    )
    loop = asyncio.get_running_loop()
    body = bytes(4 << 20)

    async def largest_read() -> int:
        done: asyncio.Future[int] = loop.create_future()

        class Count(asyncio.Protocol):
            got, largest = 0, 0

            def data_received(self, data: bytes) -> None:
                self.got += len(data)
                self.largest = max(self.largest, len(data))
                if self.got == len(body):
                    done.set_result(self.largest)

        def send(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            writer.write(body)

        server = await asyncio.start_server(send, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        transport, _ = await loop.create_connection(Count, "127.0.0.1", port)
        try:
            return await asyncio.wait_for(done, 30)
        finally:
            transport.close()
            server.close()
            await server.wait_closed()

    assert await largest_read() > 64 * 1024
    bound_socket_reads()
    assert await largest_read() <= 64 * 1024
    for size in (100, 128 * 1024):
        with pytest.raises(ValueError, match="socket read"):
            bound_socket_reads(size)
    assert selector_events._SelectorSocketTransport.max_size == 64 * 1024


def test_a_process_whose_heap_serves_256_kib_blocks_reads_its_sockets_256_kib_at_a_time():
    """In a process on `busy_heap` (a node's), a read of asyncio's own 256 KiB comes from
    the heap: the bound is that size, four times fewer reads of a large body than 64 KiB;
    a size at or past the heap's threshold is still refused."""
    out = subprocess.run(
        [sys.executable, "-c", _HEAP_READS],
        capture_output=True, text=True, cwd=ROOT, timeout=60,
        env={"PYTHONPATH": str(ROOT), "PATH": os.environ["PATH"]},
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == [str(256 * 1024), "refused"]


_HEAP_READS = """
from asyncio import selector_events
from dag_common.memory import HEAP_BLOCKS, bound_socket_reads, busy_heap
assert busy_heap()
bound_socket_reads()
print(selector_events._SelectorSocketTransport.max_size)
try:
    bound_socket_reads(HEAP_BLOCKS)
except ValueError:
    print("refused")
"""


# A process that takes and frees 1 MiB blocks (a node's parts and generations), bound as a
# node binds it or as every other process is, then trims its heap as a quiet node does:
# prints its page faults a block and the RSS it kept past the trim.
_BLOCKS = """
import resource, sys, threading
from dag_common.memory import bound_allocator, busy_heap, resident_memory, trim_heap
if sys.argv[1] == "node":
    assert busy_heap()
else:
    assert bound_allocator()
def work():
    for _ in range(50):  # eight at once (a span's generations), then freed
        blocks = [bytearray(1 << 20) for _ in range(8)]  # written whole, as a read fills it
        del blocks
rest = resident_memory().resident
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
threads = [threading.Thread(target=work) for _ in range(3)]  # worker threads, as the node's
for t in threads: t.start()
for t in threads: t.join()
faults = (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) / 1200
trim_heap()
print(faults, (resident_memory().resident - rest) / (1 << 20))
"""


def figures_of(script: str, arg: str) -> list[float]:
    """The figures `script` prints, run in a process of its own with `arg`: an allocator's
    settings are the process's."""
    out = subprocess.run(
        [sys.executable, "-c", script, arg],
        capture_output=True, text=True, check=True, cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )  # fmt: skip
    return [float(x) for x in out.stdout.split()]


@pytest.mark.parametrize("bound", ["node", "default"])
def test_a_node_reuses_its_freed_blocks_and_gives_them_back_when_trimmed(bound):
    """A node's allocator (`busy_heap`: `bound_allocator` with the HEAP_* settings) serves a
    1 MiB block from the heap, freed blocks reused already mapped: a few page faults a
    block, where every other process's maps each afresh and faults in its 256 pages; the
    trim of a quiet node gives back what its threads' blocks left (one arena)."""
    faults, kept_mib = figures_of(_BLOCKS, bound)
    if bound == "node":
        assert faults < 20, faults
    else:
        assert faults > 200, faults
    assert kept_mib < 4, kept_mib  # with an arena a thread: 8 MiB kept at each one's top


# A busy heap that frees its blocks, then `trim_when_quiet` looking three times with its
# activity moving (argv[1] "busy") or not ("quiet"): prints what it kept past its rest, MiB.
_QUIET = """
import asyncio, sys
from dag_common.memory import busy_heap, resident_memory, trim_when_quiet
assert busy_heap()
rest = resident_memory().resident
blocks = [bytearray(1 << 20) for _ in range(12)]  # from the heap, written whole
del blocks  # free at the heap's top: kept (HEAP_TOP) until a trim
held = (resident_memory().resident - rest) / (1 << 20)
ticks = 0
async def sleep(_):
    global ticks
    ticks += 1
    if ticks > 3:
        raise asyncio.CancelledError
def activity():
    return ticks if sys.argv[1] == "busy" else 0
try:
    asyncio.run(trim_when_quiet(activity, sleep))
except asyncio.CancelledError:
    pass
print(held, (resident_memory().resident - rest) / (1 << 20))
"""


@pytest.mark.parametrize("activity", ["busy", "quiet"])
def test_a_busy_heap_is_given_back_once_its_process_is_quiet(activity):
    """`trim_when_quiet` (the transport's): a process whose heap keeps its freed blocks while
    busy (`busy_heap`) keeps them while its activity moves, and gives them back to the
    kernel at a look that finds it where the last one did."""
    held, kept = figures_of(_QUIET, activity)
    assert held > 10, held  # the freed blocks still resident
    if activity == "busy":
        assert kept > 10, kept
    else:
        assert kept < 2, kept
