"""A batch's throughput cap: a token bucket on the injected clock, shared by the moves of
the batch that one worker runs.

Each write of a move reserves its bytes (`take`): the reservation is served after those
before it, and waits once the bucket's burst (one second's worth) is spent.  The rate may
change at any time (`mrs batch set --max-mb-per-s`); a worker sets it to its share of the
batch's cap, in proportion to the batch's moves running in it (`worker.Worker`).  Our own
few lines rather than a library's: the wait runs on the injected clock, so the tests of a
cap take milliseconds.
"""

from __future__ import annotations

from dag_common.clock import Clock


class Throttle:
    """At most `rate` bytes per second on average (None: no cap), bursts of one second."""

    def __init__(self, clock: Clock, rate: float | None = None) -> None:
        self._clock = clock
        self.rate = rate
        self._free_at = clock.monotonic()  # when the bytes reserved so far have been served

    async def take(self, size: int) -> None:
        """Wait until `size` more bytes fit under the rate."""
        rate = self.rate
        if rate is None or rate <= 0 or size <= 0:
            return
        now = self._clock.monotonic()
        self._free_at = max(self._free_at, now - 1.0) + size / rate
        wait = self._free_at - now - 1.0  # a second's worth may go at once
        if wait > 0:
            await self._clock.sleep(wait)
