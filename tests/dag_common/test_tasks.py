"""`cancel_and_wait`: the tasks are cancelled and waited for, and the caller's own
cancellation is never swallowed (the idiom it replaces, `suppress(CancelledError)` around
`await task`, swallowed it: a node's config updater went on after the node's stop)."""

from __future__ import annotations

import asyncio

import pytest

from dag_common.tasks import cancel_and_wait


async def _slow_to_stop(ended: list[str], turns: int = 5) -> None:
    """A task whose cleanup takes a few loop turns, as a copy closing its files does."""
    try:
        await asyncio.Event().wait()
    finally:
        for _ in range(turns):
            await asyncio.sleep(0)
        ended.append("ended")


async def test_the_callers_cancellation_is_raised_after_the_tasks_have_ended():
    ended: list[str] = []
    went_on: list[str] = []
    child = asyncio.create_task(_slow_to_stop(ended))
    await asyncio.sleep(0)

    async def stopper() -> None:
        await cancel_and_wait([child])
        went_on.append("after the stop")  # what the swallowing idiom let happen

    task = asyncio.create_task(stopper())
    await asyncio.sleep(0)  # the stopper waits on the child's cleanup
    task.cancel()
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
    await asyncio.sleep(0)
    with pytest.raises(OSError, match="disk gone"):
        await cancel_and_wait([dead, None, alive])
    assert alive.cancelled()


async def test_nothing_to_stop():
    await cancel_and_wait([])
    await cancel_and_wait([None])
