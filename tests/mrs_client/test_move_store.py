"""The move store's contract, run against each engine: the embedded SQLite file and a real
etcd server (Debian's etcd-server, which `make test` installs) on free ports."""

from __future__ import annotations

import asyncio
import sqlite3
import time
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from dag_common.cluster_store.etcd_gateway import EtcdGateway
from mrs_client.errors import MoveRejected
from mrs_client.move_store import embedded as embedded_engine
from mrs_client.move_store import etcd as etcd_engine
from mrs_client.move_store.embedded import EmbeddedMoveStore
from mrs_client.move_store.etcd import EtcdMoveStore
from mrs_client.move_store.interface import (
    BatchExists,
    BatchRecord,
    LeaseLost,
    MoveLease,
    MoveRecord,
    MoveStore,
    answer_row,
)
from mrs_client.move_store.records import BatchSettings
from mrs_client.policy import (
    GuaranteeAnswer,
    GuaranteeStatus,
    MovePriority,
    MoveState,
    MoveStep,
    StopRequest,
)
from tests.cluster_harness import start_etcd, wait_until

NOW = datetime(2026, 11, 23, 9, 0, tzinfo=UTC)
# A lease meant to run out: etcd's leases last whole seconds, at least its minimum (2 s).
SHORT = 1.0
LONG = 60.0


@pytest.fixture(scope="module")
def etcd(tmp_path_factory):
    url, proc = start_etcd(tmp_path_factory.mktemp("etcd"))
    yield url
    proc.terminate()
    proc.wait(timeout=10)


def _etcd_store(url: str) -> EtcdMoveStore:
    # a cluster name of its own per test: the module's etcd is shared
    return EtcdMoveStore(EtcdGateway([url]), cluster=f"t{time.time_ns()}")


@pytest.fixture(params=["embedded", "etcd"])
async def store(request, tmp_path):
    if request.param == "embedded":
        s: MoveStore = EmbeddedMoveStore(tmp_path / "cluster.db")
    else:
        s = _etcd_store(request.getfixturevalue("etcd"))
    yield s
    await s.aclose()


def move(
    move_id: str,
    *mailboxes: str,
    minute: int = 0,
    state: MoveState = MoveState.QUEUED,
    batch: str | None = None,
) -> MoveRecord:
    """A move request of `mailboxes` (its id's mailbox if none), created `minute`s past NOW."""
    created = NOW + timedelta(minutes=minute)
    return MoveRecord(
        id=move_id,
        mailboxes=mailboxes or (f"{move_id}-mbx",),
        source_db="DB1",
        target_db="DB2",
        created=created,
        updated=created,
        state=state,
        batch=batch,
    )


def batch_of(name: str, *moves: str, minute: int = 0) -> BatchRecord:
    return BatchRecord(name=name, created=NOW + timedelta(minutes=minute), moves=moves)


async def claimed(store: MoveStore, move_id: str, worker: str = "w1") -> MoveLease:
    lease = await store.claim(move_id, worker, LONG)
    assert lease is not None, f"{move_id} could not be claimed"
    return lease


async def finish(store: MoveStore, record: MoveRecord, state: MoveState) -> MoveRecord:
    """`record` saved in `state` under a lease of its own, released after."""
    lease = await claimed(store, record.id)
    saved = await store.save(replace(record, state=state), NOW, lease=lease)
    await store.release(lease)
    return saved


async def expired(store: MoveStore, move_id: str) -> None:
    """Wait, by the store's own word, until the move's lease ran out."""

    async def gone() -> bool:
        return await store.holder(move_id) is None

    await wait_until(f"the lease on {move_id} to expire", gone, timeout=15, every=0.1)


# ---- requests and mailbox claims ----------------------------------------------------------


