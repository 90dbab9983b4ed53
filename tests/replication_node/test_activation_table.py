"""`Activation` in process, one row per branch: the other nodes are a `FakePeers` table, the
cluster store a real embedded store file whose leases run on a `ManualClock`, so a lease
waited out for seconds runs in milliseconds.  Each row checks what an operator sees: the
answer (or the refusal and its sentence), the epoch history in the cluster store, and what
was asked of the nodes.  The cluster tests (test_cluster_e2e, test_lossless_e2e, ...) stay
for what only processes show."""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass

import pytest

from dag_common.clock import ManualClock
from dag_common.cluster_store.interface import ActivationCause
from dag_common.model import AutoDatabaseMountDial, CopyRole, CopyStatus, Position
from replication_node.admin_api import ActivationAnswer, SwitchoverAnswer
from replication_node.cluster.activation import Activation
from replication_node.cluster.peers import BlockBufferKept, LastLogsCopied
from replication_node.errors import BadRequest, Conflict, LeaseHeld, MountRefused, NotFound
from replication_node.log.logfile import HEADER_SIZE
from tests.replication_node.fake_peers import (
    TTL,
    FakePeers,
    config,
    drive,
    lost_active,
    report,
    store_with_active,
)

Dial = AutoDatabaseMountDial


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
async def store(tmp_path, clock):
    store = await store_with_active(tmp_path, clock)
    yield store
    store.close()


def activation(tmp_path, store, peers, clock, **defaults) -> Activation:
    cfg = config(tmp_path, **defaults)
    return Activation(config=lambda: cfg, cluster_store=store, peers=peers, clock=clock)


async def epochs(store) -> list[tuple]:
    return [
        (r.epoch, r.node, r.cause, r.mount_dial, r.lost_logs, r.start_generation, r.kept_through)
        for r in await store.history("DB1")
    ]


FIRST = (1, "a", ActivationCause.FIRST_MOUNT, None, None, 1, None)


# ---- refusals: each says why, and changes nothing ---------------------------------------


@dataclass(frozen=True)
class Refusal:
    copies: dict  # changes to lost_active()'s reports
    node: str
    error: type[Exception]
    words: str


REFUSALS = {
    "the old active still runs": Refusal(
        {"a": report("a", role=CopyRole.ACTIVE, status=CopyStatus.MOUNTED)},
        "b",
        Conflict,
        "the active copy on a is running; move it with a switchover",
    ),
    "the copy failed": Refusal(
        {"b": report("b", status=CopyStatus.FAILED, error="disk gone")},
        "b",
        Conflict,
        "the copy on b is Failed: disk gone",
    ),
    "the copy is suspended": Refusal(
        {"b": report("b", status=CopyStatus.SUSPENDED)},
        "b",
        Conflict,
        "the copy on b is Suspended",
    ),
    "the copy is seeding": Refusal(
        {"b": report("b", status=CopyStatus.SEEDING)}, "b", Conflict, "the copy on b is Seeding"
    ),
    "the copy is activation-suspended": Refusal(
        {"b": report("b", activation_suspended=True, note="activation suspended: patching")},
        "b",
        Conflict,
        "the copy on b is activation-suspended: patching; resume it first "
        "(replication-node db resume DB1 --node b --activation-only)",
    ),
    "the copy does not answer": Refusal({"b": None}, "b", Conflict, "the copy on b cannot be"),
    "the copy is already the active": Refusal({}, "a", Conflict, "the copy on a is already"),
    "no copy on that node": Refusal({}, "z", BadRequest, "DB1 has no copy on 'z'"),
}


@pytest.mark.parametrize("row", REFUSALS.values(), ids=REFUSALS.keys())
async def test_a_refused_activation_says_why_and_changes_nothing(tmp_path, store, clock, row):
    peers = FakePeers({**lost_active(), **row.copies})
    with pytest.raises(row.error) as refused:
        await drive(clock, activation(tmp_path, store, peers, clock).activate("DB1", row.node))
    assert row.words in str(refused.value)
    assert await epochs(store) == [FIRST], "the role did not move"
    assert {"copy_last_logs", "keep_block_buffer", "reconcile_all"}.isdisjoint(peers.names())


