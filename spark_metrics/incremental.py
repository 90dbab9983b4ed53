"""Which history to read and which output dates to rewrite: pure rules over what is on disk
and what earlier runs recorded.

Idempotency invariant: every output date partition is always computed from *all* the good
history of that date (within --since/--until), never patched. A run rewrites a date only
when a history file touching it is new or changed since the run that last read it; each
rewritten date replaces the old partition whole (dynamic partition overwrite). So a second
run over the same history rewrites nothing and the output stays the same rows, and a
history file arriving late makes the next run recompute exactly the dates it touches.

A file is recorded as done only when the run covered its whole time span: a run limited by
--since/--until leaves a file that crosses the limit pending, and a later run without limits
recomputes its dates.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import date, datetime, timedelta

from spark_metrics.discover import FileInfo


@dataclass(frozen=True, slots=True)
class Plan:
    """One run's work: the files to read, the dates to rewrite, the files it completes."""

    read: tuple[FileInfo, ...]
    dates: tuple[date, ...]
    completes: tuple[FileInfo, ...]
    pending: int  # new or changed files within the run's time range


def _dates(first: datetime, last: datetime) -> set[date]:
    day, end = first.date(), last.date()
    out = set()
    while day <= end:
        out.add(day)
        day += timedelta(days=1)
    return out


def _clip(
    f: FileInfo, since: datetime | None, until: datetime | None
) -> tuple[datetime, datetime] | None:
    """The part of the file's span inside [since, until), or None if it has none."""
    first = max(f.first, since) if since else f.first
    last = f.last
    if until is not None and last >= until:
        last = until - timedelta(microseconds=1)
    return (first, last) if first <= last else None


def plan_run(
    files: Iterable[FileInfo],
    done: Mapping[str, FileInfo],
    *,
    since: datetime | None = None,
    until: datetime | None = None,
    full: bool = False,
) -> Plan:
    """Decide the run. `done` holds each file as the run that last read it saw it."""
    files = tuple(files)
    pending = [f for f in files if full or f.path not in done or done[f.path].stamp != f.stamp]
    dates: set[date] = set()
    pending_in_range = []
    for f in pending:
        span = _clip(f, since, until)
        if span is not None:
            pending_in_range.append(f)
            dates |= _dates(*span)
    read = tuple(
        f for f in files if (span := _clip(f, since, until)) is not None and _dates(*span) & dates
    )
    completes = tuple(
        f
        for f in pending_in_range
        if (since is None or f.first >= since) and (until is None or f.last < until)
    )
    return Plan(read, tuple(sorted(dates)), completes, len(pending_in_range))