async def test_create_claims_every_mailbox_or_none_and_names_each_taken(store):
    await store.create([move("m1", "alice", "bob")])
    with pytest.raises(MoveRejected, match=r"'bob' is already being moved \(request m1\)"):
        await store.create([move("m2", "carol"), move("m3", "bob", "dave")])
    assert await store.get("m2") is None and await store.get("m3") is None, "all or none"
    await store.create([move("m4", "carol", "dave")])  # neither was claimed by the refusal

    with pytest.raises(MoveRejected) as refused:
        await store.create([move("m5", "alice"), move("m6", "erin", "dave")])
    said = str(refused.value)
    assert "'alice' is already being moved (request m1)" in said
    assert "'dave' is already being moved (request m4)" in said
    assert "erin" not in said and not isinstance(refused.value, BatchExists)
    assert await store.get("m5") is None and await store.get("m6") is None

    with pytest.raises(MoveRejected):  # the same mailbox twice in one call
        await store.create([move("m7", "erin"), move("m8", "erin")])
    assert await store.get("m7") is None and await store.get("m8") is None
    await store.create([move("m9", "erin")])

    assert [r.id for r in await store.list()] == ["m1", "m4", "m9"]
    assert await store.get("m1") == move("m1", "alice", "bob")


async def test_two_creates_of_one_mailbox_at_once_one_wins(store):
    results = await asyncio.gather(
        *(store.create([move(f"m{i}", "alice")]) for i in range(4)), return_exceptions=True
    )
    assert sum(r is None for r in results) == 1, results
    assert all(isinstance(r, MoveRejected) for r in results if r is not None)
    assert len(await store.list()) == 1


async def test_a_mailbox_is_free_again_once_its_move_completes_or_is_cancelled(store):
    done, gone, failed, paused = (
        move("m1", "alice"),
        move("m2", "bob", "bert"),
        move("m3", "carol"),
        move("m4", "dave"),
    )
    await store.create([done, gone, failed, paused])
    await finish(store, done, MoveState.COMPLETED)
    await finish(store, gone, MoveState.CANCELLED)
    await finish(store, failed, MoveState.FAILED)
    await finish(store, paused, MoveState.SUSPENDED)
    await store.create([move("n1", "alice"), move("n2", "bob", "bert")])
    for mailbox in ("carol", "dave"):  # a failed or suspended move keeps its mailboxes
        with pytest.raises(MoveRejected, match=mailbox):
            await store.create([move(f"n-{mailbox}", mailbox)])

    # the finished move saved again: the mailbox is another move's now, and stays so
    await finish(store, done, MoveState.COMPLETED)
    with pytest.raises(MoveRejected, match=r"'alice' is already being moved \(request n1\)"):
        await store.create([move("n3", "alice")])


async def test_a_batch_name_taken_is_refused_and_nothing_is_recorded(store):
    await store.create([move("m1", "alice", batch="B")], batch_of("B", "m1"))
    with pytest.raises(BatchExists, match="'B' exists already"):
        await store.create([move("m2", "bob", batch="B")], batch_of("B", "m2"))
    assert await store.get("m2") is None
    assert (await store.batch("B")).moves == ("m1",), "the first batch stands"
    await store.create([move("m3", "bob")])  # bob was not claimed


async def test_a_batch_larger_than_one_etcd_transaction_is_created_whole_or_not_at_all(store):
    """300 requests of two mailboxes each are 900 keys, far over etcd's 128 per transaction:
    created all; and another batch whose 250th request names a mailbox already moving is
    refused with nothing of it left (no request, no claim, no batch)."""
    big = [move(f"a{i:03d}", f"a{i:03d}", f"a{i:03d}.archive", batch="A") for i in range(300)]
    await store.create(big, batch_of("A", *(r.id for r in big)))
    assert len(await store.list(batch="A")) == 300
    assert not (await store.batch("A")).suspended
    await store.create([move("x", "taken")])
    other = [move(f"b{i:03d}", f"b{i:03d}", batch="B") for i in range(300)]
    other[250] = move("b250", "taken", batch="B")
    with pytest.raises(MoveRejected, match=r"'taken' is already being moved \(request x\)"):
        await store.create(other, batch_of("B", *(r.id for r in other)))
    assert await store.list(batch="B") == [] and await store.batch("B") is None
    await store.create([move("y", "b000", "b249", "b299")])  # none of its mailboxes claimed


# ---- leases -------------------------------------------------------------------------------


