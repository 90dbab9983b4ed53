"""Pushed progress and waiting answers, in process: the service over fake nodes that serve
the node's own `GET /v1/status/watch` handler (or scripted lines), on a ManualClock that the
tests never advance unless they say so: an answer that comes, comes from a pushed change."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest
from google.protobuf.duration_pb2 import Duration

from dag_common._generated.dataguarantee.v1 import data_guarantee_pb2 as pb
from dag_common.status_watch import Snapshot, encode
from guarantee_api.servicer import deadline_margin
from tests.cluster_harness import wait_until
from tests.guarantee_api.fake_nodes import FakeNodes
from tests.guarantee_api.helpers import (
    AUTH,
    TOKEN,
    Running,
    healthy_cluster,
    start_service,
)

NODES = ("mbx1", "mbx2", "mbx3")
WATCH = {"watch_heartbeat": "100ms", "watch_silence": "400ms", "max_wait": "60s"}


@pytest.fixture
async def live_nodes() -> AsyncIterator[FakeNodes]:
    fake = FakeNodes(["mbx1", "mbx2", "mbx3"], TOKEN)
    fake.set(healthy_cluster())
    for node in fake.nodes.values():
        node.watch = "live"
    await fake.start()
    yield fake
    await fake.close()


async def start(nodes: FakeNodes, tmp_path: Path, **api: object) -> Running:
    run = await start_service(nodes, tmp_path, **{**WATCH, **api})
    view = run.service.view
    try:
        await wait_until("every stream live", lambda: all(view.streaming(n) for n in nodes.nodes))
    except BaseException:  # the caller never gets the service to stop: stop it here
        await run.channel.close()
        await run.service.stop(grace=0)
        raise
    return run


@pytest.fixture
async def running(live_nodes: FakeNodes, tmp_path: Path) -> AsyncIterator[Running]:
    run = await start(live_nodes, tmp_path)
    yield run
    await run.channel.close()
    await run.service.stop(grace=0)


def wait(seconds: float) -> Duration:
    d = Duration()
    d.FromNanoseconds(int(seconds * 1e9))
    return d


def flush(generation: int, **kw) -> pb.CheckReplicationFlushRequest:
    return pb.CheckReplicationFlushRequest(
        database="DB1", caller_id="mover-1", lsn=pb.Lsn(generation=generation), **kw
    )


async def test_a_waiting_flush_is_answered_by_the_pushed_change_without_a_poll(live_nodes, running):
    polls = {n: node.polls for n, node in live_nodes.nodes.items()}
    call = asyncio.ensure_future(
        running.stub.CheckReplicationFlush(flush(101, wait=wait(30)), metadata=AUTH)
    )
    await asyncio.sleep(0.2)
    assert not call.done(), "replayed through 100: it waits"
    live_nodes.set(healthy_cluster(replayed=101))  # mbx2 replays generation 101
    answer = await asyncio.wait_for(call, 10)
    assert answer.status == pb.SATISFIED, answer.reason
    assert answer.HasField("waited") and answer.waited.ToTimedelta().total_seconds() < 30
    # No poll round ran (the clock never moved) and no node was polled: the change came
    # pushed; the stream replaced the poll while live.
    assert running.service.view.rounds_completed == 1
    assert {n: node.polls for n, node in live_nodes.nodes.items()} == polls


async def test_a_wait_ends_with_the_answer_of_that_moment(running):
    call = asyncio.ensure_future(
        running.stub.CheckReplicationFlush(flush(101, wait=wait(20)), metadata=AUTH)
    )
    view, clock = running.service.view, running.clock
    # The question has reached the service and waits on DB1 (its wake-up is registered).
    await wait_until("the question waiting", lambda: "DB1" in view._changed)
    for _ in range(10):  # 20 s of the service's clock, a heartbeat heard at each step
        await wait_until(
            "a heartbeat at this step",
            lambda: all(view.problem("DB1", n, clock.monotonic() + 2.5) is None for n in NODES),
        )
        await clock.advance(2)
    answer = await asyncio.wait_for(call, 10)
    assert answer.status == pb.NOT_SATISFIED
    assert "needs generation 101" in str(answer.copies), answer
    assert answer.waited.ToTimedelta().total_seconds() == pytest.approx(20, abs=0.5)


async def test_without_a_wait_the_answer_is_immediate_and_says_no_wait(running):
    answer = await running.stub.CheckReplicationFlush(flush(101), metadata=AUTH)
    assert answer.status == pb.NOT_SATISFIED and not answer.HasField("waited")
    satisfied = await running.stub.CheckReplicationFlush(flush(100, wait=wait(30)), metadata=AUTH)
    assert satisfied.status == pb.SATISFIED
    assert satisfied.waited.ToTimedelta().total_seconds() < 1


async def test_a_negative_wait_is_refused_and_a_long_one_capped_and_said(running):
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await running.stub.CheckReplicationFlush(flush(101, wait=wait(-1)), metadata=AUTH)
    assert err.value.code() is grpc.StatusCode.INVALID_ARGUMENT
    assert "wait must not be negative" in err.value.details()
    call = asyncio.ensure_future(
        running.stub.CheckReplicationHealth(
            pb.CheckReplicationHealthRequest(database="DB1", caller_id="c", wait=wait(86400 * 365)),
            metadata=AUTH,
        )
    )
    answer = await asyncio.wait_for(call, 10)  # healthy: Satisfied at once, cap or not
    assert answer.status == pb.SATISFIED
    assert "capped at 60s" in answer.reason, answer.reason
    # A wait longer than the call's deadline is cut to it: the answer comes before (a
    # tenth of the call's time kept back, 0.4 s here: room for a loaded machine).
    answer = await running.stub.CheckReplicationFlush(
        flush(101, wait=wait(30)), metadata=AUTH, timeout=4.0
    )
    assert answer.status == pb.NOT_SATISFIED
    assert "cut to the call's deadline" in answer.reason, answer.reason


async def test_a_stream_that_sends_garbage_makes_its_node_stale_never_healthy(live_nodes, tmp_path):
    mbx2 = live_nodes["mbx2"]
    mbx2.watch = "script"
    go = asyncio.Event()
    mbx2.script = [encode(Snapshot(healthy_cluster()["mbx2"])), go, b'{"kind": "copies", "cop\n']
    run = await start(live_nodes, tmp_path)
    try:
        view = run.service.view
        assert view.problem("DB1", "mbx2", run.clock.monotonic()) is None  # live, healthy
        go.set()
        await wait_until(
            "mbx2 counted unreachable after its garbage",
            lambda: "status stream sent" in (view.problem("DB1", "mbx2", 0.0) or ""),
        )
        assert not view.streaming("mbx2")
        assert "not JSON" in view.problem("DB1", "mbx2", 0.0)
        answer = await run.stub.CheckReplicationFlush(
            flush(100, constraint=pb.CONSTRAINT_ALL_COPIES), metadata=AUTH
        )
        assert answer.status != pb.SATISFIED
        verdict = next(c for c in answer.copies if c.node == "mbx2")
        assert not verdict.meets and "status stream sent" in str(verdict.checks)
    finally:
        await run.channel.close()
        await run.service.stop(grace=0)


async def test_a_stream_that_goes_silent_makes_its_node_stale(live_nodes, tmp_path):
    mbx3 = live_nodes["mbx3"]
    mbx3.watch = "script"
    mbx3.script = [encode(Snapshot(healthy_cluster()["mbx3"]))]  # then not even a heartbeat
    run = await start_service(live_nodes, tmp_path, **WATCH)
    try:
        view = run.service.view
        await wait_until(
            "mbx3 counted unreachable after 400 ms of silence",
            lambda: "silent for 0.4s" in (view.problem("DB1", "mbx3", 0.0) or ""),
        )
        answer = await run.stub.CheckReplicationHealth(
            pb.CheckReplicationHealthRequest(
                database="DB1", caller_id="c", constraint=pb.CONSTRAINT_ALL_COPIES
            ),
            metadata=AUTH,
        )
        assert answer.status != pb.SATISFIED
        # The poll takes the node back at the next round (its stream not live), as a
        # fallback: then it is judged by the poll.
        await run.next_round()
        assert view.problem("DB1", "mbx3", run.clock.monotonic()) is None
    finally:
        await run.channel.close()
        await run.service.stop(grace=0)


async def test_heartbeats_keep_a_quiet_node_fresh_and_a_dead_one_is_noticed(live_nodes, running):
    view = running.service.view
    # Long after the staleness limit by the poll's measure, a heartbeat makes it fresh...
    await running.clock.advance(3600)
    assert view.problem("DB1", "mbx2", running.clock.monotonic()) is not None
    await wait_until(
        "a heartbeat", lambda: view.problem("DB1", "mbx2", running.clock.monotonic()) is None
    )
    # ...and a node that dies is counted out as soon as its stream breaks.
    await live_nodes["mbx2"].stop()
    await wait_until("mbx2 unreachable", lambda: not view.streaming("mbx2"))
    assert view.problem("DB1", "mbx2", running.clock.monotonic()) is not None


@pytest.mark.parametrize(
    ("remaining", "kept"), [(0.5, 0.1), (1.0, 0.1), (4.0, 0.4), (10.0, 1.0), (600.0, 1.0)]
)
def test_the_margin_kept_back_from_a_deadline_is_a_tenth_within_bounds(remaining, kept):
    assert deadline_margin(remaining) == pytest.approx(kept)