async def test_an_unknown_database_is_not_found(tmp_path, store, clock):
    peers = FakePeers(lost_active())
    with pytest.raises(NotFound, match="no database 'DB9'"):
        await activation(tmp_path, store, peers, clock).activate("DB9", "b")
    assert peers.calls == []


async def test_an_activation_suspended_copy_is_refused_before_the_old_active_is_asked(
    tmp_path, store, clock
):
    """Its last logs are not held for a copy that will not mount."""
    old = report("a", role=CopyRole.ACTIVE, status=CopyStatus.DISMOUNTED)
    barred = report("b", activation_suspended=True)
    peers = FakePeers({**lost_active(), "a": old, "b": barred})
    with pytest.raises(Conflict, match="activation-suspended"):
        await drive(clock, activation(tmp_path, store, peers, clock).activate("DB1", "b"))
    assert peers.names() == ["copy_reports"]


# ---- AutoDatabaseMountDial: what is at risk, and what the dial allows ---------------------


@dataclass(frozen=True)
class DialRow:
    dial: Dial
    inspected: int  # what b has inspected (the store's LastLogGenerated is 10)
    open_generation: int  # announced in the store as holding commits (0: none)
    lost: int | None  # None: refused (MountRefused, with these logs)
    refused_lost: int = 0
    lost_open_log: bool = False
    words: str = ""


DIALS = {
    "Lossless, nothing at risk": DialRow(Dial.LOSSLESS, 10, 0, 0, words="0 log(s) lost"),
    "Lossless, the open log holds commits": DialRow(
        Dial.LOSSLESS,
        10,
        11,
        None,
        1,
        True,
        "1 log(s) lost: generation 11, the open log E00.log with acknowledged commits (count "
        "unknown: a is unreachable) (inspected through 10 on b): more than Lossless allows (0)",
    ),
    "GoodAvailability, 3 closed logs lost": DialRow(
        Dial.GOOD_AVAILABILITY, 7, 0, 3, words="3 log(s) lost: generations 8-10"
    ),
    "GoodAvailability, 4 logs lost": DialRow(
        Dial.GOOD_AVAILABILITY, 7, 11, None, 4, True, "more than GoodAvailability allows (3)"
    ),
    "BestAvailability, 6 logs lost with the open one": DialRow(
        Dial.BEST_AVAILABILITY, 5, 11, 6, lost_open_log=True, words="11 being the open log"
    ),
    "BestAvailability, 7 logs lost": DialRow(
        Dial.BEST_AVAILABILITY, 3, 0, None, 7, False, "more than BestAvailability allows (6)"
    ),
}


@pytest.mark.parametrize("row", DIALS.values(), ids=DIALS.keys())
async def test_the_dial_bounds_the_logs_an_activation_loses(tmp_path, clock, row):
    store = await store_with_active(tmp_path, clock, open_generation=row.open_generation)
    peers = FakePeers({**lost_active(), "b": report("b", inspected=row.inspected)})
    act = activation(tmp_path, store, peers, clock, auto_database_mount_dial=str(row.dial))
    try:
        if row.lost is None:
            with pytest.raises(MountRefused) as refused:
                await drive(clock, act.activate("DB1", "b"))
            assert refused.value.details == {
                "lost_logs": row.refused_lost,
                "lost_open_log": row.lost_open_log,
                "lost_commits_at_least": None,
                "mount_dial": str(row.dial),
            }
            assert row.words in str(refused.value)
            assert await epochs(store) == [FIRST]
            assert "reconcile_all" not in peers.names()
            return
        result = await drive(clock, act.activate("DB1", "b"))
        assert (result.lost_logs, result.lost_open_log) == (row.lost, row.lost_open_log)
        assert row.words in result.reason
        assert await epochs(store) == [
            FIRST,
            (
                2,
                "b",
                ActivationCause.MANUAL_ACTIVATION,
                row.dial,
                row.lost,
                row.inspected + 1,
                None,
            ),
        ]
        assert peers.names()[-1] == "reconcile_all"
    finally:
        store.close()


