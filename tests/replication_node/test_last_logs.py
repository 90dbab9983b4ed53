"""Attempt Copy Last Logs, piece by piece: sealing an open log into the generation it stands
for (pure), and the old active's half, holding its last logs for the copy taking over
(real log files, a real embedded cluster store, a manual clock for the hold).  The whole
hand-over over real node processes is in test_lossless_e2e and test_disk_full_e2e."""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime, timedelta

import pytest

from dag_common.clock import ManualClock
from dag_common.cluster_store.embedded import EmbeddedClusterStore
from dag_common.model import CopyStatus
from dag_common.store_api import ItemIn
from replication_node.active.copy import CopyPaths
from replication_node.active.instance import ActiveInstance
from replication_node.errors import Conflict, HeldForHandOver
from replication_node.log.logfile import (
    OPEN_LOG_NAME,
    LogHeader,
    RecordType,
    encode_record,
    encode_transaction,
    scan,
    seal_open_log,
    verify_closed,
)
from tests.cluster_harness import wait_until
from tests.replication_node.share import db1_active

T0 = datetime(2026, 11, 23, 9, 0, tzinfo=UTC)


HEADER = LogHeader(
    generation=7,
    database_signature=uuid.uuid4(),
    log_signature=uuid.uuid4(),
    creation_time=T0,
    prev_creation_time=T0 - timedelta(minutes=1),
    log_file_size=1 << 20,
)


def open_log(transactions: int, *, torn: bytes = b"") -> bytes:
    data = HEADER.encode()
    for i in range(transactions):
        when = T0 + timedelta(seconds=i)
        data += encode_transaction([{"op": "noop", "i": i}], when, salt=HEADER.salt)
    return data + torn


def test_an_open_log_holding_only_its_header_seals_to_nothing():
    assert seal_open_log(open_log(0)) is None


def test_sealing_keeps_every_valid_record_and_closes_at_the_last_commit():
    data = open_log(3)
    sealed, result = seal_open_log(data)
    assert sealed.startswith(data), "the open log is a prefix of the generation it becomes"
    closed = verify_closed(sealed, 7)
    assert len(closed.transactions) == 3
    assert closed.close_time == T0 + timedelta(seconds=2)
    assert result.tail_error is None


def test_a_torn_tail_is_left_out_and_said():
    whole = open_log(2)
    when = T0 + timedelta(seconds=9)
    torn = encode_transaction([{"op": "noop", "i": 99}], when, salt=HEADER.salt)[:-5]
    sealed, result = seal_open_log(whole + torn)
    assert sealed.startswith(whole) and not sealed.startswith(whole + torn[:8])
    assert len(verify_closed(sealed, 7).transactions) == 2
    assert "cut short" in result.tail_error


def test_an_open_log_whose_roll_was_cut_after_its_close_record_is_kept_as_it_is():
    when = T0 + timedelta(minutes=5)
    closed = open_log(2) + encode_record(RecordType.CLOSE, when, salt=HEADER.salt)
    sealed, _ = seal_open_log(closed)
    assert sealed == closed
    assert scan(sealed).close_time == T0 + timedelta(minutes=5)


# ---- the old active's half -------------------------------------------------------------


def instance(root, store, clock, waiting=None, hold=30.0):
    async def copy_awaiting_logs():
        return waiting

    return ActiveInstance(
        settings=db1_active(handover_hold=hold),
        paths=CopyPaths(root / "DB1", "DB1"),
        clock=clock,
        cluster_store=store,
        copy_awaiting_logs=copy_awaiting_logs,
    )


async def crashed_with_open_commits(tmp_path, clock):
    """An active killed with 1 closed generation and 6 acknowledged commits in E00.log."""
    store = EmbeddedClusterStore(tmp_path / "cluster.db")
    await store.set_active("DB1", "a", expected_epoch=0, start_generation=1)
    old = instance(tmp_path, store, clock)
    await old.start()
    await old.store.create_mailbox("m")
    await old.copy.roll()
    for i in range(5):
        await old.store.put_items("m", [ItemIn(item_id=f"i{i}")])
    await old.stop(clean=False)
    return store


async def test_back_after_a_crash_it_holds_its_last_logs_for_the_waiting_copy(tmp_path):
    clock = ManualClock(T0)
    store = await crashed_with_open_commits(tmp_path, clock)
    back = instance(tmp_path, store, clock, waiting="b", hold=30.0)
    await back.start()
    try:
        status = back.status()
        assert back.copy is None and status.status is CopyStatus.DISMOUNTED
        assert status.held_for == "b"
        assert (status.last_log_generated, status.open_commits) == (2, 5)
        info = back.share.share_info()
        assert not info.mounted and (info.last_generation, info.open_generation) == (1, 2)
        assert back.share.open_log_path() == tmp_path / "DB1" / "logs" / OPEN_LOG_NAME
        with pytest.raises(HeldForHandOver, match="held for the copy on b"):
            await back.mount_again()  # `db mount` too waits for the hand-over

        # the copy never takes over: the hold ends and the node mounts its own copy
        await clock.advance(31)
        await wait_until("the re-mount after the hold", lambda: back.copy is not None)
        assert back.status().held_for is None and back.share.open_log_path() is None
        assert [i.item_id for i in back.copy.items("m")] == [f"i{i}" for i in range(5)]
    finally:
        await back.stop(clean=False)
        store.close()


async def test_with_no_copy_waiting_it_mounts_at_once(tmp_path):
    clock = ManualClock(T0)
    store = await crashed_with_open_commits(tmp_path, clock)
    back = instance(tmp_path, store, clock, waiting=None)
    await back.start()
    try:
        assert back.copy is not None and back.status().status is CopyStatus.MOUNTED
        assert len(back.copy.items("m")) == 5
        with pytest.raises(Conflict, match="a running active is moved by a switchover"):
            await back.share.hand_over("b")
        assert back.share.open_log_path() is None, "the open log is never served while written"
    finally:
        await back.stop(clean=False)
        store.close()


async def test_a_hand_over_asked_of_a_failed_active_holds_it_from_remounting(tmp_path):
    clock = ManualClock(T0)
    store = await crashed_with_open_commits(tmp_path, clock)
    back = instance(tmp_path, store, clock, waiting="b", hold=30.0)
    await back.start()  # not mounted: held for b
    try:
        info = await back.share.hand_over("c")  # another copy turned out the best: it asks
        assert back.status().held_for == "c"
        assert (info.open_generation, info.open_commits, info.epoch) == (2, 5, 1)
        await clock.advance(20)
        await asyncio.sleep(0.05)
        assert back.copy is None, "held for 30 s from the last hand-over"
    finally:
        await back.stop(clean=False)
        store.close()