async def test_a_claim_excludes_any_second_claimer_even_the_same_worker(store):
    await store.create([move("m1")])
    first = await claimed(store, "m1", "w1")
    assert (first.move_id, first.worker) == ("m1", "w1")
    assert await store.claim("m1", "w2", LONG) is None
    assert await store.claim("m1", "w1", LONG) is None, "a lease is never taken twice"
    held = await store.holder("m1")
    assert held is not None and held.worker == "w1" and 0 < held.expires_in <= LONG
    assert set(await store.holders()) == {"m1"}
    assert await store.holder("m2") is None

    await store.release(first)
    assert await store.holder("m1") is None and await store.holders() == {}
    second = await claimed(store, "m1", "w2")
    assert second.token != first.token
    await store.release(first)  # no longer live: ends nothing
    assert (await store.holder("m1")).worker == "w2"


async def test_two_claims_at_once_one_wins(store):
    await store.create([move("m1")])
    leases = await asyncio.gather(*(store.claim("m1", f"w{i}", LONG) for i in range(4)))
    winners = [lease for lease in leases if lease is not None]
    assert len(winners) == 1
    assert (await store.holder("m1")).worker == winners[0].worker


async def test_a_save_under_a_released_lease_is_refused_and_writes_nothing(store):
    record = move("m1", "alice")
    await store.create([record])
    lease = await claimed(store, "m1")
    saved = await store.save(replace(record, items_copied=5), NOW, lease=lease)
    assert await store.get("m1") == saved and saved.items_copied == 5
    await store.release(lease)
    with pytest.raises(LeaseLost, match="nothing saved"):
        await store.save(replace(record, state=MoveState.COMPLETED), NOW, lease=lease)
    assert await store.get("m1") == saved
    with pytest.raises(MoveRejected, match="alice"):  # still claimed: not saved Completed
        await store.create([move("m2", "alice")])
    assert not await store.renew(lease, LONG), "a released lease is not renewed"


async def test_a_save_under_an_expired_lease_is_refused_and_writes_nothing(store):
    record = move("m1")
    await store.create([record])
    lease = await store.claim("m1", "w1", SHORT)
    assert lease is not None
    saved = await store.save(replace(record, state=MoveState.IN_PROGRESS), NOW, lease=lease)
    await expired(store, "m1")
    with pytest.raises(LeaseLost):
        await store.save(replace(saved, items_copied=9), NOW, lease=lease)
    assert await store.get("m1") == saved
    assert not await store.renew(lease, LONG), "an expired lease is not renewed"


async def test_renewing_keeps_a_lease_past_its_ttl(store):
    record = move("m1")
    await store.create([record])
    lease = await store.claim("m1", "w1", SHORT)
    assert lease is not None
    until = time.monotonic() + 3.5  # past etcd's 2 s minimum as well as the ttl
    while time.monotonic() < until:
        assert await store.renew(lease, SHORT)
        await asyncio.sleep(0.2)
    assert (await store.holder("m1")).worker == "w1"
    assert await store.claim("m1", "w2", LONG) is None
    await store.save(replace(record, items_copied=1), NOW, lease=lease)

    # a renewal for longer than the claim lasts for as long as it asked
    assert await store.renew(lease, LONG)
    held = await store.holder("m1")
    assert held.worker == "w1" and held.expires_in > LONG / 2, held
    await store.save(replace(record, items_copied=2), NOW, lease=lease)
    assert (await store.get("m1")).items_copied == 2


async def test_after_expiry_another_worker_claims_and_the_old_one_is_fenced(store):
    record = move("m1", "alice")
    await store.create([record])
    old = await store.claim("m1", "w1", SHORT)
    assert old is not None
    await expired(store, "m1")
    new = await claimed(store, "m1", "w2")
    ours = await store.save(replace(record, state=MoveState.IN_PROGRESS), NOW, lease=new)

    with pytest.raises(LeaseLost, match=r"lease of w1 is over \(w2 holds the move now\)"):
        await store.save(replace(record, state=MoveState.COMPLETED), NOW, lease=old)
    assert await store.get("m1") == ours
    assert not await store.renew(old, LONG)
    await store.release(old)  # not live: the new lease stays
    assert (await store.holder("m1")).worker == "w2"

    # the same worker name claiming again is another lease: the old token is still fenced
    await store.release(new)
    again = await claimed(store, "m1", "w1")
    with pytest.raises(LeaseLost):
        await store.save(record, NOW, lease=old)
    await store.save(replace(ours, state=MoveState.COMPLETED), NOW, lease=again)
    await store.create([move("m2", "alice")])  # completed by the live lease: freed