async def test_an_operators_dial_overrides_the_databases_for_one_call(tmp_path, store, clock):
    peers = FakePeers({**lost_active(), "b": report("b", inspected=9)})
    act = activation(tmp_path, store, peers, clock, auto_database_mount_dial="Lossless")
    with pytest.raises(MountRefused, match="more than Lossless allows"):
        await drive(clock, act.activate("DB1", "b"))
    done = await drive(clock, act.activate("DB1", "b", dial_override=Dial.GOOD_AVAILABILITY))
    assert done.lost_logs == 1
    assert (await epochs(store))[-1][3] == Dial.GOOD_AVAILABILITY


async def test_a_generation_a_copy_heard_of_counts_though_the_store_missed_it(
    tmp_path, store, clock
):
    """The store's LastLogGenerated may miss the last roll; c heard of 12 and of the open
    log 13 with 4 commits: b loses 3, counted from what c heard."""
    heard = report("c", inspected=9, generated=13, open_commits=4)
    peers = FakePeers({**lost_active(), "c": heard})
    result = await drive(clock, activation(tmp_path, store, peers, clock).activate("DB1", "b"))
    assert (result.lost_logs, result.lost_open_log, result.lost_commits_at_least) == (3, True, 4)
    assert "with at least 4 acknowledged commit(s)" in result.reason


async def test_the_answer_of_a_won_activation(tmp_path, store, clock):
    peers = FakePeers(lost_active())
    result = await drive(clock, activation(tmp_path, store, peers, clock).activate("DB1", "b"))
    assert result == ActivationAnswer(
        database="DB1",
        node="b",
        epoch=2,
        previous_node="a",
        cause=ActivationCause.MANUAL_ACTIVATION,
        lost_logs=0,
        lost_open_log=False,
        lost_commits_at_least=None,
        kept_open_log=None,
        last_logs=None,
        reason="0 log(s) lost (b has inspected through generation 10; the highest holding "
        "acknowledged commits is 10): within the 6 BestAvailability allows",
    )
    assert (await store.active("DB1")).node == "b"
    assert peers.names() == ["copy_reports", "reconcile_all"]


# ---- the old active's lease --------------------------------------------------------------


async def test_a_dead_actives_lease_is_waited_out_on_the_clock(tmp_path, store, clock):
    await store.renew_lease("DB1", "a", 1, TTL)  # then a dies: nobody renews
    peers = FakePeers(lost_active())
    act = activation(tmp_path, store, peers, clock)
    result = await drive(clock, act.activate("DB1", "b", lease_wait=TTL * 1.5))
    assert result.epoch == 2
    assert TTL <= clock.monotonic() < TTL * 1.5, "it waited the lease out, no longer"
    assert peers.names() == ["copy_reports", "copy_reports", "reconcile_all"], "asked again"


async def test_a_lease_still_renewed_is_refused_after_the_wait(tmp_path, store, clock):
    """An active that renews its lease is alive: it may still acknowledge writes."""
    await store.renew_lease("DB1", "a", 1, TTL)
    act = activation(tmp_path, store, FakePeers(lost_active()), clock)

    async def alive() -> None:  # a renews every third of its TTL, as an active does
        while True:
            await clock.sleep(TTL / 3)
            await store.renew_lease("DB1", "a", 1, TTL)

    renewing = asyncio.create_task(alive())
    try:
        with pytest.raises(LeaseHeld, match="a holds the active's lease"):
            await drive(clock, act.activate("DB1", "b", lease_wait=TTL * 1.5), sleepers=2)
    finally:
        renewing.cancel()
    assert clock.monotonic() >= TTL * 1.5
    assert await epochs(store) == [FIRST]


async def test_without_a_wait_a_live_lease_refuses_at_once(tmp_path, store, clock):
    """The failover monitor's activation waits for nothing: it asks again next pass."""
    await store.renew_lease("DB1", "a", 1, TTL)
    act = activation(tmp_path, store, FakePeers(lost_active()), clock)
    with pytest.raises(LeaseHeld):
        await drive(clock, act.activate("DB1", "b"))
    assert clock.monotonic() == 0.0
    assert await epochs(store) == [FIRST]


# ---- the compare-and-set on the epoch ----------------------------------------------------


