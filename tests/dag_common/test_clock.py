"""The injected clock's one wait for a time or a wake-up (dag_common/clock.py)."""

from __future__ import annotations

import asyncio

from dag_common.clock import ManualClock, sleep_unless


async def sleeping(clock: ManualClock) -> None:
    """Until a task sleeps on `clock`."""
    while not clock.pending_sleeps():
        await asyncio.sleep(0)


async def test_a_wait_ends_at_its_time_on_the_clock_when_nothing_wakes_it():
    clock, event = ManualClock(), asyncio.Event()
    waiting = asyncio.create_task(sleep_unless(clock, 30.0, event))
    await sleeping(clock)
    await clock.advance(29.0)
    assert not waiting.done()
    await clock.advance(1.0)
    assert await waiting is False
    assert clock.pending_sleeps() == [], "nothing left sleeping"


async def test_a_wake_up_ends_the_wait_before_its_time():
    clock, event = ManualClock(), asyncio.Event()
    waiting = asyncio.create_task(sleep_unless(clock, 30.0, event))
    await sleeping(clock)
    event.set()
    assert await asyncio.wait_for(waiting, 5) is True
    assert clock.pending_sleeps() == [], "its timer is gone"
    assert await sleep_unless(clock, 30.0, event) is True, "already set: no wait"


async def test_a_cancelled_wait_leaves_nothing_behind():
    clock, event = ManualClock(), asyncio.Event()
    waiting = asyncio.create_task(sleep_unless(clock, 30.0, event))
    await sleeping(clock)
    waiting.cancel()
    await asyncio.gather(waiting, return_exceptions=True)
    assert waiting.cancelled() and clock.pending_sleeps() == []