async def test_a_save_is_stamped_and_returned_as_saved(store):
    record = move("m1")
    await store.create([record])
    lease = await claimed(store, "m1")
    later = NOW + timedelta(hours=1)
    saved = await store.save(replace(record, steps_done=3), later, lease=lease, durable=False)
    assert saved == replace(record, steps_done=3, updated=later)
    assert await store.get("m1") == saved


# ---- stop requests ------------------------------------------------------------------------


async def test_a_cancel_is_not_turned_into_a_suspend_nor_cleared_by_a_suspended_save(store):
    record = move("m1")
    await store.create([record])
    lease = await claimed(store, "m1")
    assert await store.stop_requested("m1") is None
    await store.request_stop("m1", StopRequest.SUSPEND, NOW)
    assert await store.stop_requested("m1") is StopRequest.SUSPEND
    await store.request_stop("m1", StopRequest.CANCEL, NOW)
    await store.request_stop("m1", StopRequest.SUSPEND, NOW)
    assert await store.stop_requested("m1") is StopRequest.CANCEL
    await store.save(replace(record, state=MoveState.SUSPENDED), NOW, lease=lease)
    assert await store.stop_requested("m1") is StopRequest.CANCEL, "a cancel is not a suspend"
    await store.save(replace(record, state=MoveState.CANCELLED), NOW, lease=lease)
    assert await store.stop_requested("m1") is None


async def test_a_suspended_save_carries_out_a_suspend_and_a_resume_clears_one(store):
    record = move("m1")
    await store.create([record])
    lease = await claimed(store, "m1")
    await store.request_stop("m1", StopRequest.SUSPEND, NOW)
    await store.save(replace(record, state=MoveState.IN_PROGRESS), NOW, lease=lease)
    assert await store.stop_requested("m1") is StopRequest.SUSPEND, "not carried out yet"
    await store.save(replace(record, state=MoveState.SUSPENDED), NOW, lease=lease)
    assert await store.stop_requested("m1") is None

    await store.request_stop("m1", StopRequest.SUSPEND, NOW)
    await store.clear_stop("m1")
    assert await store.stop_requested("m1") is None
    await store.clear_stop("m1")  # nothing to clear

    await store.request_stop("m1", StopRequest.CANCEL, NOW)
    await store.save(replace(record, state=MoveState.COMPLETED), NOW, lease=lease)
    assert await store.stop_requested("m1") is None, "a finished move keeps no stop request"


async def test_save_and_look_keeps_the_answers_with_the_save_and_says_what_is_asked(store):
    record = move("m1")
    await store.create([record])
    lease = await claimed(store, "m1")
    step, method = MoveStep.FINAL_SYNC_AND_FLUSH, "CheckReplicationFlush"
    rows = [answer_row(step, method, _answer(n), NOW) for n in (1, 2)]
    saved, stop = await store.save_and_look(
        replace(record, steps_done=5), NOW, lease=lease, answers=rows
    )
    assert (saved, stop) == (replace(record, steps_done=5), None)
    assert await store.get("m1") == saved and await store.answers("m1") == rows
    await store.request_stop("m1", StopRequest.SUSPEND, NOW)
    _, stop = await store.save_and_look(saved, NOW, lease=lease, durable=False)
    assert stop is StopRequest.SUSPEND, "seen as of the save"
    suspended = replace(saved, state=MoveState.SUSPENDED)
    _, stop = await store.save_and_look(suspended, NOW, lease=lease)
    assert stop is None, "a suspended save carries out the suspend it looks for"
    # Under a lease that is over: nothing saved, and the answers given with it not kept.
    await store.release(lease)
    with pytest.raises(LeaseLost):
        await store.save_and_look(
            saved, NOW, lease=lease, answers=[answer_row(step, method, _answer(3), NOW)]
        )
    assert await store.get("m1") == suspended and await store.answers("m1") == rows


# ---- guarantee answers --------------------------------------------------------------------


def _answer(n: int) -> GuaranteeAnswer:
    return GuaranteeAnswer(
        GuaranteeStatus.RETRY, timedelta(seconds=30), f"answer {n}", epoch=n, lost=n % 2 == 1
    )


