"""The open log at risk: the active announces each generation's first commit in the cluster
store before acknowledging it (once per generation, before the commit is visible), stops on
a False answer, stalls on a store error, and numbers above the old ceiling after a failover.

Real log files and, where the store's answer matters, a real embedded cluster store."""

from __future__ import annotations

import asyncio

import msgspec
import pytest

from dag_common.clock import ManualClock, SystemClock
from dag_common.cluster_store.embedded import EmbeddedClusterStore
from dag_common.model import CopyStatus
from dag_common.store_api import ItemIn
from replication_node.active.copy import CopyPaths
from replication_node.active.instance import ActiveInstance
from replication_node.errors import (
    ClusterStoreError,
    Deposed,
    LogStreamStopped,
    RecoveryError,
    TransactionTooLarge,
)
from replication_node.log.logfile import HEADER_SIZE, OPEN_LOG_NAME
from tests.cluster_harness import wait_until
from tests.replication_node.helpers import mount, op
from tests.replication_node.share import db1_active


class Recorder:
    """The publisher seam: records each announcement and what was true at that moment."""

    def __init__(self, answer=True):
        self.calls: list[tuple[int, int]] = []
        self.seen: list[dict] = []
        self.answer = answer
        self.copy = None
        self.acked: list[int] = []

    async def __call__(self, generation, ceiling):
        self.calls.append((generation, ceiling))
        if self.copy is not None:
            log = self.copy.paths.logs / OPEN_LOG_NAME
            self.seen.append(
                {
                    "visible": [i for i in range(100) if self.copy.item("m", f"i{i}")],
                    "acked": list(self.acked),
                    "open_log_bytes": log.stat().st_size if log.exists() else 0,
                }
            )
        return self.answer

    @property
    def generations(self):
        return [g for g, _ in self.calls]


async def test_announced_once_per_generation_before_visibility_and_acknowledgement(tmp_path):
    rec = Recorder()
    copy = await mount(tmp_path, log_file_size=32 * 1024, publish_open_log=rec)
    rec.copy = copy
    assert rec.calls == [], "an empty open log is not announced"

    async def commit(i):
        await copy.commit(op(i, 300))
        rec.acked.append(i)

    await commit(0)
    assert rec.generations == [1]
    (seen,) = rec.seen
    assert seen["visible"] == [] and seen["acked"] == [], "announced before visible or answered"
    assert seen["open_log_bytes"] > HEADER_SIZE, "announced after the record is durable"
    await asyncio.gather(*(commit(i) for i in range(1, 20)))
    assert rec.generations == [1], "one store write per generation, never one per commit"
    assert copy.stream.announcements == 1 and copy.stream.open_commits == 20
    await copy.roll()
    assert copy.stream.open_commits == 0
    await copy.roll(force=True)
    assert rec.generations == [1], "closing generations announces nothing"
    await commit(20)
    assert rec.generations == [1, 3]
    await copy.crash_close()


async def test_a_batch_spanning_generations_announces_the_highest_before_any_answer(tmp_path):
    rec = Recorder()
    # ~1,950-byte records in 4 KiB logs: one per generation, so one batch of three commits
    # writes generations 1, 2 and 3 (two of them closed within the batch)
    copy = await mount(tmp_path, log_file_size=4096, publish_open_log=rec)
    rec.copy = copy
    acks = await asyncio.gather(*(copy.commit(op(i, 1800)) for i in range(3)))
    assert [a.lsn.generation for a in acks] == [1, 2, 3]
    assert rec.generations == [3], "one announcement covers the generations below it"
    assert rec.seen[0]["visible"] == []
    # two records filling a generation that closes at the end of the same batch
    rec2 = Recorder()
    copy2 = await mount(tmp_path / "b", log_file_size=4096, publish_open_log=rec2)
    acks = await asyncio.gather(*(copy2.commit(op(i, 1500)) for i in range(2)))
    assert {a.lsn.generation for a in acks} == {1} and copy2.stream.last_closed_generation == 1
    assert rec2.generations == [1], "a generation closed within its batch is announced too"
    await copy.crash_close()
    await copy2.crash_close()


async def test_a_refused_announcement_fails_the_commit_and_stops_the_stream(tmp_path):
    rec = Recorder(answer=False)
    copy = await mount(tmp_path, publish_open_log=rec)
    rec.copy = copy
    with pytest.raises(Deposed, match="another copy was activated"):
        await copy.commit(op(0, 300))
    assert copy.item("m", "i0") is None, "never visible"
    with pytest.raises(Deposed):
        await copy.commit(op(1, 300))
    assert rec.generations == [1], "the stream stopped: nothing more is written or announced"
    await copy.crash_close()


