"""The disk faults' own tests, on a small tmpfs (skipped where mounting is not allowed): the
ballast fills the disk whatever room was left, leaves the room asked, and goes."""

from __future__ import annotations

import os
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
