"""The log stream's spare keeper: makes spare log files (`spares.py`) while the stream is
idle, one at a time, until the stream closes; removes, the same way, the spares truncation
left past the pool's target.

Why only while idle: a spare's write and fdatasync take the disk, and a commit waiting
behind them would pay for it; the stream says when it is idle (`LogStream.idle`: nothing
written or waiting for `logstream.SPARE_IDLE`).  A spare that cannot be made (a disk error)
is logged and tried again later: the rolls make new files meanwhile.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from dag_common.clock import Clock
from replication_node.log.spares import SparePool

logger = logging.getLogger(__name__)

# How long the keeper waits before it looks again when the pool is full or the disk has not
# the room for another (seconds); while the stream is busy it looks every `busy_pause`.
SPARE_PAUSE = 1.0


class SpareKeeper:
    """Keeps one pool of spares full while the stream is idle (a task on the event loop)."""

    def __init__(self, *, clock: Clock, idle: Callable[[], bool], busy_pause: float) -> None:
        self._clock = clock
        self._idle = idle
        self._busy_pause = busy_pause
        self.pool: SparePool | None = None
        self._task: asyncio.Task[None] | None = None
        self._preparing: asyncio.Future[bool] | None = None  # the spare being made
        self._closed = False

    def start(self, pool: SparePool) -> None:
        """Start keeping `pool` full; once."""
        if self._task is None and not self._closed:
            self.pool = pool
            self._task = asyncio.create_task(self._run(pool), name=f"log-spares {pool.log_dir}")

    async def close(self) -> None:
        """Stop, after the spare being made (no thread left writing into the log directory
        once the stream is gone)."""
        self._closed = True
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            if self._preparing is not None:
                await asyncio.gather(self._preparing, return_exceptions=True)

    async def _run(self, pool: SparePool) -> None:
        loop = asyncio.get_running_loop()
        while not self._closed:
            if not self._idle():
                await self._clock.sleep(self._busy_pause)
                continue
            # Shielded: a close waits for the spare being made rather than leave a thread
            # writing into the log directory after the stream is gone (`close`).  First
            # what truncation left past the target goes (`SparePool.retire`), one at a time.
            step = pool.trim_one if pool.count > pool.target else pool.prepare_one
            self._preparing = loop.run_in_executor(None, step)
            try:
                made = await asyncio.shield(self._preparing)
            except OSError as exc:
                logger.warning("a spare log file could not be made in %s: %s", pool.log_dir, exc)
                made = False
            if not made:
                await self._clock.sleep(SPARE_PAUSE)