async def test_two_activations_at_once_exactly_one_wins(tmp_path, store, clock):
    peers = FakePeers({**lost_active(), "c": report("c")})
    act = activation(tmp_path, store, peers, clock)
    answers = await asyncio.gather(
        act.activate("DB1", "b"), act.activate("DB1", "c"), return_exceptions=True
    )
    won = [a for a in answers if isinstance(a, ActivationAnswer)]
    lost = [a for a in answers if isinstance(a, Conflict)]
    assert len(won) == 1 and len(lost) == 1, answers
    assert "changed meanwhile; nothing was done" in str(lost[0])
    assert [(e[0], e[1]) for e in await epochs(store)] == [(1, "a"), (2, won[0].node)]


async def test_an_activation_that_lost_the_race_changes_nothing(tmp_path, store, clock):
    peers = FakePeers(lost_active())

    async def c_wins_meanwhile(call: str) -> None:
        if call == "copy_reports" and (await store.active("DB1")).node == "a":
            await store.set_active("DB1", "c", expected_epoch=1, start_generation=10)

    peers.on_call = c_wins_meanwhile
    with pytest.raises(Conflict, match="the active copy of DB1 changed meanwhile"):
        await drive(clock, activation(tmp_path, store, peers, clock).activate("DB1", "b"))
    assert [(e[0], e[1]) for e in await epochs(store)] == [(1, "a"), (2, "c")]
    assert "reconcile_all" not in peers.names()


# ---- Attempt Copy Last Logs --------------------------------------------------------------


def back_after_a_crash() -> dict:
    """a answers, its copy not mounted (back after a crash, or failed on its disk)."""
    return {**lost_active(), "a": report("a", role=CopyRole.ACTIVE, status=CopyStatus.DISMOUNTED)}


async def test_the_last_logs_are_copied_before_the_loss_is_counted(tmp_path, clock):
    store = await store_with_active(tmp_path, clock, open_generation=11)
    peers = FakePeers(back_after_a_crash())
    peers.last_logs = LastLogsCopied(source="a", closed_through=10, open_log_generation=11)
    peers.last_logs_bring = {"b": report("b", inspected=11)}
    act = activation(tmp_path, store, peers, clock, auto_database_mount_dial="Lossless")
    result = await drive(clock, act.activate("DB1", "b"))
    said = (
        "last logs copied from a: closed generations through 10, and the open log E00.log as "
        "generation 11"
    )
    assert result.last_logs == said and result.reason.startswith(said + "; 0 log(s) lost")
    assert result.lost_logs == 0
    assert (await epochs(store))[-1][5] == 12, "the new stream starts after the kept open log"
    assert peers.names() == ["copy_reports", "copy_last_logs", "copy_reports", "reconcile_all"]
    store.close()


async def test_last_logs_that_cannot_be_copied_are_said_and_counted_lost(tmp_path, clock):
    store = await store_with_active(tmp_path, clock, open_generation=11)
    peers = FakePeers(back_after_a_crash())
    peers.last_logs = LastLogsCopied(failure="HTTP 409: the copy of DB1 on b is not running")
    result = await drive(clock, activation(tmp_path, store, peers, clock).activate("DB1", "b"))
    assert result.last_logs == (
        "copying the last logs failed (HTTP 409: the copy of DB1 on b is not running)"
    )
    assert (result.lost_logs, result.lost_open_log) == (1, True)
    store.close()


async def test_an_empty_open_log_is_said_so(tmp_path, store, clock):
    peers = FakePeers(back_after_a_crash())
    peers.last_logs = LastLogsCopied(source="a", closed_through=10)
    result = await drive(clock, activation(tmp_path, store, peers, clock).activate("DB1", "b"))
    assert result.last_logs == (
        "last logs copied from a: closed generations through 10 (its open log held no transaction)"
    )


async def test_no_last_logs_are_asked_of_a_node_that_does_not_answer(tmp_path, store, clock):
    peers = FakePeers(lost_active())
    await drive(clock, activation(tmp_path, store, peers, clock).activate("DB1", "b"))
    assert "copy_last_logs" not in peers.names()


# ---- the block-mode buffer ---------------------------------------------------------------


def buffering(node: str, *, through: int = 5000, inspected: int = 10) -> dict:
    return {node: report(node, inspected=inspected, block=Position(inspected + 1, through))}


