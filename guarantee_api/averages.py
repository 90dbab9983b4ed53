"""The average copy queue per caller and database, as the seed defines it: taken over the
queries that caller has made for that database, within a window of time.

Why a window of time, not only a count: the seed's average exists so that a copy that was
just behind (a flapping link, a burst) does not let a move go on at once; it must not make a
move remember an outage that is over.  Counted over the last 60 queries, a mover asking
every 30 s (the seed's stall interval) carried a 30-minute memory of a disk filling for
2.5 minutes, and stalled on "average copy queue 98" while every copy was healthy, one small
step down per question, towards its 15-minute stall limit.  Only the queries of the last
`span` seconds (`guarantee_api.limits.average_window_time`, 3 minutes by default) count: six
questions at the seed's cadence, enough that one bad answer among them does not hold a move,
and an outage's weight is gone 3 minutes after the copies recover, well within the stall
limit.  `window` (a count) still caps each series, which bounds memory.

Memory is bounded twice: each (caller, database) keeps at most `window` samples per copy
(fewer once they age out of the span), and at most `max_callers` (caller, database) pairs are
kept, least recently used first out.  A caller that comes back after being evicted starts a
fresh average, which is what a new move would see anyway.  Time is the injected clock's
monotonic time: a wall-clock jump neither ages samples out nor keeps them.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Mapping

from dag_common.clock import Clock, SystemClock


class _Series:
    """One copy's samples for one caller: (monotonic time, queue length), oldest first."""

    __slots__ = ("samples", "total")

    def __init__(self, window: int) -> None:
        self.samples: deque[tuple[float, int]] = deque(maxlen=window)
        self.total = 0

    def add(self, now: float, value: int) -> None:
        if len(self.samples) == self.samples.maxlen:
            self.total -= self.samples[0][1]
        self.samples.append((now, value))
        self.total += value

    def expire(self, oldest: float) -> None:
        """Drop the samples taken before `oldest`."""
        while self.samples and self.samples[0][0] < oldest:
            self.total -= self.samples.popleft()[1]

    def mean(self) -> float | None:
        return self.total / len(self.samples) if self.samples else None

    def clears_in(self, now: float, span: float, limit: float) -> float | None:
        """Seconds until the mean falls under `limit` as samples leave the span, if no new
        sample came (0: it is under); None if it would not (the newest are over it too).
        New samples at a queue under the limit only bring it sooner: an upper bound."""
        total, count = self.total, len(self.samples)
        if not count or total / count < limit:
            return 0.0
        for taken, value in self.samples:  # oldest first: each leaves at taken + span
            total, count = total - value, count - 1
            if count and total / count < limit:
                return max(0.0, taken + span - now)
        return None  # the newest sample is over the limit as well


class CopyQueueAverages:
    """Averages of copy queue length per (caller, database, copy) over a window of time."""

    def __init__(
        self,
        *,
        window: int = 60,
        span: float = 180.0,
        max_callers: int = 4096,
        clock: Clock | None = None,
    ) -> None:
        if window < 1 or max_callers < 1 or span <= 0:
            raise ValueError("window and max_callers must be at least 1, span above 0")
        self._window = window
        self.span = span
        self._max = max_callers
        self._clock = clock or SystemClock()
        self._pairs: OrderedDict[tuple[str, str], dict[str, _Series]] = OrderedDict()

    def record(self, caller: str, database: str, queues: Mapping[str, int]) -> dict[str, float]:
        """Add one query's copy queue lengths (node → logs); return the averages now."""
        now = self._clock.monotonic()
        key = (caller, database)
        series = self._pairs.get(key)
        if series is None:
            series = self._pairs[key] = {}
            if len(self._pairs) > self._max:
                self._pairs.popitem(last=False)
        else:
            self._pairs.move_to_end(key)
        out = {}
        for node, queue in queues.items():
            s = series.get(node)
            if s is None:
                s = series[node] = _Series(self._window)
            s.expire(now - self.span)
            s.add(now, queue)
            out[node] = s.total / len(s.samples)
        return out

    def current(self, caller: str, database: str, queues: Mapping[str, int]) -> dict[str, float]:
        """The averages as `record` would give them, without adding a sample: a copy with
        no sample in the window averages its queue now."""
        now = self._clock.monotonic()
        series = self._pairs.get((caller, database), {})
        out = {}
        for node, queue in queues.items():
            s = series.get(node)
            if s is not None:
                s.expire(now - self.span)
            mean = s.mean() if s is not None else None
            out[node] = mean if mean is not None else float(queue)
        return out

    def clears_in(self, caller: str, database: str, limit: float) -> dict[str, float]:
        """Per copy whose average is at or over `limit`: seconds until it falls under as
        the caller's older queries leave the window (no entry: not predictable)."""
        now = self._clock.monotonic()
        out = {}
        for node, s in self._pairs.get((caller, database), {}).items():
            s.expire(now - self.span)
            mean = s.mean()
            if mean is None or mean < limit:
                continue
            eta = s.clears_in(now, self.span, limit)
            if eta is not None:
                out[node] = eta
        return out

    def __len__(self) -> int:
        return len(self._pairs)
