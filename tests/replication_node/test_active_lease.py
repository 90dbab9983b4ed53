"""The active's lease on its role, in process over a real cluster store file: no commit is
acknowledged without a live lease, a lost lease dismounts the copy, a switchover or a clean
stop releases it, a crash leaves it to expire (and no copy is activated meanwhile)."""

from __future__ import annotations

import asyncio
import sqlite3

import pytest

from dag_common.clock import ManualClock
from dag_common.cluster_store.embedded import EmbeddedClusterStore
from dag_common.model import CopyStatus
from dag_common.store_api import ItemIn
from replication_node.active.copy import CopyPaths
from replication_node.active.instance import ActiveInstance
from replication_node.active.lease import SAFETY, LeaseKeeper
from replication_node.cluster.activation import wait_out_lease
from replication_node.errors import (
    ClusterStoreError,
    Deposed,
    LeaseHeld,
    LeaseLost,
    SwitchingOver,
)
from replication_node.log.operations import SetMailbox
from tests.cluster_harness import wait_until
from tests.replication_node.share import db1_active

TTL = 6.0


class _Ahead:
    """The test's clock, as the store reads it: `store.ahead` seconds further on."""

    def __init__(self, clock: ManualClock, store: StoreWithFaults) -> None:
        self._clock, self._store = clock, store

    def now(self):
        return self._clock.now()

    def monotonic(self) -> float:
        return self._clock.monotonic() + self._store.ahead

    async def sleep(self, seconds: float) -> None:
        await self._clock.sleep(seconds)


class StoreWithFaults(EmbeddedClusterStore):
    """A real store file whose lease renewals can be made to fail (etcd out of reach) or to
    take time on the test's clock (a slow round trip); everything else is the real store."""

    def __init__(self, path, clock: ManualClock) -> None:
        # The store's clock is the holder's, plus `ahead`: time that passed while the holder's
        # process stood still (its own clock catches up when the test advances it).
        self.ahead = 0.0
        super().__init__(path, clock=_Ahead(clock, self))
        self.clock = clock
        self.unreachable = False
        self.renew_takes = 0.0
        self.renewals = 0

    async def renew_lease(self, database, node, epoch, ttl):
        self.renewals += 1
        if self.unreachable:
            raise ClusterStoreError("etcd: connection refused (the test cut it off)")
        granted = await super().renew_lease(database, node, epoch, ttl)
        if self.renew_takes:
            await self.clock.advance(self.renew_takes)
        return granted


def instance(paths: CopyPaths, clock: ManualClock, store: StoreWithFaults) -> ActiveInstance:
    """DB1's active copy on node a at epoch 1, under `paths` (not started)."""
    return ActiveInstance(
        settings=db1_active(lease_ttl=TTL),
        paths=paths,
        clock=clock,
        cluster_store=store,
    )


@pytest.fixture
async def env(tmp_path):
    clock = ManualClock()
    store = StoreWithFaults(tmp_path / "cluster.db", clock)
    await store.set_active("DB1", "a", expected_epoch=0, start_generation=1)
    active = instance(CopyPaths(tmp_path / "DB1", "DB1"), clock, store)
    await active.start()
    assert active.store is not None
    await active.store.create_mailbox("m")
    yield clock, store, active
    await active.stop(clean=False)
    store.close()


async def test_the_holder_counts_its_lease_from_before_it_asked(tmp_path):
    clock = ManualClock()
    store = StoreWithFaults(tmp_path / "cluster.db", clock)
    await store.set_active("DB1", "a", expected_epoch=0, start_generation=1)
    keeper = LeaseKeeper(
        cluster_store=store, database="DB1", node="a", epoch=1, ttl=TTL, clock=clock
    )
    store.renew_takes = 2.0  # the answer comes 2 s after the question
    await keeper.acquire()
    assert keeper.expires_in() == pytest.approx(TTL * SAFETY - 2.0)
    lease = await store.lease("DB1")
    assert lease is not None and lease.node == "a"
    assert lease.expires_in > keeper.expires_in(), "the holder lets go before the store does"
    store.close()