async def test_the_block_mode_buffer_is_kept_and_recorded_in_the_epoch(tmp_path, clock):
    """Without synchronous copies the open log is counted lost (the dial allows it), but
    what the buffer held survives: the epoch records through which byte."""
    store = await store_with_active(tmp_path, clock, open_generation=11)
    peers = FakePeers({**lost_active(), **buffering("b")})
    peers.buffer = BlockBufferKept(generation=11, kept_through=4800)
    peers.buffer_brings = {"b": report("b", inspected=11)}
    result = await drive(clock, activation(tmp_path, store, peers, clock).activate("DB1", "b"))
    said = "its block-mode buffer kept as generation 11 through byte 4800"
    assert result.kept_open_log == Position(11, 4800)
    assert result.last_logs == said and result.reason.startswith(said + "; 1 log(s) lost")
    assert (result.lost_logs, result.lost_open_log) == (1, True)
    assert (await epochs(store))[-1][4:] == (1, 12, 4800)
    assert peers.names() == ["copy_reports", "keep_block_buffer", "copy_report", "reconcile_all"]
    store.close()


async def test_a_buffer_holding_only_the_header_is_not_asked_for(tmp_path, store, clock):
    peers = FakePeers({**lost_active(), **buffering("b", through=HEADER_SIZE)})
    result = await drive(clock, activation(tmp_path, store, peers, clock).activate("DB1", "b"))
    assert result.kept_open_log is None and "keep_block_buffer" not in peers.names()


async def test_with_a_synchronous_copy_its_buffer_covers_the_open_log_under_lossless(
    tmp_path, clock
):
    store = await store_with_active(tmp_path, clock, open_generation=11)
    peers = FakePeers({**lost_active(), **buffering("b")})
    peers.buffer = BlockBufferKept(generation=11, kept_through=5000)
    peers.buffer_brings = {"b": report("b", inspected=11)}
    act = activation(
        tmp_path,
        store,
        peers,
        clock,
        auto_database_mount_dial="Lossless",
        synchronous_copies=1,
    )
    result = await drive(clock, act.activate("DB1", "b"))
    assert (result.lost_logs, result.lost_open_log) == (0, False)
    assert "every acknowledged commit was held by 1 synchronous cop(ies)" in result.reason
    assert (await epochs(store))[-1][4:] == (0, 12, 5000)
    store.close()


async def test_a_covering_buffer_that_is_not_kept_refuses_the_activation(tmp_path, clock):
    store = await store_with_active(tmp_path, clock, open_generation=11)
    peers = FakePeers({**lost_active(), **buffering("b")})
    peers.buffer = BlockBufferKept(failure="HTTP 409: the block-mode buffer cannot be kept")
    act = activation(
        tmp_path,
        store,
        peers,
        clock,
        auto_database_mount_dial="Lossless",
        synchronous_copies=1,
    )
    with pytest.raises(Conflict, match="was counted as kept, and was not"):
        await drive(clock, act.activate("DB1", "b"))
    assert await epochs(store) == [FIRST]
    assert "reconcile_all" not in peers.names()
    store.close()


# ---- the HTTP answer ---------------------------------------------------------------------


def test_the_routes_answer_the_documented_json_of_a_result():
    """`POST …/activate` and `…/switchover` answer the fields operators script against."""
    result = ActivationAnswer(
        database="DB1",
        node="b",
        epoch=2,
        previous_node="a",
        cause=ActivationCause.MANUAL_ACTIVATION,
        lost_logs=1,
        lost_open_log=True,
        lost_commits_at_least=3,
        kept_open_log=Position(11, 4800),
        last_logs="its block-mode buffer kept as generation 11 through byte 4800",
        reason="why",
    )
    assert json.loads(result.model_dump_json()) == {
        "database": "DB1",
        "node": "b",
        "epoch": 2,
        "previous_node": "a",
        "cause": "ManualActivation",
        "lost_logs": 1,
        "lost_open_log": True,
        "lost_commits_at_least": 3,
        "kept_open_log": {"generation": 11, "through_byte": 4800},
        "last_logs": "its block-mode buffer kept as generation 11 through byte 4800",
        "reason": "why",
    }
    switched = SwitchoverAnswer(
        database="DB1", node="b", epoch=3, previous_node="a", last_log_generated=7
    )
    assert json.loads(switched.model_dump_json()) == {
        "database": "DB1",
        "node": "b",
        "epoch": 3,
        "previous_node": "a",
        "last_log_generated": 7,
        "lost_logs": 0,
        "lost_open_log": False,
    }
