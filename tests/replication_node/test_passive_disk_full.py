"""A passive copy whose volume fills says so in its status at once, before the next log it
would fail to write arrives (in process: a real log share, a real passive copy whose
directory is a size-limited tmpfs; skipped, with the reason, where mounting is not allowed).

Found by the resilience scenario disk-full-passive under a busy machine: the copy kept
saying Healthy for six seconds after its disk filled, because nothing had been shipped to
it yet, and the guarantee service counted it toward SecondCopy meanwhile."""

from __future__ import annotations

from pathlib import Path

from dag_common.model import CopyStatus
from tests.cluster_harness import size_limited_disk, wait_until
from tests.replication_node.helpers import passive, replayed_through


def fill(where: Path) -> Path:
    """A ballast file filling the file system under `where` to its last byte."""
    ballast = where / "ballast"
    with open(ballast, "wb", buffering=0) as f:
        try:
            while True:
                f.write(b"\0" * 65536)
        except OSError:
            pass
        try:
            while True:
                f.write(b"\0" * 512)
        except OSError:
            pass
    return ballast


async def test_a_full_volume_fails_the_copy_in_its_status_and_room_heals_it(share, tmp_path):
    with size_limited_disk(tmp_path / "passive", "16m"):
        copy = passive(share, tmp_path)
        await share.write(0, 20)
        await share.active.copy.roll()
        await copy.start()
        try:
            await wait_until("replayed", replayed_through(copy, 1))
            await wait_until("Healthy", lambda: copy.status().status is CopyStatus.HEALTHY)
            ballast = fill(tmp_path / "passive")
            # nothing written since: only the check of its volume can say it
            report = copy.status()
            assert report.status is CopyStatus.FAILED
            assert "No space left on device" in (report.error or "")
            assert "less than the 1048576 bytes of the next log generation" in report.error
            ballast.unlink()
            report = copy.status()
            assert report.status is CopyStatus.HEALTHY and report.error is None
            # and it goes on copying what comes
            await share.write(20, 20)
            await share.active.copy.roll()
            await wait_until("the next log replayed", replayed_through(copy, 2))
        finally:
            await copy.stop()
