"""A restarted passive compares its last generation with the active's to claim the epoch
(`passive/stream_check.py`).  The active may truncate that generation between its info and
the fetch: the copy has it, so this must never fail the copy (stop 57's CI: a passive
restarted after kill -9 went FailedAndSuspended, "needs a reseed", for a generation it had)."""

from __future__ import annotations

from dag_common.model import CopyStatus
from replication_node.log.truncation import delete_through
from tests.cluster_harness import wait_until
from tests.replication_node.helpers import items_as_read, passive, replayed_through


class TruncatedOnFetch:
    """The real HTTP source; the active truncates through `generation` just as the copy
    first asks for it (after the info that said it was there)."""

    def __init__(self, share, generation: int) -> None:
        self._share = share
        self._source = share.source()
        self._generation = generation
        self.truncated = False

    def __getattr__(self, name):
        return getattr(self._source, name)

    async def fetch(self, generation: int) -> bytes:
        if generation == self._generation and not self.truncated:
            delete_through(self._share.active.paths.logs, generation)
            self.truncated = True
        return await self._source.fetch(generation)


async def test_a_generation_truncated_while_compared_leaves_the_copy_healthy(share, tmp_path):
    await share.write(0, 10)
    last = await share.roll()
    copy = passive(share, tmp_path)
    await copy.start()
    await wait_until("replay", replayed_through(copy, last))
    await copy.stop()

    wire = TruncatedOnFetch(share, last)
    again = passive(share, tmp_path, source=wire)
    await again.start()
    await wait_until("the comparison's fetch", lambda: wire.truncated)
    await share.write(10, 10)
    newest = await share.roll()
    replayed = replayed_through(again, newest)
    stopped = {CopyStatus.FAILED_AND_SUSPENDED, CopyStatus.FAILED}
    await wait_until("the next generation", lambda: replayed() or again.status().status in stopped)
    status = again.status()
    assert status.last_log_replayed == newest, status.error
    assert status.status is CopyStatus.HEALTHY and status.error is None
    assert status.epoch == share.active.epoch, "the next generation's chain claims the epoch"
    assert again.reader().items("m") == items_as_read(share.active.copy, "m")
    await again.stop()
