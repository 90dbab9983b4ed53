"""Progress lines on stderr: which stage the aggregation is in, what it read, and, while a
Spark stage runs, its tasks done out of total (Spark's own console bar is turned off: it
redraws one line, which a log file or CI turns into noise)."""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable
from typing import TextIO

from pyspark import SparkContext


class Progress:
    """Prints `[  12.3s] text` lines, timed from its creation."""

    def __init__(
        self, stream: TextIO | None = None, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._stream = stream or sys.stderr
        self._clock = clock
        self._start = clock()

    @property
    def elapsed(self) -> float:
        return self._clock() - self._start

    def say(self, text: str) -> None:
        print(f"[{self.elapsed:7.1f}s] {text}", file=self._stream, flush=True)


class StageWatcher:
    """While open, reports the active Spark stages every `interval` seconds when they moved."""

    def __init__(self, sc: SparkContext, progress: Progress, interval: float = 5.0) -> None:
        self._tracker = sc.statusTracker()
        self._progress = progress
        self._interval = interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="spark-stage-watcher", daemon=True)
        self._last = ""

    def __enter__(self) -> StageWatcher:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=self._interval + 5)

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            try:
                line = self.describe()
            except Exception:  # the context is stopping; a progress line is not worth a crash
                return
            if line and line != self._last:
                self._progress.say(line)
                self._last = line

    def describe(self) -> str:
        """The active stages as `spark stage 7: 3/8 tasks`, joined."""
        parts = []
        for stage_id in sorted(self._tracker.getActiveStageIds()):
            info = self._tracker.getStageInfo(stage_id)
            if info is None:
                continue
            parts.append(
                f"stage {stage_id}: {info.numCompletedTasks}/{info.numTasks} tasks"
                + (f", {info.numActiveTasks} running" if info.numActiveTasks else "")
            )
        return ("spark " + "; ".join(parts)) if parts else ""
