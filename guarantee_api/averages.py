"""The average copy queue per caller and database, as the seed defines it: taken over the
queries that caller has made for that database.

Memory is bounded twice: each (caller, database) keeps only its last `window` samples per
copy, and at most `max_callers` (caller, database) pairs are kept, least recently used first
out. A caller that comes back after being evicted starts a fresh average, which is what a
new move would see anyway.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Mapping


class _Series:
    __slots__ = ("samples", "total")

    def __init__(self, window: int) -> None:
        self.samples: deque[int] = deque(maxlen=window)
        self.total = 0

    def add(self, value: int) -> float:
        if len(self.samples) == self.samples.maxlen:
            self.total -= self.samples[0]
        self.samples.append(value)
        self.total += value
        return self.mean()

    def mean(self) -> float:
        return self.total / len(self.samples)


class CopyQueueAverages:
    """Sliding-window averages of copy queue length, per (caller, database, copy)."""

    def __init__(self, *, window: int = 60, max_callers: int = 4096) -> None:
        if window < 1 or max_callers < 1:
            raise ValueError("window and max_callers must be at least 1")
        self._window = window
        self._max = max_callers
        self._pairs: OrderedDict[tuple[str, str], dict[str, _Series]] = OrderedDict()

    def record(self, caller: str, database: str, queues: Mapping[str, int]) -> dict[str, float]:
        """Add one query's copy queue lengths (node → logs); return the averages now."""
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
            out[node] = s.add(queue)
        return out

    def current(self, caller: str, database: str, queues: Mapping[str, int]) -> dict[str, float]:
        """The averages as `record` would give them, without adding a sample: a copy with
        no sample yet averages its queue now."""
        series = self._pairs.get((caller, database), {})
        return {
            node: series[node].mean() if node in series else float(queue)
            for node, queue in queues.items()
        }

    def __len__(self) -> int:
        return len(self._pairs)
