"""The cluster store's contract, run against each engine: the embedded SQLite file and a
real etcd server (Debian's etcd-server, which `make test` installs) on free ports."""

from __future__ import annotations

import asyncio
import base64
import json
import subprocess
import sys
import time
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from dag_common.cluster_store.embedded import EmbeddedClusterStore
from dag_common.cluster_store.engine import LeaseClock
from dag_common.cluster_store.etcd import EtcdClusterStore
from dag_common.cluster_store.etcd_gateway import EtcdGateway
from dag_common.cluster_store.interface import (
    DirectoryEntry,
    MoveHold,
    RedeliveryNeed,
    RedeliveryRecord,
)
from dag_common.incarnation import ActivationCause
from dag_common.model import AutoDatabaseMountDial, FailoverPause
from mrs_client.move_store.embedded import EmbeddedMoveStore
from mrs_client.move_store.etcd import EtcdMoveStore
from mrs_client.move_store.interface import MoveRecord, MoveStore
from mrs_client.policy import MoveState
from replication_node.errors import ClusterStoreError, FailoverPaused, LeaseHeld
from tests.cluster_harness import ROOT, free_port, serve_app, start_etcd, wait_until


@pytest.fixture(scope="module")
def etcd(tmp_path_factory):
    url, proc = start_etcd(tmp_path_factory.mktemp("etcd"))
    yield url
    proc.terminate()
    proc.wait(timeout=10)


@pytest.fixture(params=["embedded", "etcd"])
async def store(request, tmp_path):
    if request.param == "embedded":
        s = EmbeddedClusterStore(tmp_path / "cluster.db")
    else:
        # a cluster name of its own per test: the module's etcd is shared
        gateway = EtcdGateway([request.getfixturevalue("etcd")])
        s = EtcdClusterStore(gateway, cluster=f"t{time.time_ns()}")
    yield s
    s.close()
    await asyncio.sleep(0)


async def test_the_active_moves_only_by_compare_and_set_on_the_epoch(store):
    assert await store.active("DB1") is None
    first = await store.set_active("DB1", "mbx1", expected_epoch=0)
    assert (first.node, first.epoch) == ("mbx1", 1)
    assert await store.set_active("DB1", "mbx2", expected_epoch=0) is None, "stale epoch"
    assert (await store.active("DB1")).node == "mbx1"
    second = await store.set_active("DB1", "mbx2", expected_epoch=1)
    assert (second.node, second.epoch) == ("mbx2", 2)
    assert await store.active("DB2") is None


async def test_two_activations_from_the_same_epoch_one_wins(store):
    await store.set_active("DB1", "mbx1", expected_epoch=0)
    results = await asyncio.gather(
        *(store.set_active("DB1", n, expected_epoch=1) for n in ("mbx2", "mbx3", "mbx2", "mbx3"))
    )
    winners = [r for r in results if r is not None]
    assert len(winners) == 1 and winners[0].epoch == 2
    assert (await store.active("DB1")).node == winners[0].node


async def test_last_log_generated_only_from_the_active_at_its_epoch_and_only_up(store):
    await store.set_active("DB1", "mbx1", expected_epoch=0)
    assert await store.publish_last_log_generated("DB1", "mbx1", 1, 7)
    assert await store.publish_last_log_generated("DB1", "mbx1", 1, 5)  # never goes back
    assert (await store.active("DB1")).last_log_generated == 7
    assert not await store.publish_last_log_generated("DB1", "mbx2", 1, 9), "not the active"
    assert not await store.publish_last_log_generated("DB1", "mbx1", 2, 9), "wrong epoch"
    moved = await store.set_active("DB1", "mbx2", expected_epoch=1)
    assert moved.last_log_generated == 7, "a new epoch of unknown start keeps what was generated"
    assert not await store.publish_last_log_generated("DB1", "mbx1", 1, 9), "deposed"


