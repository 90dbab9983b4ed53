"""`lease.hold` over the embedded move store, its leases timed by the test's clock: a resume
after the client running the move was killed waits for the dead client's lease to run out and
then takes the move; one that meets a live holder (it renews) is refused as soon as the
renewal is seen, without waiting out the lease."""

from __future__ import annotations

import asyncio

import pytest

from dag_common.clock import ManualClock
from mrs_client.errors import MoveBusy
from mrs_client.gates import Gates
from mrs_client.lease import LEASE_TTL, hold
from mrs_client.move_store.embedded import EmbeddedMoveStore
from mrs_client.move_store.interface import LeaseLost
from mrs_client.policy import MoveSettings
from tests.mrs_client.fakes import record, settle


async def setup(tmp_path):
    clock = ManualClock()
    store = EmbeddedMoveStore(tmp_path / "cluster.db", monotonic=clock.monotonic)
    move = record()
    await store.create([move])
    return clock, store, move.id


async def advance_until(
    clock: ManualClock, store: EmbeddedMoveStore, task: asyncio.Task, step: float = 0.25
) -> float:
    """Turn the clock until `task` ends, only while no store call is in flight; the seconds
    it took by that clock."""
    start = clock.monotonic()
    while not task.done():
        await settle(store)
        await clock.advance(step)
        assert clock.monotonic() - start < 10 * LEASE_TTL, "never ended"
    return clock.monotonic() - start


async def test_a_resume_waits_for_the_lease_of_a_dead_holder_and_then_runs(tmp_path):
    clock, store, move_id = await setup(tmp_path)
    dead = await store.claim(move_id, "mrs@killed", LEASE_TTL)  # and never renewed
    assert dead is not None
    lines: list[str] = []

    async def resume() -> str:
        async with hold(
            store, move_id, "mrs@resume", clock=clock, wait_for_dead_holder=True,
            notify=lines.append,
        ) as lease:  # fmt: skip
            return lease.worker

    took = await advance_until(clock, store, asyncio.create_task(resume()))
    assert LEASE_TTL - 1 <= took <= LEASE_TTL + 2
    assert lines and "mrs@killed" in lines[0] and "waiting up to 15 s" in lines[0]
    assert await store.holder(move_id) is None  # released at the end of the body
    await store.aclose()


async def test_a_resume_meeting_a_live_holder_is_refused_once_it_renews(tmp_path):
    clock, store, move_id = await setup(tmp_path)
    live = await store.claim(move_id, "mrs serve@host", LEASE_TTL)
    assert live is not None

    async def renewing() -> None:
        while True:
            await clock.sleep(LEASE_TTL / 3)
            assert await store.renew(live, LEASE_TTL)

    keeper = asyncio.create_task(renewing())

    async def resume() -> None:
        async with hold(store, move_id, "mrs@resume", clock=clock, wait_for_dead_holder=True):
            raise AssertionError("ran a move another worker holds")

    attempt = asyncio.create_task(resume())
    took = await advance_until(clock, store, attempt)
    with pytest.raises(MoveBusy, match=r"being run by another worker, mrs serve@host"):
        attempt.result()
    assert took <= LEASE_TTL / 3 + 2  # seen at its first renewal, not after the lease
    keeper.cancel()
    await store.aclose()


async def test_without_waiting_a_held_move_is_refused_at_once(tmp_path):
    clock, store, move_id = await setup(tmp_path)
    assert await store.claim(move_id, "mrs@killed", LEASE_TTL)

    with pytest.raises(MoveBusy, match=r"its lease ends in 15 s unless renewed"):
        async with hold(store, move_id, "mrs@other", clock=clock):
            raise AssertionError("ran a move another worker holds")
    await store.aclose()


async def test_after_a_pause_past_the_lease_no_node_call_is_made(tmp_path):
    """A process paused (SIGSTOP) past its lease: when it runs again, the move's own
    continuation may come before the keeper; its next node call is refused before it is
    made, so nothing is written past the lease."""
    clock, store, move_id = await setup(tmp_path)
    gates = Gates(
        requests=store,
        guarantee=None,
        clock=clock,
        settings=MoveSettings(),
        caller_id="test",
        progress=lambda record, line: None,
    )
    made: list[str] = []

    async def write() -> None:
        made.append("write")

    async with hold(store, move_id, "mrs@paused", clock=clock) as lease:
        gates.lease = lease
        record = await store.get(move_id)
        await gates.node_call(record, "write target items", write)
        clock._elapsed += LEASE_TTL + 1  # paused: the time passed, no task ran meanwhile
        with pytest.raises(LeaseLost, match="its lease ran out"):
            await gates.node_call(record, "write target items", write)
    assert made == ["write"]
    await store.aclose()