async def test_a_commit_after_a_long_pause_is_answered_only_after_a_renewal(env):
    clock, store, active = env
    await clock.advance(TTL * 3)  # the process stood still; nobody else was activated
    before = store.renewals
    await active.store.put_items("m", [ItemIn(item_id="x")])
    assert store.renewals > before, "the fence renewed the lease before answering"
    assert active.copy.item("m", "x") is not None


async def test_writes_are_refused_while_the_lease_cannot_be_renewed_then_the_copy_dismounts(env):
    clock, store, active = env
    written = active.copy.stream.open_record_count
    store.unreachable = True
    await clock.advance(TTL)  # renewals fail; the lease runs out by the active's clock
    await wait_until("a failed renewal", lambda: active.lease.failing is not None)
    with pytest.raises(LeaseLost, match="cannot renew its lease"):
        await active.store.put_items("m", [ItemIn(item_id="refused")])
    assert active.copy.stream.open_record_count == written, "nothing written"
    assert active.status().lease_expires_in == 0
    # Once the store has surely let it go too, the copy dismounts (status Failed, the reason)
    await clock.advance(TTL)
    await wait_until("dismounted", lambda: active.copy is None)
    status = active.status()
    assert status.status is CopyStatus.FAILED and "lease" in status.error
    # The store back: the copy re-mounts through crash recovery, taking the lease again.
    store.unreachable = False
    await wait_until("remount waiting", lambda: clock.pending_sleeps())

    async def remounted() -> bool:
        await clock.advance(1.0)
        return active.copy is not None

    await wait_until("re-mounted", remounted)
    await active.store.put_items("m", [ItemIn(item_id="after")])
    assert (await store.lease("DB1")).node == "a"


async def test_an_active_whose_lease_expired_and_was_replaced_acknowledges_nothing(env):
    clock, store, active = env
    store.ahead = TTL * 2  # frozen (SIGSTOP) past its lease: the store lets it go
    await store.set_active("DB1", "b", expected_epoch=1, start_generation=2)
    await store.renew_lease("DB1", "b", 2, TTL)
    store.ahead = 0.0
    copy, mailboxes = active.copy, active.store
    await clock.advance(TTL * 2)  # it wakes: its own clock moved on as well
    with pytest.raises(Deposed):  # at the fence, or its renewal noticed first
        await mailboxes.put_items("m", [ItemIn(item_id="late")])
    assert copy.item("m", "late") is None, "never visible, never acknowledged"
    await wait_until("dismounted", lambda: active.copy is None)


async def test_a_deposed_active_stopped_before_it_dismounted_stops_without_an_error(env):
    """Its node stops the instance (to make it passive) in the instant between the stream's
    failure and the copy's own dismount: no clean shutdown is possible (the open log cannot
    be closed), so the copy is closed as after a crash, nothing raised and nothing left open
    (it used to raise Deposed from the dismount's roll, leaving the file open)."""
    clock, store, active = env
    copy = active.copy
    copy.stream.fail(Deposed("the store names b at epoch 2 (test)"))
    await active.stop()  # before `_watch` ran: the copy is still there
    with pytest.raises(sqlite3.ProgrammingError, match="closed database"):
        copy.db.mailbox("m")
    # Mounted again, crash recovery finds what the log holds.
    again = instance(copy.paths, clock, store)
    await again.start()
    try:
        assert again.copy is not None and again.copy.mailbox("m") is not None
    finally:
        await again.stop(clean=False)


async def test_a_crashed_active_keeps_its_lease_until_it_expires(env):
    clock, store, active = env
    await active.stop(clean=False)  # kill -9: nothing released
    with pytest.raises(LeaseHeld, match="a holds the active's lease"):
        await store.set_active("DB1", "b", expected_epoch=1, start_generation=2)
    await clock.advance(TTL)
    assert await store.set_active("DB1", "b", expected_epoch=1, start_generation=2)


async def test_a_clean_stop_releases_the_lease(env):
    _, store, active = env
    await active.stop()
    assert await store.lease("DB1") is None
    assert await store.set_active("DB1", "b", expected_epoch=1, start_generation=2)