async def test_each_epoch_is_recorded_with_where_its_stream_began(store):
    await store.set_active("DB1", "mbx1", expected_epoch=0, start_generation=1)
    assert await store.publish_last_log_generated("DB1", "mbx1", 1, 20)
    # a lossy failover: mbx2 had inspected through 14, its stream goes on from 15
    moved = await store.set_active("DB1", "mbx2", expected_epoch=1, start_generation=15)
    assert (moved.epoch, moved.last_log_generated) == (2, 14)
    assert await store.set_active("DB1", "mbx3", expected_epoch=1, start_generation=9) is None
    await store.set_active("DB1", "mbx3", expected_epoch=2)  # start unknown: recorded as 1
    # a failover keeping a block-mode buffer: generation 29 only through byte 4096
    await store.set_active("DB1", "mbx1", expected_epoch=3, start_generation=30, kept_through=4096)
    history = await store.history("DB1")
    assert [(r.epoch, r.node, r.start_generation, r.kept_through) for r in history] == [
        (1, "mbx1", 1, None),
        (2, "mbx2", 15, None),
        (3, "mbx3", 1, None),
        (4, "mbx1", 30, 4096),
    ]
    assert await store.history("DB2") == []


async def test_each_epoch_records_when_why_and_the_logs_lost(store):
    before = datetime.now(UTC)
    await store.set_active(
        "DB1", "mbx1", expected_epoch=0, start_generation=1,
        cause=ActivationCause.FIRST_MOUNT, lost_logs=0,
    )  # fmt: skip
    await store.set_active(
        "DB1", "mbx2", expected_epoch=1, start_generation=15, kept_through=4096,
        cause=ActivationCause.AUTOMATIC_FAILOVER,
        mount_dial=AutoDatabaseMountDial.BEST_AVAILABILITY, lost_logs=2,
    )  # fmt: skip
    await store.set_active(
        "DB1", "mbx3", expected_epoch=2, start_generation=20,
        cause=ActivationCause.SWITCHOVER, lost_logs=0,
    )  # fmt: skip
    await store.set_active(
        "DB1", "mbx1", expected_epoch=3, start_generation=25,
        cause=ActivationCause.MANUAL_ACTIVATION,
        mount_dial=AutoDatabaseMountDial.GOOD_AVAILABILITY, lost_logs=1,
    )  # fmt: skip
    await store.set_active("DB1", "mbx2", expected_epoch=4)  # said nothing: all unknown
    after = datetime.now(UTC)
    history = await store.history("DB1")
    assert [(r.epoch, r.node, r.cause, r.mount_dial, r.lost_logs) for r in history] == [
        (1, "mbx1", ActivationCause.FIRST_MOUNT, None, 0),
        (2, "mbx2", ActivationCause.AUTOMATIC_FAILOVER, AutoDatabaseMountDial.BEST_AVAILABILITY, 2),
        (3, "mbx3", ActivationCause.SWITCHOVER, None, 0),
        (4, "mbx1", ActivationCause.MANUAL_ACTIVATION, AutoDatabaseMountDial.GOOD_AVAILABILITY, 1),
        (5, "mbx2", None, None, None),
    ]
    assert history[1].kept_through == 4096
    began = [r.began for r in history]
    assert all(before <= b <= after for b in began), began
    assert began == sorted(began)


def _pause(reason: str = "patching mbx1") -> FailoverPause:
    return FailoverPause(
        since=datetime(2026, 11, 23, 9, 30, tzinfo=UTC), by="ops@admin1", reason=reason
    )