async def test_the_newest_answers_are_kept_oldest_first(store, monkeypatch):
    for engine in (embedded_engine, etcd_engine):
        monkeypatch.setattr(engine, "ANSWERS_KEPT", 3)
    assert await store.answers("m1") == []
    step, method = MoveStep.FINAL_SYNC_AND_FLUSH, "CheckReplicationFlush"
    for n in range(5):
        at = NOW + timedelta(seconds=n)
        await store.add_answer("m1", step=step, method=method, answer=_answer(n), now=at)
    await store.add_answer(
        "m2", step=MoveStep.INITIAL_SYNC, method="CheckReplicationHealth", answer=_answer(9),
        now=NOW,
    )  # fmt: skip
    kept = await store.answers("m1")
    assert kept == [
        answer_row(step, method, _answer(n), NOW + timedelta(seconds=n)) for n in (2, 3, 4)
    ]
    assert [a.reason for a in await store.answers("m2")] == ["answer 9"]


# ---- listing and batches ------------------------------------------------------------------


async def test_list_is_oldest_first_and_filters_by_state_and_batch(store):
    await store.create(
        [
            move("m5", minute=3, state=MoveState.IN_PROGRESS, batch="B"),
            move("m2", minute=1, batch="B"),
            move("m1", minute=1, state=MoveState.FAILED),
            move("m0", minute=2, batch="C"),
        ]
    )
    await store.create([move("m9", minute=0, state=MoveState.IN_PROGRESS, batch="B")])
    ids = lambda records: [r.id for r in records]  # noqa: E731
    assert ids(await store.list()) == ["m9", "m1", "m2", "m0", "m5"]
    assert ids(await store.list(states=[MoveState.QUEUED])) == ["m2", "m0"]
    assert ids(await store.list(states={MoveState.IN_PROGRESS, MoveState.FAILED})) == [
        "m9",
        "m1",
        "m5",
    ]
    assert ids(await store.list(batch="B")) == ["m9", "m2", "m5"]
    assert ids(await store.list(states=[MoveState.IN_PROGRESS], batch="B")) == ["m9", "m5"]
    assert await store.list(states=[]) == []
    assert await store.list(batch="nope") == []

    lease = await claimed(store, "m2")
    await store.save(
        replace(await store.get("m2"), state=MoveState.COMPLETED), NOW, lease=lease
    )  # fmt: skip
    assert ids(await store.list(states=[MoveState.QUEUED])) == ["m0"]
    assert ids(await store.list(states=[MoveState.COMPLETED], batch="B")) == ["m2"]


async def test_batches_round_trip_oldest_first(store):
    assert await store.batches() == [] and await store.batch("B1") is None
    second = batch_of("B2", "m2", minute=5)
    first = batch_of("B1", "m1", minute=1)
    await store.create([move("m2", batch="B2")], second)
    await store.create([move("m1", batch="B1")], first)
    assert await store.batches() == [first, second]
    assert await store.batch("B2") == second

    changed = replace(
        first,
        settings=BatchSettings(
            start_after=NOW,
            priority=MovePriority.HIGH,
            max_mb_per_s=12.5,
            suspend_when_ready_to_complete=True,
        ),
        suspended=True,
        complete_requested=NOW + timedelta(days=1),
    )
    await store.save_batch(changed)
    assert await store.batch("B1") == changed
    assert await store.batches() == [changed, second]
    await store.save_batch(batch_of("B3"))  # replaces a batch only: creates none
    assert await store.batch("B3") is None


# ---- etcd only ----------------------------------------------------------------------------


async def test_etcd_refuses_single_requests_larger_than_one_transaction(etcd):
    """Requests without a batch are created in one transaction or refused (a batch is
    created in parts: the contract test above)."""
    store = _etcd_store(etcd)
    try:
        many = [move(f"m{i:03d}") for i in range(65)]  # 130 keys
        with pytest.raises(MoveRejected, match="at most 128 keys in one transaction"):
            await store.create(many)
        assert await store.list() == []
        await store.create(many[:64])  # 128 keys: one transaction
        assert len(await store.list()) == 64
    finally:
        await store.aclose()


