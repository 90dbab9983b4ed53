"""`replication-node db reseed DB --node N --wait`: follow a reseed to its end.

The copy's node pushes its status (`GET /v1/status/watch`, `dag_common.status_watch`); each
report of the copy is judged (`reseed_outcome`, pure) and shown (`SeedDisplay`):

    Healthy, its seed over (no seed_bytes_*)        done: exit 0
    Suspended, FailedAndSuspended, Failed, Active   failed: exit 1, saying why
    anything else (Seeding, Initializing, …)        still going: show the bytes done

What is shown: the seed's bytes (the database file, then the logs above its waypoint that
it needs), the rate and the time left.  On a terminal a rich progress bar; anywhere else
plain lines, one when the status changes and at most one a second while the bytes move
(`SeedLines`, on an injected clock), then the final line.  A stream that ends or falls
silent before the end is a failure (exit 1): the reseed may still go on, as `status` shows.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import aclosing
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, TextIO

import aiohttp

from dag_common.model import CopyRole, CopyStatus, CopyStatusReport
from dag_common.status_watch import Changed, Snapshot
from dag_common.watch_reader import WatchLost, watch_events

if TYPE_CHECKING:  # rich is imported only to draw (a terminal), not for plain lines
    from rich.console import Console
    from rich.progress import Progress, TaskID

_STOPPED = frozenset({CopyStatus.SUSPENDED, CopyStatus.FAILED_AND_SUSPENDED, CopyStatus.FAILED})
SILENCE = 10.0  # seconds without a line (heartbeats come every second) before giving up


@dataclass(frozen=True, slots=True)
class Outcome:
    ok: bool
    sentence: str


def reseed_outcome(report: CopyStatusReport) -> Outcome | None:
    """How the reseed of the copy in `report` ended (None: it goes on)."""
    name = f"{report.database}\\{report.node}"
    if report.role is CopyRole.ACTIVE:
        return Outcome(False, f"{name} became the active copy during the reseed")
    if report.status in _STOPPED:
        why = f": {report.error}" if report.error else ""
        return Outcome(False, f"the reseed of {name} failed; the copy is {report.status}{why}")
    if report.status is CopyStatus.HEALTHY and report.seed_bytes_done is None:
        return Outcome(True, f"{name}: reseeded; now Healthy")
    return None


class Rate:
    """Bytes a second and the time left, from the first sample with bytes (pure arithmetic
    on the times given)."""

    def __init__(self) -> None:
        self._first: tuple[float, int] | None = None
        self._last: tuple[float, int] | None = None

    def sample(self, at: float, done: int) -> None:
        if self._first is None:
            self._first = (at, done)
        self._last = (at, done)

    def per_second(self) -> float | None:
        if self._first is None or self._last is None or self._last[0] <= self._first[0]:
            return None
        return (self._last[1] - self._first[1]) / (self._last[0] - self._first[0])

    def eta(self, total: int | None) -> float | None:
        speed = self.per_second()
        if not speed or total is None or self._last is None:
            return None
        return max(0.0, (total - self._last[1]) / speed)


def _clock_time(seconds: float) -> str:
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}"


def progress_text(report: CopyStatusReport, rate: Rate) -> str:
    """`Seeding: 3.1 of 8.4 MB (37%), 25.3 MB/s, ETA 0:00:02` (what is known of it)."""
    text = str(report.status)
    done, total = report.seed_bytes_done, report.seed_bytes_total
    if done is None:
        return text + (f" ({report.error})" if report.error else "")
    text += f": {done / 1e6:,.1f}"
    text += f" of {total / 1e6:,.1f} MB ({100 * done / total:.0f}%)" if total else " MB"
    speed = rate.per_second()
    if speed:
        text += f", {speed / 1e6:,.1f} MB/s"
        eta = rate.eta(total)
        if eta is not None:
            text += f", ETA {_clock_time(eta)}"
    return text + (f" ({report.error})" if report.error else "")


class SeedDisplay(Protocol):
    def show(self, report: CopyStatusReport) -> None: ...

    def close(self, outcome: Outcome | None) -> None: ...


class SeedLines:
    """Plain lines for a pipe or a file: one when the status (or its error) changes or the
    bytes or their total are first known, at most one a second while they move, and the
    outcome's."""

    def __init__(self, stream: TextIO, *, monotonic: Callable[[], float], every: float = 1.0):
        self._stream = stream
        self._monotonic = monotonic
        self._every = every
        self._rate = Rate()
        self._said: tuple[object, ...] | None = None
        self._said_at = 0.0

    def show(self, report: CopyStatusReport) -> None:
        now = self._monotonic()
        if report.seed_bytes_done is not None:
            self._rate.sample(now, report.seed_bytes_done)
        # what is said at once: a new status or error, the bytes or their total first known
        kind = (
            report.status,
            report.error,
            report.seed_bytes_done is None,
            report.seed_bytes_total is None,
        )
        moved = report.seed_bytes_done is not None and now - self._said_at >= self._every
        if kind != self._said or moved:
            self._write(f"{report.database}\\{report.node}: {progress_text(report, self._rate)}")
            self._said, self._said_at = kind, now

    def close(self, outcome: Outcome | None) -> None:
        if outcome is not None and outcome.ok:
            self._write(outcome.sentence)

    def _write(self, line: str) -> None:
        self._stream.write(line + "\n")
        self._stream.flush()


