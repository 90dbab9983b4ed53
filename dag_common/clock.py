"""An injected clock, so that logic never reads the wall clock or sleeps by itself.

`SystemClock` is the real one.  `ManualClock` is for tests: time moves only when the test
calls `advance()`, and sleepers whose deadline has passed wake up then, so a 15-minute stall
runs in milliseconds.

asyncio is imported by the coroutines that use it, which run in a loop it has started: a
command that never starts one (a status read, over `dag_common.blocking_http`) but takes a
clock does not pay for its import (issue 48, item 15).
"""

from __future__ import annotations

import heapq
import itertools
import time
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    import asyncio


class Clock(Protocol):
    """Wall time, monotonic time and sleeping, injected into every component that waits."""

    def now(self) -> datetime:
        """The current wall time, timezone-aware UTC."""

    def monotonic(self) -> float:
        """Seconds on a clock that never goes backwards."""

    async def sleep(self, seconds: float) -> None:
        """Wait `seconds`."""


class SystemClock:
    """The real clock."""

    def now(self) -> datetime:
        return datetime.now(UTC)

    def monotonic(self) -> float:
        return time.monotonic()

    async def sleep(self, seconds: float) -> None:
        import asyncio

        await asyncio.sleep(max(0.0, seconds))


class ManualClock:
    """A clock that moves only when told to; sleepers wake as `advance()` passes them."""

    def __init__(self, start: datetime | None = None) -> None:
        self._start = start or datetime(2026, 1, 1, tzinfo=UTC)
        self._elapsed = 0.0
        self._sleepers: list[tuple[float, int, asyncio.Future[None]]] = []
        self._seq = itertools.count()

    def now(self) -> datetime:
        return self._start + timedelta(seconds=self._elapsed)

    def monotonic(self) -> float:
        return self._elapsed

    async def sleep(self, seconds: float) -> None:
        import asyncio

        if seconds <= 0:
            await asyncio.sleep(0)
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._sleepers, (self._elapsed + seconds, next(self._seq), fut))
        await fut

    def pending_sleeps(self) -> list[float]:
        """Seconds from now at which each task sleeping on this clock wakes, soonest first: a
        test waits until a task waits (a replay held for its lag) rather than for a time."""
        return sorted(d - self._elapsed for d, _, fut in self._sleepers if not fut.done())

    async def advance(self, seconds: float) -> None:
        """Move time forward by `seconds`, waking every sleeper whose deadline passes."""
        import asyncio

        target = self._elapsed + seconds
        while self._sleepers and self._sleepers[0][0] <= target:
            deadline, _, fut = heapq.heappop(self._sleepers)
            self._elapsed = max(self._elapsed, deadline)
            if not fut.done():
                fut.set_result(None)
            # let the woken task run before time moves on
            for _ in range(5):
                await asyncio.sleep(0)
        self._elapsed = target
        await asyncio.sleep(0)


async def sleep_unless(clock: Clock, seconds: float, event: asyncio.Event) -> bool:
    """Sleep `seconds` on `clock`, or less if `event` is set meanwhile: whether it is set.
    (The one way a loop on an injected clock waits for a time or a wake-up, whichever
    comes first.)"""
    import asyncio

    if event.is_set():
        return True
    sleeper = asyncio.ensure_future(clock.sleep(seconds))
    woken = asyncio.ensure_future(event.wait())
    try:
        await asyncio.wait({sleeper, woken}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in (sleeper, woken):
            task.cancel()
        await asyncio.gather(sleeper, woken, return_exceptions=True)
    return event.is_set()
