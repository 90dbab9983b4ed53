"""The announcement of the open log at risk, on behalf of the log stream.

Once a generation holds a commit, the commit is lost with the active unless the copies can
count it.  So before the first commit of each generation is answered, the stream's writer
awaits the injected `announce(generation)` (the cluster store's `publish_open_generation`):
one store write per generation, never one per commit.  A store error stalls the writer
(commits wait, nothing is visible or acknowledged) and is retried with backoff while the
stream is open; closing the stream then fails the batch.  An answer of False means another
copy was activated: the answer is `Deposed`, and the stream fails every waiter and stops.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from pathlib import Path

from dag_common.backoff import Backoff
from dag_common.clock import Clock, sleep_unless
from replication_node.errors import Deposed, LogStreamStopped

logger = logging.getLogger(__name__)

# Announce that an open generation holds a commit; False: this node is not the active any more.
Announcer = Callable[[int], Awaitable[bool]]
_ANNOUNCE_RETRY_FIRST = 0.05
_ANNOUNCE_RETRY_MAX = 5.0


class OpenLogAnnouncer:
    """Announces each generation's first commit, retrying store errors with backoff."""

    def __init__(
        self,
        *,
        log_dir: Path,
        clock: Clock,
        closing: asyncio.Event,
        stopped: Callable[[], bool],
        announce: Announcer | None = None,
    ) -> None:
        self.announce = announce  # None: nothing is announced
        self._log_dir = log_dir
        self._clock = clock
        self._closing = closing  # set when the stream starts closing: stop waiting
        self._stopped = stopped  # whether the stream is closed
        self.announced = 0  # the highest generation announced to hold a commit
        self.announcements = 0

    def due(self, generation: int) -> bool:
        """Whether a commit in `generation` must be announced before it is answered."""
        return self.announce is not None and generation > self.announced

    async def announce_generation(self, generation: int) -> BaseException | None:
        """Announce that `generation` holds a commit; retry store errors with backoff while
        the stream is open.  None once announced, else the error to fail the waiters with."""
        assert self.announce is not None
        backoff = Backoff(_ANNOUNCE_RETRY_FIRST, _ANNOUNCE_RETRY_MAX)
        while True:
            try:
                accepted = await self.announce(generation)
            except Exception as exc:
                wait = backoff.next()
                if self._stopped():
                    return LogStreamStopped(
                        f"generation {generation} could not be announced to the cluster store "
                        f"before the stream closed ({exc}); its commits were not acknowledged"
                    )
                if backoff.worth_saying():
                    logger.warning(
                        "%s: commits wait: cannot announce open generation %d to the cluster "
                        "store (%d attempt(s)): %s",
                        self._log_dir,
                        generation,
                        backoff.failures,
                        exc,
                    )
                await self._pause(wait)
                continue
            if not accepted:
                return Deposed(
                    f"the cluster store no longer names this node the active copy (open "
                    f"generation {generation} of {self._log_dir} refused): another copy was "
                    "activated; the commit was not acknowledged"
                )
            self.announced = max(self.announced, generation)
            self.announcements += 1
            if backoff.failures:
                logger.warning(
                    "%s: open generation %d announced after %d failed attempt(s); commits go on",
                    self._log_dir,
                    generation,
                    backoff.failures,
                )
            return None

    async def _pause(self, seconds: float) -> None:
        """Sleep `seconds` on the clock, or less if the stream starts closing."""
        await sleep_unless(self._clock, seconds, self._closing)