class SeedBar:
    """A rich progress bar on a terminal: bytes done of all, the rate and the time left."""

    def __init__(self, progress: Progress) -> None:
        self._progress = progress
        self._task: TaskID | None = None

    def show(self, report: CopyStatusReport) -> None:
        name = f"{report.database}\\{report.node} {report.status}"
        if self._task is None:
            self._progress.start()
            self._task = self._progress.add_task(name, total=None)
        self._progress.update(
            self._task,
            description=name,
            completed=report.seed_bytes_done or 0,
            total=report.seed_bytes_total,
        )

    def close(self, outcome: Outcome | None) -> None:
        if self._task is not None:
            if outcome is not None and outcome.ok:
                task = self._progress.tasks[0]
                self._progress.update(self._task, completed=task.total or task.completed)
            self._progress.stop()
        if outcome is not None and outcome.ok:
            self._progress.console.print(outcome.sentence, markup=False, highlight=False)


def seed_display(stream: TextIO, monotonic: Callable[[], float]) -> SeedDisplay:
    """The bar on a terminal (rich imported only then), plain lines anywhere else."""
    if stream.isatty():
        from rich.console import Console

        console = Console(file=stream)
        if console.is_terminal:
            return seed_bar(console)
    return SeedLines(stream, monotonic=monotonic)


def seed_bar(console: Console) -> SeedBar:
    """A progress bar on `console`: the copy and its status, bytes, rate, time left."""
    from rich.progress import (
        BarColumn,
        DownloadColumn,
        Progress,
        TextColumn,
        TimeRemainingColumn,
        TransferSpeedColumn,
    )

    return SeedBar(
        Progress(
            TextColumn("{task.description}"),
            BarColumn(bar_width=24),
            DownloadColumn(),
            TransferSpeedColumn(),
            TimeRemainingColumn(),
            console=console,
        )
    )


async def follow_reseed(
    session: aiohttp.ClientSession,
    url: str,
    token: str,
    database: str,
    node: str,
    display: SeedDisplay,
    *,
    silence: float = SILENCE,
) -> tuple[Outcome, CopyStatusReport]:
    """Follow the copy of `database` on `node` (at `url`) until its reseed ends: the
    outcome and the copy's last report; WatchLost if the stream ends first."""
    events = watch_events(session, url, token, node=node, heartbeat=1.0, silence=silence)
    async with aclosing(events):
        async for event in events:
            if isinstance(event, Snapshot):
                copies: tuple[CopyStatusReport, ...] = tuple(event.status.copies)
            elif isinstance(event, Changed):
                copies = event.copies
            else:
                continue
            for report in copies:
                if report.database != database:
                    continue
                outcome = reseed_outcome(report)
                if outcome is not None:
                    return outcome, report  # the display's close says it
                display.show(report)
    raise WatchLost(f"{url}: status stream ended")
