"""The faults' own tests.  The disk's, on a small tmpfs (skipped where mounting is not
allowed): the ballast fills the disk whatever room was left, leaves the room asked, and
goes.  The clock's, on a child process under libfaketime: a jump is seen once made."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

import pytest

from tests.cluster_harness import size_limited_disk
from tests.resilience import faults as f

MiB = 1 << 20
PAGE = 4096


def free(where: Path) -> int:
    st = os.statvfs(where)
    return st.f_bavail * st.f_frsize


@pytest.mark.parametrize(
    "left",
    [0, PAGE, 2 * PAGE, MiB - 2 * PAGE, MiB - PAGE, MiB, 2 * MiB + 5 * PAGE],
    ids=lambda n: f"{n // PAGE}pages",
)
def test_fill_leaves_nothing_then_leave_room_and_drain_give_it_back(tmp_path, left):
    """Whatever room the node's own files left (a buffered ballast failed at its close when
    a megabyte less one or two pages was free), the disk ends full, `leave_room` gives back
    about what it is asked, and `drain` all of it."""
    where = tmp_path / "disk"
    with size_limited_disk(where, "4m"):
        own = where / "node-data"
        own.write_bytes(b"x" * (free(where) - left))
        assert free(where) == left

        assert f.fill(where) == left
        assert free(where) == 0

        given = f.leave_room(where, 16 * PAGE)
        assert given == min(16 * PAGE, left)
        assert free(where) == given

        f.drain(where)
        assert free(where) == left


# A process that says, for each line it reads, how far its wall clock is from the machine's
# (the monotonic clock is left real: the offset from it at the start, unfaked, is the base).
OFFSET_SAYER = """
import sys, time
base = time.time() - time.monotonic()
for _ in sys.stdin:
    print(round(time.time() - time.monotonic() - base), flush=True)
"""


@pytest.mark.skipif(not f.faketime_available(), reason="Debian's faketime is not installed")
async def test_a_fake_clock_jump_is_seen_once_jump_returns_and_back(tmp_path):
    """The spec file is read again only past libfaketime's cache: `jump` returns once the
    process's every clock reading sees the new offset, forward, back, and back to none."""
    clock = f.FakeClock(tmp_path / "clock.faketime")
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        OFFSET_SAYER,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        env={**os.environ, **clock.env()},
    )
    assert proc.stdin is not None and proc.stdout is not None

    async def offset() -> int:
        proc.stdin.write(b"?\n")  # type: ignore[union-attr]
        return int(await asyncio.wait_for(proc.stdout.readline(), 10))  # type: ignore[union-attr]

    try:
        assert await offset() == 0
        for jump, seconds in (("-1h", -3600), ("+2h", 7200), ("+0", 0)):
            await clock.jump(jump)
            assert await offset() == seconds, jump
    finally:
        proc.kill()
        await proc.wait()