async def test_a_pause_refuses_only_automatic_failover_and_is_taken_once(store):
    assert await store.failover_pause() is None
    assert await store.resume_failover() is None, "nothing to resume"
    await store.set_active("DB1", "mbx1", expected_epoch=0, start_generation=1)
    assert await store.pause_failover(_pause())
    assert not await store.pause_failover(_pause("another")), "paused already"
    assert await store.failover_pause() == _pause(), "the first pause's reason stands"
    with pytest.raises(FailoverPaused, match=r"paused since .* by ops@admin1: patching mbx1"):
        await store.set_active(
            "DB1", "mbx2", expected_epoch=1, start_generation=9,
            cause=ActivationCause.AUTOMATIC_FAILOVER,
        )  # fmt: skip
    assert (await store.active("DB1")).epoch == 1, "nothing changed"
    assert [r.epoch for r in await store.history("DB1")] == [1]
    # an operator's activation and a switchover go on while paused
    manual = await store.set_active(
        "DB1", "mbx2", expected_epoch=1, cause=ActivationCause.MANUAL_ACTIVATION
    )
    switched = await store.set_active(
        "DB1", "mbx3", expected_epoch=2, cause=ActivationCause.SWITCHOVER
    )
    assert (manual.epoch, switched.epoch) == (2, 3)
    assert await store.resume_failover() == _pause()
    assert await store.failover_pause() is None
    won = await store.set_active(
        "DB1", "mbx1", expected_epoch=3, cause=ActivationCause.AUTOMATIC_FAILOVER
    )
    assert won is not None and won.epoch == 4
    assert await store.pause_failover(_pause("again")), "paused again after a resume"


async def test_the_pause_is_one_for_every_store_of_the_cluster(store):
    # what `cluster pause` writes from the operator's machine, each node's store reads
    other = (
        EmbeddedClusterStore(store.path)
        if isinstance(store, EmbeddedClusterStore)
        else EtcdClusterStore(store._gateway, cluster=store._prefix.split("/")[2])
    )
    assert await store.pause_failover(_pause())
    assert await other.failover_pause() == _pause()
    assert await other.resume_failover() == _pause()
    assert await store.failover_pause() is None
    if isinstance(other, EmbeddedClusterStore):
        other.close()


async def test_an_etcd_epoch_recorded_before_its_cause_was_kept_reads_as_unknown(etcd):
    cluster = f"t{time.time_ns()}"
    s = EtcdClusterStore(EtcdGateway([etcd]), cluster=cluster)
    try:
        # what an older node wrote: no began, cause, mount_dial or lost_logs
        old = {"node": "mbx1", "start_generation": 12, "kept_through": None}
        key = f"/dag/{cluster}/history/DB1/{3:020d}"
        await s._gateway.call(
            "/v3/kv/put",
            {
                "key": base64.b64encode(key.encode()).decode(),
                "value": base64.b64encode(json.dumps(old).encode()).decode(),
            },
        )
        [record] = await s.history("DB1")
        assert (record.epoch, record.node, record.start_generation) == (3, "mbx1", 12)
        assert (record.began, record.cause, record.mount_dial, record.lost_logs) == (
            None, None, None, None,
        )  # fmt: skip
    finally:
        await s.aclose()


async def test_the_open_log_at_risk_is_announced_only_by_the_active_and_only_up(store):
    await store.set_active("DB1", "mbx1", expected_epoch=0, start_generation=1)
    assert await store.publish_open_generation("DB1", "mbx1", 1, 4, 5000)
    assert await store.publish_open_generation("DB1", "mbx1", 1, 3, 100)  # never goes back
    record = await store.active("DB1")
    assert (record.open_generation, record.change_number_ceiling) == (4, 5000)
    assert record.generated_at_risk == 4, "the open log with commits counts"
    assert await store.publish_last_log_generated("DB1", "mbx1", 1, 4)
    assert (await store.active("DB1")).open_generation == 4, "closing it loses nothing"
    assert not await store.publish_open_generation("DB1", "mbx2", 1, 9, 0), "not the active"
    assert not await store.publish_open_generation("DB1", "mbx1", 2, 9, 0), "wrong epoch"
    moved = await store.set_active("DB1", "mbx2", expected_epoch=1, start_generation=4)
    assert moved.open_generation == 0, "the new epoch's open log holds nothing yet"
    assert moved.change_number_ceiling == 5000, "change numbers go on above the old ceiling"


async def test_the_mailbox_directory_changes_only_from_what_was_expected(store):
    assert await store.mailbox_database("alice") is None
    assert await store.set_mailbox_database("alice", "DB1", expected=None)
    assert not await store.set_mailbox_database("alice", "DB3", expected=None), "exists"
    assert not await store.set_mailbox_database("alice", "DB3", expected="DB2"), "not in DB2"
    assert await store.set_mailbox_database("alice", "DB2", expected="DB1")
    assert await store.set_mailbox_database("bob", "DB1", expected=None)
    assert await store.mailboxes() == {"alice": "DB2", "bob": "DB1"}


