"""The active's log truncation: every cycle, delete the closed generations no copy needs.

The rules are pure and live in `log/truncation.py` (`active_truncation_limit`); this loop
asks every copy's progress, applies the limit to the log directory and counts what it
deleted (each generation unlinked, or taken by the log stream's spare pool for a roll to
write over: `SparePool.retire`).  A failed pass is logged and counted, and the next cycle
tries again.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

from prometheus_client import Counter

from dag_common.clock import Clock, sleep_unless
from replication_node.log.spares import SparePool
from replication_node.log.truncation import CopyProgress, active_truncation_limit, delete_through
from replication_node.storage.header import DatabaseHeader

logger = logging.getLogger(__name__)

# A pass comes before `interval` once this many generations closed since the last one (the
# spare pool's default target: what the log's next rolls take), but never sooner than
# SOONEST seconds after it: an idle or quiet log is looked at every `interval`, and a busy
# one about every second (bench/README.md, "lmtp: truncated generations recycled").
BUSY_GENERATIONS = 64
SOONEST = 1.0


@dataclass(kw_only=True, eq=False)
class ActiveTruncator:
    """Deletes the active's closed generations below the truncation limit."""

    database: str
    logs: Path
    clock: Clock
    header: Callable[[], DatabaseHeader | None]  # the mounted database's (None: not mounted)
    peer_progress: Callable[[], Awaitable[list[CopyProgress]]]
    circular_logging: bool = True
    interval: float = 5.0
    truncated: Counter | None = None
    truncated_through: int = field(default=0, init=False)
    # A running backup of this copy needs the generations from here on (None: none).
    backup_hold: int | None = field(default=None, init=False)
    # The generations from here on hold a body being sent on from the log
    # (`logged_bodies.LogBodies.reading_from`; None: none).
    read_hold: Callable[[], int | None] = lambda: None
    # The log stream's spare pool, which takes truncated generations (`SparePool.retire`);
    # None: each is unlinked.
    spares: Callable[[], SparePool | None] = lambda: None

    _closed_since: int = field(default=0, init=False)  # generations closed since a pass
    _busy: asyncio.Event = field(default_factory=asyncio.Event, init=False)

    def closed(self) -> None:
        """A generation of the active's log closed: BUSY_GENERATIONS of them since the last
        pass bring the next one forward (`run`)."""
        self._closed_since += 1
        if self._closed_since >= BUSY_GENERATIONS:
            self._busy.set()

    async def run(self) -> None:
        """Delete closed generations no copy needs any more (the seeds' truncation rules):
        a pass every `interval`, or as soon as SOONEST after the last one while the log is
        busy (BUSY_GENERATIONS closed since), so that the generations a busy log's next
        rolls write over come back to its spare pool before they are needed."""
        errors = 0
        while True:
            soonest = min(SOONEST, self.interval)
            await self.clock.sleep(soonest)
            await sleep_unless(self.clock, self.interval - soonest, self._busy)
            self._busy.clear()
            self._closed_since = 0
            try:
                await self.truncate_once(await self.peer_progress())
            except Exception:
                errors += 1
                logger.exception("%s: truncation pass failed (%d so far)", self.database, errors)

    async def truncate_once(self, copies: list[CopyProgress]) -> int:
        """One truncation pass over the given copies' progress; the limit applied."""
        header = self.header()
        if header is None:
            return 0
        limit = active_truncation_limit(
            checkpoint=header.checkpoint,
            copies=copies,
            backed_up_through=header.last_backup_generation,
            circular_logging=self.circular_logging,
            required_from=header.required_from,
        )
        if self.backup_hold is not None:  # a backup is copying them
            limit = max(min(limit, self.backup_hold - 1), 0)
        reading = self.read_hold()
        if reading is not None:  # a body is read from them (the LLR flush wrote it since)
            limit = max(min(limit, reading - 1), 0)
        if limit > self.truncated_through:
            deleted = await asyncio.to_thread(delete_through, self.logs, limit, self.spares())
            if deleted and self.truncated is not None:
                self.truncated.inc(len(deleted))
            if deleted:
                logger.info(
                    "%s: truncated %d generation(s) through %d (checkpoint %d, copies %s)",
                    self.database,
                    len(deleted) if isinstance(deleted, list) else deleted,
                    limit,
                    header.checkpoint,
                    ", ".join(
                        f"{c.node}: inspected {c.last_log_inspected} replayed {c.last_log_replayed}"
                        for c in copies
                    ),
                )
            self.truncated_through = limit
        return limit