async def test_etcd_fences_a_lease_claimed_through_another_store_object(etcd):
    cluster = f"t{time.time_ns()}"
    first, second = (EtcdMoveStore(EtcdGateway([etcd]), cluster=cluster) for _ in range(2))
    try:
        record = move("m1", "alice")
        await first.create([record])
        lease = await claimed(first, "m1")
        # the other object never saw the lease: it asks etcd whether it is live
        saved = await second.save(replace(record, items_copied=3), NOW, lease=lease)
        assert await first.get("m1") == saved
        assert await second.renew(lease, LONG)
        await first.release(lease)
        with pytest.raises(LeaseLost):
            await second.save(replace(record, state=MoveState.COMPLETED), NOW, lease=lease)
        assert await first.get("m1") == saved
        assert not await second.renew(lease, LONG)
    finally:
        await first.aclose()
        await second.aclose()


# ---- the embedded engine's group commit ---------------------------------------------------


class _FileHeld:
    """Another process's write transaction on the store's file, as `mrs batch create` or a
    node holds one: the store's writes queue behind it."""

    def __init__(self, path):
        self._conn = sqlite3.connect(path, isolation_level=None)
        self._conn.execute("BEGIN IMMEDIATE")

    def release(self) -> None:
        self._conn.execute("COMMIT")
        self._conn.close()


async def test_writes_waiting_together_commit_together_and_a_refused_one_alone_rolls_back(
    tmp_path,
):
    store = EmbeddedMoveStore(tmp_path / "cluster.db")
    try:
        records = [move(f"m{i}") for i in range(8)]
        await store.create(records)
        leases = [await claimed(store, r.id) for r in records]
        await store.release(leases[3])  # m3's save is refused: its lease is over
        step, method = MoveStep.FINAL_SYNC_AND_FLUSH, "CheckReplicationFlush"
        rows = [answer_row(step, method, _answer(1), NOW)]
        commits = store.commits
        held = _FileHeld(tmp_path / "cluster.db")
        saves = [
            asyncio.ensure_future(
                store.save_and_look(replace(r, items_copied=i), NOW, lease=lease, answers=rows)
            )
            for i, (r, lease) in enumerate(zip(records, leases, strict=True))
        ]
        await wait_until("the eight saves queued", lambda: store.in_flight == 8, timeout=10)
        held.release()
        results = await asyncio.gather(*saves, return_exceptions=True)
        assert isinstance(results[3], LeaseLost)
        assert await store.get("m3") == records[3] and await store.answers("m3") == []
        for i, r in enumerate(records):
            if i != 3:
                assert results[i] == (replace(r, items_copied=i), None)
                assert await store.get(r.id) == replace(r, items_copied=i)
                assert await store.answers(r.id) == rows
        # the first write's group may have been taken before the others queued: one or two
        assert store.commits - commits <= 2
    finally:
        await store.aclose()


async def test_a_group_with_one_durable_write_is_committed_with_fsync(tmp_path):
    store = EmbeddedMoveStore(tmp_path / "cluster.db")
    try:
        records = [move(f"m{i}") for i in range(3)]
        await store.create(records)
        leases = [await claimed(store, r.id) for r in records]
        held = _FileHeld(tmp_path / "cluster.db")
        first = asyncio.ensure_future(store.save(records[0], NOW, lease=leases[0], durable=False))
        await wait_until("the first save waits", lambda: store.in_flight == 1, timeout=10)
        rest = [
            asyncio.ensure_future(store.save(records[1], NOW, lease=leases[1], durable=False)),
            asyncio.ensure_future(store.save(records[2], NOW, lease=leases[2], durable=True)),
        ]
        await wait_until("all three wait", lambda: store.in_flight == 3, timeout=10)
        held.release()
        await asyncio.gather(first, *rest)
        # FULL (2): the group of the two last, one of them durable, went to the disk
        assert store.call(lambda: store._conn.execute("PRAGMA synchronous").fetchone()[0]) == 2
    finally:
        await store.aclose()


async def test_a_write_whose_caller_gave_up_is_committed_all_the_same(tmp_path):
    store = EmbeddedMoveStore(tmp_path / "cluster.db")
    try:
        record = move("m1")
        await store.create([record])
        lease = await claimed(store, "m1")
        held = _FileHeld(tmp_path / "cluster.db")
        save = asyncio.ensure_future(store.save(replace(record, items_copied=5), NOW, lease=lease))
        await wait_until("the save waits", lambda: store.in_flight == 1, timeout=10)
        save.cancel()
        held.release()
        await wait_until(
            "the save committed",
            lambda: store.call(store._get, "m1").items_copied == 5,
            timeout=10,
        )
    finally:
        await store.aclose()