def _move_store_beside(store) -> MoveStore:
    """The move store in the same SQLite file or etcd prefix as `store` (an etcd one shares
    its gateway: only an embedded one is closed after)."""
    if isinstance(store, EmbeddedClusterStore):
        return EmbeddedMoveStore(store.path)
    return EtcdMoveStore(store._gateway, cluster=store._prefix.split("/")[2])


async def test_the_directory_entry_says_the_move_the_move_store_made(store):
    """The move store's layout, read by the cluster store as a contract: a real move made
    through `mrs_client.move_store` is what `mailbox_entry` reports, in both engines."""
    assert await store.mailbox_entry("alice") is None
    assert await store.set_mailbox_database("alice", "DB1", expected=None)
    assert await store.set_mailbox_database("bob", "DB1", expected=None)
    # no mover ever ran here: the embedded file has no move tables yet
    assert await store.mailbox_entry("alice") == DirectoryEntry("alice", "DB1", None)

    moves = _move_store_beside(store)
    now = datetime(2026, 11, 23, 9, 0, tzinfo=UTC)
    record = MoveRecord(
        id="3fa2b1c4d5e6", mailboxes=("alice", "carol"), source_db="DB1", target_db="DB2",
        created=now, updated=now,
    )  # fmt: skip
    await moves.create([record])
    assert await store.mailbox_entry("alice") == DirectoryEntry(
        "alice", "DB1", MoveHold("3fa2b1c4d5e6", "DB2")
    )
    assert await store.mailbox_entry("bob") == DirectoryEntry("bob", "DB1", None)
    assert await store.mailbox_entry("carol") is None, "claimed, but not in the directory"

    # step 8 points the directory at the target; completing releases the claim
    assert await store.set_mailbox_database("alice", "DB2", expected="DB1")
    assert (await store.mailbox_entry("alice")).moving == MoveHold("3fa2b1c4d5e6", "DB2")
    lease = await moves.claim(record.id, "w1", 60)
    await moves.save(replace(record, state=MoveState.COMPLETED), now, lease=lease)
    await moves.release(lease)
    assert await store.mailbox_entry("alice") == DirectoryEntry("alice", "DB2", None)
    if isinstance(moves, EmbeddedMoveStore):
        await moves.aclose()


def test_the_cluster_store_does_not_import_the_mover():
    check = (
        "import sys\n"
        "import dag_common.cluster_store.embedded, dag_common.cluster_store.etcd\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'mrs_client'))"
    )
    done = subprocess.run(
        [sys.executable, "-c", check], capture_output=True, text=True, cwd=ROOT, timeout=60
    )
    assert (done.returncode, done.stdout) == (0, "[]\n"), done.stderr


# ---- the transport dumpster's redelivery record ---------------------------------------------

T0 = datetime(2026, 11, 23, 9, 0, tzinfo=UTC)


def _minutes(n: int) -> datetime:
    return T0 + timedelta(minutes=n)


async def _lossy(store, epoch: int, start: int, end: int, *servers: str, now: int = 60):
    """`require_redelivery` for the lossy activation `epoch`, times in minutes past T0."""
    need = RedeliveryNeed(
        epoch, _minutes(start), _minutes(end), servers or ("hub2", "hub1"), _minutes(now)
    )
    return await store.require_redelivery("DB1", need)


async def test_a_lossy_activation_requires_redelivery_once_per_epoch(store):
    assert await store.redelivery("DB1") is None
    first = await _lossy(store, 4, 10, 20)
    assert first == RedeliveryRecord(
        "DB1", (4,), _minutes(10), _minutes(20), ("hub1", "hub2"), (), _minutes(60), None
    )
    assert first.required and await store.redelivery("DB1") == first
    assert (await store.redelivery("DB1")).start.utcoffset() == timedelta(0)
    # the new active asks again at every mount: the record stands as it was
    again = await _lossy(store, 4, 0, 30, "hub3", now=90)
    assert again == first and await store.redelivery("DB1") == first
    assert await store.redelivery("DB2") is None


