"""The old active's half of a switchover: stop taking writes and close the open log.

`quiesce` names the target (writes are then refused with `switching_to`, so a client asks
again shortly), closes the open log and answers the last closed generation, which the
target must replay before it takes over.  Naming the target is the gate: from then on the
lease refuses every write before it is written (`SwitchingOver`), so the roll is queued
behind every commit admitted before, each of which is fenced and answered as usual; the
instance releases the lease only after the roll (`lease.py`).  Should whoever runs the
switchover vanish, writes resume by themselves after the hold unless the role moved (the
instance is then stopped).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from dag_common.clock import Clock
from dag_common.model import RollCause
from dag_common.tasks import cancel_and_wait
from replication_node.active.copy import ActiveCopy

logger = logging.getLogger(__name__)


class SwitchoverQuiesce:
    """Whether, and for which target, an active copy stopped taking writes."""

    def __init__(self, *, database: str, clock: Clock, generated: Callable[[], int]) -> None:
        self._database = database
        self._clock = clock
        self._generated = generated  # the last closed generation (LastLogGenerated)
        self.switching_to: str | None = None  # a switchover from this node is under way
        self._epoch = 0  # which quiesce a pending automatic unquiesce belongs to
        self._timers: list[asyncio.Task[None]] = []

    async def quiesce(self, copy: ActiveCopy, target: str, hold: float) -> int:
        """Take no more writes, close the open log; the last closed generation.  Every write
        acknowledged before is in it, and every write admitted before is answered: those
        are queued on the log ahead of the roll, and every later one is refused unwritten."""
        self.switching_to = target
        self._epoch += 1
        self._timers.append(
            asyncio.create_task(
                self._unquiesce_after(hold, self._epoch), name=f"quiesce {self._database}"
            )
        )
        await copy.roll(cause=RollCause.SWITCHOVER)
        logger.info(
            "%s: writes stopped for a switchover to %s at generation %d",
            self._database,
            target,
            self._generated(),
        )
        return self._generated()

    async def _unquiesce_after(self, hold: float, epoch: int) -> None:
        await self._clock.sleep(hold)
        if self.switching_to is not None and self._epoch == epoch:
            logger.warning("%s: switchover did not finish in %.0fs", self._database, hold)
            self.unquiesce()

    def unquiesce(self) -> None:
        """The switchover was abandoned: take writes again."""
        if self.switching_to is not None:
            logger.warning("%s: switchover to %s abandoned", self._database, self.switching_to)
        self.switching_to = None

    async def stop(self) -> None:
        """Cancel the pending automatic unquiesce (the instance stops)."""
        await cancel_and_wait(self._timers)
        self._timers.clear()