async def test_a_store_error_stalls_the_commit_until_the_announcement_succeeds(tmp_path):
    clock = ManualClock()
    failures = []

    async def flaky(generation, ceiling):
        if len(failures) < 3:
            failures.append(generation)
            raise ClusterStoreError("etcd unreachable")
        return True

    copy = await mount(tmp_path, clock=clock, publish_open_log=flaky)
    task = asyncio.create_task(copy.commit(op(0, 300)))
    await wait_until("the first publish to fail", lambda: failures, timeout=10)
    assert failures == [1]
    await clock.advance(0.01)
    assert not task.done() and copy.item("m", "i0") is None, "commits wait, nothing visible"
    for _ in range(100):  # the retries back off on the injected clock
        if task.done():
            break
        await clock.advance(1)
        await asyncio.sleep(0.01)
    assert task.done() and task.result().lsn.generation == 1
    assert failures == [1, 1, 1] and copy.item("m", "i0") is not None
    await copy.commit(op(1, 300))
    await copy.crash_close()


async def test_closing_while_the_store_is_down_fails_the_stalled_commit(tmp_path):
    calls = []

    async def down(generation, ceiling):
        calls.append(generation)
        raise ClusterStoreError("etcd unreachable")

    copy = await mount(tmp_path, publish_open_log=down)
    task = asyncio.create_task(copy.commit(op(0, 300)))
    await wait_until("a publish to the store", lambda: calls, timeout=10)
    assert calls and not task.done()
    await copy.crash_close()
    with pytest.raises(LogStreamStopped, match="not acknowledged"):
        await task


async def test_records_recovered_in_the_open_log_are_announced_before_writes(tmp_path):
    copy = await mount(tmp_path, publish_open_log=Recorder())
    for i in range(3):
        await copy.commit(op(i, 300))
    await copy.crash_close()  # a crash: E00.log holds three commits
    rec = Recorder()
    again = await mount(tmp_path, publish_open_log=rec, create=False)
    assert rec.generations == [1], "announced at mount, before the stream takes writes"
    assert rec.calls[0][1] >= 3 + again.stream.log_file_size
    assert again.stream.open_commits == 3
    await again.commit(op(3, 300))
    assert rec.generations == [1]
    await again.crash_close()
    with pytest.raises(Deposed):
        await mount(tmp_path, publish_open_log=Recorder(answer=False), create=False)


async def test_numbers_refused_as_too_large_are_taken_back(tmp_path):
    copy = await mount(tmp_path, log_file_size=4096)
    first = copy.next_change_number()
    numbers = [copy.next_change_number() for _ in range(3)]
    big = [msgspec.structs.replace(op(0, 5000)[0], cn=n) for n in numbers]
    with pytest.raises(TransactionTooLarge):
        await copy.commit(big)
    assert copy.next_change_number() == first + 1, "every number handed out is in the log"
    await copy.crash_close()


def instance(root, store, node, epoch, clock, lease_ttl=10.0):
    return ActiveInstance(
        settings=db1_active(node=node, epoch=epoch, log_file_size=16 * 1024, lease_ttl=lease_ttl),
        paths=CopyPaths(root / "DB1", "DB1"),
        clock=clock,
        cluster_store=store,
    )


async def test_a_deposed_active_acknowledges_nothing_more(tmp_path):
    # The store's clock runs ahead of the active's (beyond the 10 % its lease allows for):
    # the active believes its lease live when the store has let it go and activated another
    # copy.  The open log's announcement, a compare-and-set on the epoch, still refuses it.
    store_clock = ManualClock()  # the store's clock, apart from the active's
    store = EmbeddedClusterStore(tmp_path / "cluster.db", clock=store_clock)
    await store.set_active("DB1", "a", expected_epoch=0, start_generation=1)
    active = instance(tmp_path, store, "a", 1, SystemClock(), lease_ttl=60.0)
    await active.start()
    assert active.store is not None
    await active.store.create_mailbox("m")
    record = await store.active("DB1")
    assert (record.open_generation, record.generated_at_risk) == (1, 1)
    # another copy is activated; the old active's next generation is refused
    await active.copy.roll()
    await store_clock.advance(61)
    await store.set_active("DB1", "b", expected_epoch=1, start_generation=2)
    copy, mailboxes = active.copy, active.store
    with pytest.raises(Deposed):
        await mailboxes.put_items("m", [ItemIn(item_id="x", subject="lost")])
    assert copy.item("m", "x") is None, "never visible"
    with pytest.raises(Deposed):
        await mailboxes.put_items("m", [ItemIn(item_id="y")])
    # The deposed copy is dismounted at once and not re-mounted (reconcile makes it passive).
    await wait_until("the deposed copy dismounted", lambda: active.copy is None, timeout=10)
    status = active.status()
    assert active.copy is None and status.status is CopyStatus.FAILED
    assert "no longer names this node the active" in status.error
    await active.stop(clean=False)
    store.close()