async def test_a_second_lossy_epoch_widens_the_window_and_asks_every_server_again(store):
    await _lossy(store, 4, 10, 20)
    assert (await store.redelivered("DB1", "hub1", epochs=(4,))).answered == ("hub1",)
    wider = await _lossy(store, 6, 15, 40, "hub1", "hub2", "hub3", now=95)
    assert (wider.epochs, wider.start, wider.end) == ((4, 6), _minutes(10), _minutes(40))
    assert (wider.servers, wider.answered) == (("hub1", "hub2", "hub3"), ())
    assert wider.requested == _minutes(60), "when the first of its epochs required it"
    assert wider.required and await store.redelivery("DB1") == wider
    earlier = await _lossy(store, 7, 5, 12, "hub1")
    assert (earlier.start, earlier.end, earlier.servers) == (_minutes(5), _minutes(40), ("hub1",))


async def test_answers_count_only_for_the_window_asked_and_all_of_them_end_it(store):
    assert await store.redelivered("DB1", "hub1", epochs=(4,)) is None, "nothing required"
    await _lossy(store, 4, 10, 20)
    wider = await _lossy(store, 6, 15, 40)
    # an answer for the narrower window (sent before the second epoch) does not count
    assert await store.redelivered("DB1", "hub1", epochs=(4,)) == wider
    assert await store.redelivered("DB1", "hub9", epochs=(4, 6)) == wider, "not asked"
    one = await store.redelivered("DB1", "hub2", epochs=(4, 6))
    assert (one.servers, one.answered, one.required) == (("hub1",), ("hub2",), True)
    assert await store.redelivered("DB1", "hub2", epochs=(4, 6)) == one, "answered already"
    done = await store.redelivered("DB1", "hub1", epochs=(4, 6))
    assert (done.servers, done.answered, done.ended) == ((), ("hub1", "hub2"), "Success")
    assert not done.required and await store.redelivery("DB1") == done


async def test_every_transport_answering_at_once_is_counted(store):
    hubs = [f"hub{i}" for i in range(6)]
    await _lossy(store, 4, 10, 20, *hubs)
    await asyncio.gather(*(store.redelivered("DB1", h, epochs=(4,)) for h in hubs))
    record = await store.redelivery("DB1")
    assert (record.servers, record.answered, record.ended) == ((), tuple(hubs), "Success")


async def test_a_redelivery_given_up_ends_only_for_its_own_window(store):
    assert await store.end_redelivery("DB1", epochs=(4,), reason="Expired") is None
    await _lossy(store, 4, 10, 20)
    wider = await _lossy(store, 6, 15, 40)
    assert await store.end_redelivery("DB1", epochs=(4,), reason="Expired") == wider
    ended = await store.end_redelivery("DB1", epochs=(4, 6), reason="Expired")
    assert (ended.ended, ended.required, ended.servers) == ("Expired", False, ("hub1", "hub2"))
    assert await store.redelivered("DB1", "hub1", epochs=(4, 6)) == ended, "ended: no answers"
    assert await store.end_redelivery("DB1", epochs=(4, 6), reason="Success") == ended


async def test_after_a_record_ended_a_new_lossy_epoch_starts_a_new_one(store):
    await _lossy(store, 4, 10, 20, "hub1")
    ended = await store.redelivered("DB1", "hub1", epochs=(4,))
    assert ended.ended == "Success"
    assert await _lossy(store, 4, 10, 20, "hub1", now=70) == ended, "its epoch asked again"
    new = await _lossy(store, 9, 50, 55, now=120)
    assert new == RedeliveryRecord(
        "DB1", (9,), _minutes(50), _minutes(55), ("hub1", "hub2"), (), _minutes(120), None
    )
    assert await store.redelivery("DB1") == new
    # with no transport to ask, nothing is to be redelivered
    none = await store.require_redelivery("DB2", RedeliveryNeed(2, T0, T0, (), _minutes(1)))
    assert (none.servers, none.ended) == ((), "Success")


