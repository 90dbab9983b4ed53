"""`Switchover` in process, one row per branch: the nodes are a `FakePeers` table the test
changes as time passes on a `ManualClock` (a catch-up deadline of a minute runs in
milliseconds), the cluster store a real embedded store file.  What an operator sees is
checked: the answer or the refusal, the epoch history, and that an old active told to stop
its writes always takes them again when the switchover does not happen.  test_switchover.py
runs the same coordinator over real aiohttp servers; the cluster tests over processes."""

from __future__ import annotations

import pytest

from dag_common.clock import ManualClock
from dag_common.cluster_store.interface import ActivationCause
from dag_common.model import CopyRole, CopyStatus
from replication_node.admin_api import SwitchoverAnswer
from replication_node.cluster.switchover import (
    CATCH_UP_TIMEOUT,
    TARGET_SILENT_ABANDON,
    Switchover,
)
from replication_node.errors import Conflict
from tests.replication_node.fake_peers import FakePeers, config, drive, report, store_with_active


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
async def store(tmp_path, clock):
    store = await store_with_active(tmp_path, clock, generated=6)
    yield store
    store.close()


def running() -> dict:
    """a is the running active; b and c are Healthy, replayed through 5."""
    return {
        "a": report("a", role=CopyRole.ACTIVE, status=CopyStatus.MOUNTED, inspected=6),
        "b": report("b", status=CopyStatus.HEALTHY, inspected=5),
        "c": report("c", status=CopyStatus.HEALTHY, inspected=5),
    }


def switchover(tmp_path, store, peers, clock) -> Switchover:
    cfg = config(tmp_path)
    return Switchover(config=lambda: cfg, cluster_store=store, peers=peers, clock=clock)


async def moves(store) -> list[tuple]:
    return [(r.epoch, r.node, r.cause, r.start_generation) for r in await store.history("DB1")]


UNMOVED = [(1, "a", ActivationCause.FIRST_MOUNT, 1)]


def replays(peers: FakePeers, node: str, **changes) -> None:
    """The copy on `node` moves on: its next report says `changes`."""
    now = peers.reports[node]
    assert now is not None
    peers.reports[node] = now.model_copy(update=changes)


async def test_the_role_moves_once_the_target_replayed_the_last_generation(tmp_path, store, clock):
    peers = FakePeers(running())

    def catch_up(now: float) -> None:  # the old active closed generation 7; b replays it
        if now >= 2.0:
            replays(peers, "b", last_log_replayed=7, last_log_inspected=7)

    result = await drive(
        clock, switchover(tmp_path, store, peers, clock).switch("DB1", "b"), on_tick=catch_up
    )
    assert result == SwitchoverAnswer(
        database="DB1", node="b", epoch=2, previous_node="a", last_log_generated=7
    )
    assert (result.lost_logs, result.lost_open_log) == (0, False)
    assert await moves(store) == [*UNMOVED, (2, "b", ActivationCause.SWITCHOVER, 8)]
    assert clock.monotonic() >= 2.0
    assert ("quiesce", "a", "b") in peers.calls and "unquiesce" not in peers.names()
    assert peers.names()[-1] == "reconcile_all"


REFUSED = {
    "target Suspended": ({"b": report("b", status=CopyStatus.SUSPENDED)}, "its copy is Passive "
                         "Suspended"),
    "target DisconnectedAndHealthy": (
        {"b": report("b", status=CopyStatus.DISCONNECTED_AND_HEALTHY)},
        "its copy is Passive DisconnectedAndHealthy",
    ),
    "target unreachable": ({"b": None}, "its copy is unreachable"),
    "target activation-suspended": (
        {"b": report("b", status=CopyStatus.HEALTHY, activation_suspended=True)},
        "the copy on b is activation-suspended",
    ),
}  # fmt: skip


@pytest.mark.parametrize(("copies", "words"), REFUSED.values(), ids=REFUSED.keys())
async def test_an_unfit_target_is_refused_before_the_active_stops_its_writes(
    tmp_path, store, clock, copies, words
):
    peers = FakePeers({**running(), **copies})
    with pytest.raises(Conflict, match=f"cannot switch DB1 over to b: .*{words}"):
        await drive(clock, switchover(tmp_path, store, peers, clock).switch("DB1", "b"))
    assert peers.names() == ["copy_report"], "the active was never quiesced"
    assert await moves(store) == UNMOVED


async def test_an_active_that_does_not_stop_its_writes_ends_it(tmp_path, store, clock):
    peers = FakePeers(running())
    peers.quiesce_answer = None
    with pytest.raises(Conflict, match="the active copy on a did not stop its writes; if it is"):
        await drive(clock, switchover(tmp_path, store, peers, clock).switch("DB1", "b"))
    assert await moves(store) == UNMOVED


ABANDONED = {
    # (what happens to b as time passes, the sentence, the seconds it took at least/most)
    "target never catches up": (
        lambda peers, now: None,
        r"b did not replay generation 7 \(Healthy, replayed 5\); a takes writes again",
        CATCH_UP_TIMEOUT,
        CATCH_UP_TIMEOUT + 1,
    ),
    "target silent": (
        lambda peers, now: peers.reports.update(b=None) if now >= 1.0 else None,
        r"b did not replay generation 7 \(not answering for 5s\); a takes writes again",
        1.0 + TARGET_SILENT_ABANDON,
        1.0 + TARGET_SILENT_ABANDON + 1,
    ),
    "target fails": (
        lambda peers, now: replays(peers, "b", status=CopyStatus.FAILED) if now >= 3 else None,
        r"b did not replay generation 7 \(Failed, replayed 5\)",
        3.0,
        4.0,
    ),
}


@pytest.mark.parametrize(
    ("world", "words", "earliest", "latest"), ABANDONED.values(), ids=ABANDONED.keys()
)
async def test_an_abandoned_switchover_gives_the_old_active_its_writes_back(
    tmp_path, store, clock, world, words, earliest, latest
):
    peers = FakePeers(running())
    with pytest.raises(Conflict, match=f"switchover of DB1 abandoned: {words}"):
        await drive(
            clock,
            switchover(tmp_path, store, peers, clock).switch("DB1", "b"),
            on_tick=lambda now: world(peers, now),
        )
    assert earliest <= clock.monotonic() <= latest, clock.monotonic()
    assert peers.names()[-1] == "unquiesce" and ("unquiesce", "a") in peers.calls
    assert "reconcile_all" not in peers.names()
    assert await moves(store) == UNMOVED


async def test_a_role_changed_meanwhile_ends_the_switchover(tmp_path, store, clock):
    peers = FakePeers(running())

    async def c_activated_meanwhile(call: str) -> None:
        if call == "quiesce":
            await store.set_active("DB1", "c", expected_epoch=1, start_generation=7)
            replays(peers, "b", last_log_replayed=7)

    peers.on_call = c_activated_meanwhile
    with pytest.raises(Conflict, match="the active copy of DB1 changed meanwhile"):
        await drive(clock, switchover(tmp_path, store, peers, clock).switch("DB1", "b"))
    assert ("unquiesce", "a") in peers.calls
    assert [(e[0], e[1]) for e in await moves(store)] == [(1, "a"), (2, "c")]
