"""The task dump names the innermost line a task waits on, not only its outermost frame."""

from __future__ import annotations

import asyncio

from replication_node.taskdump import describe_tasks


async def _innermost(event: asyncio.Event) -> None:
    await event.wait()


async def _middle(event: asyncio.Event) -> None:
    await _innermost(event)


async def test_the_whole_await_chain_is_named():
    event = asyncio.Event()
    task = asyncio.create_task(_middle(event), name="waiter")
    await asyncio.sleep(0)
    try:
        (text,) = describe_tasks({task})
        lines = text.splitlines()
        assert lines[0] == "task waiter:"
        names = [line.rsplit(" in ", 1)[1] for line in lines[1:]]
        assert names[:2] == ["_middle", "_innermost"]
        assert names[-1] == "wait"  # asyncio.Event.wait: where it really waits
    finally:
        event.set()
        await task


async def test_a_finished_task_has_only_its_name():
    task = asyncio.create_task(asyncio.sleep(0), name="done")
    await task
    assert describe_tasks({task}) == ["task done:"]