async def test_only_the_active_at_its_epoch_holds_the_lease(store):
    await store.set_active("DB1", "mbx1", expected_epoch=0)
    assert await store.lease("DB1") is None
    assert await store.renew_lease("DB1", "mbx1", 1, 30)
    assert await store.renew_lease("DB1", "mbx1", 1, 30), "renewed"
    assert not await store.renew_lease("DB1", "mbx2", 1, 30), "not the active"
    assert not await store.renew_lease("DB1", "mbx1", 2, 30), "not at that epoch"
    assert not await store.renew_lease("DB2", "mbx1", 1, 30), "no active at all"
    held = await store.lease("DB1")
    assert (held.node, held.epoch) == ("mbx1", 1) and 0 < held.expires_in <= 30


async def test_no_activation_while_another_node_holds_a_live_lease(store):
    await store.set_active("DB1", "mbx1", expected_epoch=0)
    assert await store.renew_lease("DB1", "mbx1", 1, 30)
    with pytest.raises(LeaseHeld, match="mbx1 holds the active's lease") as refused:
        await store.set_active("DB1", "mbx2", expected_epoch=1)
    assert refused.value.holder == "mbx1" and refused.value.expires_in > 0
    record = await store.active("DB1")
    assert (record.node, record.epoch) == ("mbx1", 1), "nothing changed"
    assert [e.epoch for e in await store.history("DB1")] == [1]
    # Released (a switchover): the copy is activated at once, and the old holder is deposed.
    await store.release_lease("DB1", "mbx1", 1)
    assert await store.lease("DB1") is None
    won = await store.set_active("DB1", "mbx2", expected_epoch=1)
    assert (won.node, won.epoch) == ("mbx2", 2)
    assert not await store.renew_lease("DB1", "mbx1", 1, 30)
    assert await store.renew_lease("DB1", "mbx2", 2, 30)


async def test_an_expired_lease_lets_the_activation_through(store):
    await store.set_active("DB1", "mbx1", expected_epoch=0)
    assert await store.renew_lease("DB1", "mbx1", 1, 1)
    await wait_until("the lease to expire", lambda: _expired(store), timeout=15, every=0.1)
    won = await store.set_active("DB1", "mbx2", expected_epoch=1)
    assert (won.node, won.epoch) == ("mbx2", 2)
    assert not await store.renew_lease("DB1", "mbx1", 1, 30), "deposed: no lease again"


async def test_the_same_node_activated_again_renews_at_its_new_epoch(store):
    await store.set_active("DB1", "mbx1", expected_epoch=0)
    assert await store.renew_lease("DB1", "mbx1", 1, 30)
    again = await store.set_active("DB1", "mbx1", expected_epoch=1)
    assert again.epoch == 2
    assert await store.renew_lease("DB1", "mbx1", 2, 30)
    assert (await store.lease("DB1")).epoch == 2


async def _expired(store) -> bool:
    return await store.lease("DB1") is None


def test_an_embedded_lease_from_another_boot_is_over(tmp_path):
    async def scenario():
        store = EmbeddedClusterStore(tmp_path / "cluster.db")
        await store.set_active("DB1", "mbx1", expected_epoch=0)
        assert await store.renew_lease("DB1", "mbx1", 1, 3600)
        store.close()
        rebooted = EmbeddedClusterStore(tmp_path / "cluster.db")
        # The machine started again: its clock began anew.
        rebooted._leases = LeaseClock(rebooted._leases.monotonic, boot="another boot")
        assert await rebooted.lease("DB1") is None
        assert (await rebooted.set_active("DB1", "mbx2", expected_epoch=1)).epoch == 2
        rebooted.close()

    asyncio.run(scenario())


async def test_an_unreachable_etcd_is_a_clear_error():
    s = EtcdClusterStore(EtcdGateway([f"http://127.0.0.1:{free_port()}"], timeout=1), cluster="x")
    with pytest.raises(ClusterStoreError, match="no etcd endpoint answered"):
        await s.active("DB1")
    s.close()


