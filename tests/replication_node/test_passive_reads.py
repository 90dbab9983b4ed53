"""A passive copy serves reads only from a file known sound (docs/concepts/pipeline.md,
"Checked on open"): not while its start check runs, not when it starts suspended (nothing
checked its file since the node started), and again once the check passed."""

from __future__ import annotations

import asyncio

import replication_node.passive.copy as copy_module
from dag_common.model import CopyStatus
from tests.cluster_harness import wait_until
from tests.replication_node.helpers import passive, replayed_through


async def copy_replayed_then_stopped(share, tmp_path, *, suspended: bool = False) -> None:
    await share.write(0, 10)
    last = await share.roll()
    first = passive(share, tmp_path)
    await first.start()
    await wait_until("replay", replayed_through(first, last))
    if suspended:
        await first.suspend("disk maintenance")
    await first.stop()


async def test_no_reads_while_the_start_check_runs(share, tmp_path, monkeypatch):
    await copy_replayed_then_stopped(share, tmp_path)
    checking, release = asyncio.Event(), asyncio.Event()
    real_check = copy_module.check_in_thread

    async def held_check(path, *args, **kwargs):
        checking.set()
        await release.wait()  # the check of a large file, still reading
        return await real_check(path, *args, **kwargs)

    monkeypatch.setattr(copy_module, "check_in_thread", held_check)
    again = passive(share, tmp_path)
    await again.start()
    await asyncio.wait_for(checking.wait(), 30)
    assert again.status().status is CopyStatus.INITIALIZING
    assert again.reader() is None, "a file not yet checked serves no reads"
    release.set()
    await wait_until("checked", lambda: again.status().status is CopyStatus.HEALTHY)
    assert len(again.reader().items("m")) == 10
    await again.stop()


async def test_a_copy_started_suspended_serves_reads_once_resumed_and_checked(share, tmp_path):
    await copy_replayed_then_stopped(share, tmp_path, suspended=True)
    again = passive(share, tmp_path)
    await again.start()
    assert again.status().status is CopyStatus.SUSPENDED
    assert again.reader() is None, "not checked since the node started"
    await again.resume()
    await wait_until("checked", lambda: again.status().status is CopyStatus.HEALTHY)
    assert len(again.reader().items("m")) == 10
    await again.stop()