async def test_a_switchover_releases_the_lease_and_an_abandoned_one_takes_it_again(env):
    _, store, active = env
    await active.quiesce("b")
    assert await store.lease("DB1") is None, "the target need not wait for it to expire"
    active.unquiesce()  # abandoned: the next commit's fence renews it
    await active.store.put_items("m", [ItemIn(item_id="resumed")])
    assert (await store.lease("DB1")).node == "a"


async def test_a_switchover_answers_the_commit_caught_between_its_fsync_and_its_fence(env):
    """The quiesce begins while a group commit is durable but not yet fenced (the writer held
    there): that commit is acknowledged, a write after the quiesce began is refused unwritten
    naming the target, the lease is held until the roll and released after it, and the copy
    stays mounted.  It used to be refused at the fence ("the lease was released for a
    switchover"), durable and unanswered, the stream stopped and the copy re-mounted through
    crash recovery: a switchover under write load failed."""
    _, store, active = env
    stream = active.copy.stream
    fence = stream._fence
    at_fence, go_on = asyncio.Event(), asyncio.Event()

    async def held_fence() -> BaseException | None:
        at_fence.set()
        await go_on.wait()
        return await fence()

    stream.set_fence(held_fence)
    caught = asyncio.create_task(active.store.put_items("m", [ItemIn(item_id="caught")]))
    await asyncio.wait_for(at_fence.wait(), 10)  # durable, not yet fenced
    quiesce = asyncio.create_task(active.quiesce("b"))
    await wait_until("the quiesce began", lambda: active.switching_to == "b")
    written = stream.open_record_count
    try:
        with pytest.raises(SwitchingOver, match="switched over to b; write there"):
            await asyncio.wait_for(active.store.put_items("m", [ItemIn(item_id="late")]), 10)
        assert stream.open_record_count == written, "refused before anything was written"
        assert (await store.lease("DB1")).node == "a", "the lease is held until the roll"
    finally:
        go_on.set()
    acknowledged = await asyncio.wait_for(caught, 10)
    generation = await asyncio.wait_for(quiesce, 10)
    assert acknowledged.lsn.generation <= generation, "the write is in what the target replays"
    assert not stream.failed.is_set() and active.copy is not None and active.copy.stream is stream
    assert active.copy.item("m", "caught") is not None
    assert active.copy.item("m", "late") is None
    assert await store.lease("DB1") is None, "released after the roll"


async def test_a_write_admitted_before_the_quiesce_is_refused_unwritten_if_it_commits_after(env):
    """A write that passed its admission (its change numbers handed out) before the quiesce
    and reaches the log after it is refused before it is queued, its numbers taken back."""
    _, _, active = env
    copy = active.copy
    before = copy.highest_change_number
    number = copy.next_change_number()  # admitted: its number handed out
    await active.quiesce("b")
    records = copy.stream.open_record_count
    with pytest.raises(SwitchingOver):
        await copy.commit([SetMailbox("m", number)])
    assert copy.stream.open_record_count == records
    assert copy.highest_change_number == before, "its number taken back"


async def test_an_activation_waits_out_a_dead_actives_lease_but_not_a_live_ones(tmp_path):
    clock = ManualClock()
    store = StoreWithFaults(tmp_path / "cluster.db", clock)
    await store.set_active("DB1", "a", expected_epoch=0, start_generation=1)
    await store.renew_lease("DB1", "a", 1, TTL)  # then "a" dies: nobody renews
    waiting = asyncio.create_task(wait_out_lease(store, "DB1", "b", clock, longest=TTL * 1.5))
    await wait_until("the activation waits", lambda: clock.pending_sleeps())
    await clock.advance(TTL + 0.1)
    assert await waiting is True
    assert await store.set_active("DB1", "b", expected_epoch=1, start_generation=2)
    # "b" is alive and renews: an activation of "c" gives up after its wait, nothing changed
    refused = asyncio.create_task(wait_out_lease(store, "DB1", "c", clock, longest=TTL * 1.5))
    while not refused.done():
        await store.renew_lease("DB1", "b", 2, TTL)  # "b" renews as time passes
        await clock.advance(0.5)
    with pytest.raises(LeaseHeld, match="b holds the active's lease"):
        await refused
    assert (await store.active("DB1")).node == "b"
    store.close()