async def test_an_endpoint_answering_an_error_is_passed_over_for_the_next(etcd):
    from aiohttp import web

    async def unavailable(request):
        return web.Response(status=503, text="<html>no quorum</html>")

    app = web.Application()
    app.router.add_post("/{tail:.*}", unavailable)
    runner, url = await serve_app(app)
    s = EtcdClusterStore(EtcdGateway([url, etcd]), cluster=f"t{time.time_ns()}")
    try:
        won = await s.set_active("DB1", "mbx1", expected_epoch=0, start_generation=1)
        assert won is not None and (await s.active("DB1")).node == "mbx1"
        only_bad = EtcdClusterStore(EtcdGateway([url]), cluster="x")
        with pytest.raises(ClusterStoreError, match="HTTP 503"):
            await only_bad.active("DB1")
        only_bad.close()
    finally:
        s.close()
        await runner.cleanup()


async def test_a_store_file_from_before_gets_the_new_columns_and_keeps_its_records(tmp_path):
    import sqlite3

    path = tmp_path / "cluster.db"
    old = sqlite3.connect(path)
    old.executescript(
        "CREATE TABLE active_copy(database TEXT PRIMARY KEY, node TEXT NOT NULL,"
        " epoch INTEGER NOT NULL, last_log_generated INTEGER NOT NULL DEFAULT 0,"
        " updated TEXT NOT NULL);"
        "INSERT INTO active_copy VALUES ('DB1', 'mbx1', 3, 41, '2026-11-01T00:00:00+00:00');"
        "CREATE TABLE stream_history(database TEXT NOT NULL, epoch INTEGER NOT NULL,"
        " node TEXT NOT NULL, start_generation INTEGER NOT NULL, created TEXT NOT NULL,"
        " PRIMARY KEY(database, epoch));"
        "INSERT INTO stream_history VALUES ('DB1', 3, 'mbx1', 12, '2026-11-01T00:00:00+00:00');"
    )
    old.commit()
    old.close()
    first, second = EmbeddedClusterStore(path), EmbeddedClusterStore(path)  # two processes
    record = await second.active("DB1")
    assert (record.node, record.epoch, record.last_log_generated) == ("mbx1", 3, 41)
    assert (record.open_generation, record.change_number_ceiling) == (0, 0)
    [epoch] = await first.history("DB1")
    assert (epoch.epoch, epoch.start_generation, epoch.kept_through) == (3, 12, None)
    # kept before causes were: its time is the one it was created at, the rest unknown
    assert epoch.began == datetime(2026, 11, 1, tzinfo=UTC)
    assert (epoch.cause, epoch.mount_dial, epoch.lost_logs) == (None, None, None)
    assert await first.publish_open_generation("DB1", "mbx1", 3, 42, 900)
    # and the file takes the new fields and the pause from now on
    await first.set_active(
        "DB1", "mbx2", expected_epoch=3, start_generation=50,
        cause=ActivationCause.MANUAL_ACTIVATION, lost_logs=1,
    )  # fmt: skip
    assert [(r.cause, r.lost_logs) for r in await second.history("DB1")] == [
        (None, None), (ActivationCause.MANUAL_ACTIVATION, 1),
    ]  # fmt: skip
    assert await second.pause_failover(_pause())
    assert await first.failover_pause() == _pause()
    required = await first.require_redelivery(
        "DB1", RedeliveryNeed(4, _minutes(1), _minutes(2), ("hub1",), _minutes(3))
    )
    assert await second.redelivery("DB1") == required
    first.close()
    second.close()


def _open_at_once(path, barrier):
    barrier.wait()
    EmbeddedClusterStore(path).close()


def test_node_processes_may_open_a_new_embedded_store_at_the_same_moment(tmp_path):
    # every node of a local cluster starts at once and opens the same new file
    import multiprocessing

    ctx = multiprocessing.get_context("fork")
    for i in range(15):
        barrier = ctx.Barrier(3)
        procs = [
            ctx.Process(target=_open_at_once, args=(tmp_path / f"{i}.db", barrier))
            for _ in range(3)
        ]
        for p in procs:
            p.start()
        for p in procs:
            p.join(timeout=30)
        assert [p.exitcode for p in procs] == [0, 0, 0]
