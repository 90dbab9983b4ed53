"""`cancel_and_wait`: the tasks are cancelled and waited for, and the caller's own
cancellation is never swallowed (the idiom it replaces, `suppress(CancelledError)` around
`await task`, swallowed it: a node's config updater went on after the node's stop)."""

from __future__ import annotations

import asyncio

import pytest

from dag_common.tasks import cancel_and_wait


async def _slow_to_stop(ended: list[str], cleaning: asyncio.Event, done: asyncio.Event) -> None:
    """A task whose cleanup waits for `done`, as a copy closing its files does; it says when
    its cleanup has begun (`cleaning`)."""
    try:
        await asyncio.Event().wait()
    finally:
        cleaning.set()
        await done.wait()
        ended.append("ended")


async def test_the_callers_cancellation_is_raised_after_the_tasks_have_ended():
    ended: list[str] = []
    went_on: list[str] = []
    cleaning, done = asyncio.Event(), asyncio.Event()
    child = asyncio.create_task(_slow_to_stop(ended, cleaning, done))

    async def stopper() -> None:
        await cancel_and_wait([child])
        went_on.append("after the stop")  # what the swallowing idiom let happen

    task = asyncio.create_task(stopper())
    await cleaning.wait()  # the stopper waits on the child's cleanup
    task.cancel()
    done.set()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert ended == ["ended"]  # the stop was finished, nothing left running
    assert went_on == []
    assert child.cancelled()


async def test_a_task_that_died_is_not_forgotten():
    async def dies() -> None:
        raise OSError("disk gone")

    dead = asyncio.create_task(dies())
    alive = asyncio.create_task(asyncio.Event().wait())
    await asyncio.wait({dead})  # it died before anyone stops it
    with pytest.raises(OSError, match="disk gone"):
        await cancel_and_wait([dead, None, alive])
    assert alive.cancelled()


async def test_nothing_to_stop():
    await cancel_and_wait([])
    await cancel_and_wait([None])
