"""Queue-length history: every poll's copy samples, written as Parquet for `spark_metrics`.

Layout: `history_dir/date=YYYY-MM-DD/hour=HH/part-<YYYYmmddTHHMMSS>-<uuid>.parquet`, one row
per configured copy per poll, columns in `SCHEMA` (`dag_common.history_schema`, which the
reader, `spark_metrics`, imports too). Each file is written whole to a hidden temp
name (`.part-….tmp`, which Spark and pyarrow datasets skip), fsync'd, renamed, and its
directory fsync'd, so a reader never sees half a file.

Flush policy: samples are buffered and written once the oldest has waited `flush_every`
seconds on the injected clock (`history_flush_interval`, a minute by default), at the end of
the first poll round past it, rather than every poll. A file per 1 s poll would be 86,400
tiny files a day, which Spark lists and opens slowly, and an fsync a second for data that is
statistics, not the guarantee. The flush is timed, not counted in polls: a count of 60 polls
was a minute at 1 s polls but five at 5 s, so the first file after a start came too late for
the alert that waits for it. What a crash can lose is at most `flush_every` (and a poll) of
samples; the buffer is also flushed on graceful shutdown. A failed write keeps its rows for
the next attempt, up to `max_buffered_rounds`, then the oldest are dropped with an error log.
"""

from __future__ import annotations

import io
import logging
import os
import uuid
from collections import defaultdict
from datetime import datetime
from pathlib import Path
from typing import cast

import pyarrow as pa
import pyarrow.parquet as pq

from dag_common.clock import Clock
from dag_common.durable import atomic_write, fsync_dir
from dag_common.guarantee.values import CopySnapshot
from dag_common.history_schema import SCHEMA
from guarantee_api.errors import HistoryWriteError

logger = logging.getLogger(__name__)


def sample_rows(at: datetime, copies: list[CopySnapshot]) -> list[dict[str, object]]:
    """One row per copy for a poll at `at`: the fresh report's fields, or nulls and why not."""
    rows = []
    for c in copies:
        r = c.report if c.fresh else None
        rows.append(
            {
                "time": at,
                "database": c.database,
                "copy": c.node,
                "site": c.site,
                "role": str(r.role) if r else None,
                "status": str(r.status) if r else None,
                "reachable": r is not None,
                "copy_queue_length": r.copy_queue_length if r else None,
                "replay_queue_length": r.replay_queue_length if r else None,
                "last_log_replayed": r.last_log_replayed if r else None,
                "last_replayed_log_time": r.last_replayed_log_time if r else None,
                "last_log_generated": r.last_log_generated if r else None,
                "last_log_inspected": r.last_log_inspected if r else None,
                "last_inspected_log_time": r.last_inspected_log_time if r else None,
                "replay_lag_time_s": r.replay_lag_time.total_seconds() if r else None,
                "epoch": r.epoch if r else None,
                "error": r.error if r else None,
                "last_known_role": str(c.report.role) if c.report else None,
                "problem": None if c.fresh else (c.problem or "no report"),
            }
        )
    return rows


class HistoryWriter:
    """Buffers poll samples and writes them as partitioned Parquet files."""

    def __init__(
        self,
        history_dir: Path,
        *,
        clock: Clock,
        flush_every: float = 60.0,
        max_buffered_rounds: int = 3600,
    ) -> None:
        self.history_dir = history_dir
        self.flush_every = flush_every  # seconds the oldest buffered sample waits at most
        self.max_buffered_rounds = max_buffered_rounds
        self._clock = clock
        self._rows: list[dict[str, object]] = []
        self._rounds = 0
        self._oldest: float | None = None  # when the oldest buffered round was added
        self._drained_oldest: float | None = None  # the same, of the rows last drained

    def add_round(self, at: datetime, copies: list[CopySnapshot]) -> None:
        """Buffer the samples of one poll round."""
        if self._oldest is None:
            self._oldest = self._clock.monotonic()
        self._rows.extend(sample_rows(at, copies))
        self._rounds += 1

    @property
    def pending_rounds(self) -> int:
        return self._rounds

    @property
    def due(self) -> bool:
        """Whether the oldest buffered round has waited `flush_every`."""
        return (
            self._oldest is not None and self._clock.monotonic() - self._oldest >= self.flush_every
        )

    def drain(self) -> list[dict[str, object]]:
        """Take the buffered rows (to write them, maybe in a thread)."""
        rows, self._rows, self._rounds = self._rows, [], 0
        self._drained_oldest, self._oldest = self._oldest, None
        return rows

    def give_back(self, rows: list[dict[str, object]], rounds: int) -> None:
        """Put back rows whose write failed, keeping at most `max_buffered_rounds`."""
        self._rows = rows + self._rows
        self._rounds += rounds
        # As old as they were (older than any round added since): due again at once.
        self._oldest = self._drained_oldest if self._drained_oldest is not None else self._oldest
        if self._rounds > self.max_buffered_rounds:
            per_round = max(1, len(self._rows) // self._rounds)
            drop = (self._rounds - self.max_buffered_rounds) * per_round
            logger.error("history: dropping %d unwritten samples after repeated failures", drop)
            self._rows = self._rows[drop:]
            self._rounds = self.max_buffered_rounds

    def write(self, rows: list[dict[str, object]]) -> list[Path]:
        """Write `rows` durably, one file per (date, hour) partition; blocking."""
        parts: dict[tuple[str, str], list[dict[str, object]]] = defaultdict(list)
        for row in rows:
            at = row["time"]
            assert isinstance(at, datetime)
            parts[(at.strftime("%Y-%m-%d"), at.strftime("%H"))].append(row)
        written = []
        for (date, hour), part in sorted(parts.items()):
            try:
                written.append(self._write_part(date, hour, part))
            except (OSError, pa.ArrowException) as exc:
                raise HistoryWriteError(
                    f"cannot write history under {self.history_dir}: {exc}"
                ) from exc
        return written

    def _write_part(self, date: str, hour: str, rows: list[dict[str, object]]) -> Path:
        directory = self.history_dir / f"date={date}" / f"hour={hour}"
        self._make_dirs(directory)
        first = min(cast(datetime, row["time"]) for row in rows)  # every row has its time
        name = f"part-{first.strftime('%Y%m%dT%H%M%S')}-{uuid.uuid4().hex[:12]}.parquet"
        buf = io.BytesIO()
        pq.write_table(pa.Table.from_pylist(rows, schema=SCHEMA), buf, compression="zstd")
        path = directory / name
        atomic_write(path, buf.getvalue())
        return path

    def _make_dirs(self, directory: Path) -> None:
        """Create the partition directories, fsyncing each parent that gained an entry."""
        missing = []
        d = directory
        while not d.exists():
            missing.append(d)
            d = d.parent
        for d in reversed(missing):
            try:
                os.mkdir(d)
            except FileExistsError:
                continue
            fsync_dir(d.parent)