async def test_change_numbers_after_a_failover_start_above_the_old_ceiling(tmp_path):
    clock = SystemClock()
    store_clock = ManualClock()  # the store's clock, apart from the active's
    store = EmbeddedClusterStore(tmp_path / "cluster.db", clock=store_clock)
    await store.set_active("DB1", "a", expected_epoch=0, start_generation=1)
    old = instance(tmp_path, store, "a", 1, clock)
    await old.start()
    await old.store.create_mailbox("m")
    await old.store.put_items("m", [ItemIn(item_id=f"a{i}") for i in range(5)])
    await old.copy.roll()  # generation 1 closed: the copies have it
    lost = await old.store.put_items("m", [ItemIn(item_id=f"b{i}") for i in range(20)])
    assert lost.lsn.generation == 2
    ceiling = (await store.active("DB1")).change_number_ceiling
    assert ceiling >= lost.change_number
    await old.stop(clean=False)  # kill -9: generation 2 exists only in its E00.log
    await store_clock.advance(11)  # its lease expires
    (tmp_path / "DB1" / "logs" / OPEN_LOG_NAME).unlink()  # what a copy has: generation 1

    won = await store.set_active("DB1", "b", expected_epoch=1, start_generation=2)
    assert won.change_number_ceiling == ceiling, "the ceiling carries over to the new epoch"
    new = instance(tmp_path, store, "b", 2, clock)
    await new.start()
    assert new.copy.highest_change_number == ceiling
    first = await new.store.put_items("m", [ItemIn(item_id="c0")])
    assert first.lsn.generation == 2
    assert first.change_number > ceiling >= lost.change_number, "no number is used twice"
    await new.stop(clean=False)
    store.close()


async def test_the_active_returning_without_its_open_log_does_not_mount(tmp_path):
    store = EmbeddedClusterStore(tmp_path / "cluster.db")
    await store.set_active("DB1", "a", expected_epoch=0, start_generation=1)
    active = instance(tmp_path, store, "a", 1, SystemClock())
    await active.start()
    await active.store.create_mailbox("m")
    await active.copy.roll()
    await active.store.put_items("m", [ItemIn(item_id="acknowledged")])  # open generation 2
    await active.stop(clean=False)
    # the node returns with its open log intact: mounts, every acknowledged record kept
    again = instance(tmp_path, store, "a", 1, SystemClock())
    await again.start()
    assert again.copy.item("m", "acknowledged") is not None
    await again.stop(clean=False)
    # ...and without it: a fresh E00.log of generation 2 would drop the commit silently
    (tmp_path / "DB1" / "logs" / OPEN_LOG_NAME).unlink()
    lost = instance(tmp_path, store, "a", 1, SystemClock())
    with pytest.raises(RecoveryError, match="open generation 2 held acknowledged commits"):
        await lost.start()
    assert lost.copy is None
    store.close()


class FlakyStore(EmbeddedClusterStore):
    """The embedded store, whose first reads of the active record fail."""

    def __init__(self, path, failures):
        super().__init__(path)
        self.failures = failures

    async def active(self, database):
        if self.failures:
            self.failures -= 1
            raise ClusterStoreError("etcd unreachable")
        return await super().active(database)


async def test_the_mount_waits_for_the_ceiling_while_the_store_errs(tmp_path):
    clock = ManualClock()
    store = FlakyStore(tmp_path / "cluster.db", failures=0)
    await store.set_active("DB1", "a", expected_epoch=0, start_generation=1)
    await store.publish_open_generation("DB1", "a", 1, 1, 5000)  # an earlier epoch's ceiling
    await store.set_active("DB1", "a", expected_epoch=1, start_generation=1)
    store.failures = 2
    active = instance(tmp_path, store, "a", 2, clock)
    start = asyncio.create_task(active.start())
    for _ in range(100):
        if start.done():
            break
        await clock.advance(1)
        await asyncio.sleep(0.01)
    await start
    assert store.failures == 0 and active.copy.highest_change_number == 5000
    await active.stop(clean=False)
    store.close()
