"""Every task's whole await chain, for a process that hangs (`kill -USR1`).

`Task.print_stack` shows only a suspended task's outermost frame ("resp = await
request_handler(request)"), not what that await waits on three coroutines down; this walks
each coroutine's `cr_await` to the innermost frame, so the dump names the line that waits.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from types import FrameType
from typing import Any

# The line a dump into a log ends with: a reader of the log knows it has the dump whole.
TASK_DUMP_END = "end of the task dump"


def _frames(coro: Any) -> Iterator[FrameType]:
    while coro is not None:
        frame = getattr(coro, "cr_frame", None) or getattr(coro, "gi_frame", None)
        frame = frame or getattr(coro, "ag_frame", None)
        if frame is not None:
            yield frame
        coro = (
            getattr(coro, "cr_await", None)
            or getattr(coro, "gi_yieldfrom", None)
            or getattr(coro, "ag_await", None)
        )


def describe_tasks(tasks: set[asyncio.Task[Any]] | None = None) -> list[str]:
    """One text per task: its name and every frame of its await chain, outermost first."""
    out = []
    for task in sorted(tasks if tasks is not None else asyncio.all_tasks(), key=_name):
        lines = [f"task {task.get_name()}:"]
        for frame in _frames(task.get_coro()):
            code = frame.f_code
            lines.append(f"  {code.co_filename}:{frame.f_lineno} in {code.co_name}")
        out.append("\n".join(lines))
    return out


def _name(task: asyncio.Task[Any]) -> str:
    return task.get_name()
