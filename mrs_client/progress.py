"""Move progress for a person.

On a terminal: a `rich` display redrawn in place (the step, the percent of the items the
pass knows it has to copy, items, MB, rate and ETA, or "stalled" while the move waits),
with the mover's lines (the stall's short "waiting for …" line among them) printed above it.
Anywhere else (a pipe, a file, `mrs move … | tee`): the plain `"{id} {line}"` lines that
scripts and bench/move.py parse, and nothing else.

Whether the display is drawn is decided from the stream itself (`isatty()`), not from
rich's view of it: rich also honours FORCE_COLOR and TTY_COMPATIBLE, which would draw the
bar into a pipe.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import TextIO

from rich.console import Console
from rich.progress import BarColumn, ProgressColumn, Task, TaskID, TextColumn
from rich.progress import Progress as RichProgress
from rich.text import Text

from mrs_client.policy import MoveState, MoveStep
from mrs_client.requests_store import MoveRecord


@dataclass(frozen=True, slots=True)
class Shown:
    """What the display shows of a move record."""

    description: str  # "step 3/10 initial sync"
    items: int
    total: int | None  # None: not known yet (no percent, no ETA)
    megabytes: float
    stalled: bool

    @classmethod
    def of(cls, record: MoveRecord) -> Shown:
        """What to show of `record` (pure)."""
        step = int(record.step)
        return cls(
            description=f"step {step}/{len(MoveStep)} {record.step.label}",
            items=record.items_copied,
            total=record.items_total or None,
            megabytes=record.bytes_copied / 1e6,
            stalled=record.state is MoveState.STALLED,
        )


class _Percent(ProgressColumn):
    """The percent of the known total; nothing while the total is unknown."""

    def render(self, task: Task) -> Text:
        return Text(f"{task.percentage:>3.0f}%" if task.total else "", style="progress.percentage")


class _Items(ProgressColumn):
    """Items copied, of how many if known."""

    def render(self, task: Task) -> Text:
        done = f"{int(task.completed):,}"
        return Text(f"{done}/{int(task.total):,} items" if task.total else f"{done} items")


class _RateAndEta(ProgressColumn):
    """Items a second and the time left while copying; "stalled" while the move waits."""

    def render(self, task: Task) -> Text:
        if task.fields.get("stalled"):
            return Text("stalled", style="bold yellow")
        speed = task.speed
        if not speed or task.finished:
            return Text("")
        rate = f"{speed:,.0f} items/s"
        if not task.total or task.time_remaining is None:
            return Text(rate, style="progress.data.speed")
        minutes, seconds = divmod(int(task.time_remaining), 60)
        hours, minutes = divmod(minutes, 60)
        return Text(f"{rate}  ETA {hours}:{minutes:02d}:{seconds:02d}", style="progress.remaining")


def _isatty(stream: TextIO) -> bool:
    """Whether `stream` is a terminal (False for what cannot say)."""
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # no isatty, or a closed stream
        return False


class Progress:
    """Callable given to the Mover: `progress(record, line)`; `close()` at the move's end.

    `console`: the rich console to draw on (tests pass one writing to a StringIO); by
    default one is made for `stream` (stdout) only if it is a terminal."""

    def __init__(
        self,
        stream: TextIO | None = None,
        *,
        console: Console | None = None,
        get_time: Callable[[], float] | None = None,
        auto_refresh: bool = True,
    ) -> None:
        if stream is None:
            stream = console.file if console is not None else sys.stdout
        self.stream: TextIO = stream
        if console is None and _isatty(self.stream):
            console = Console(file=self.stream)
        self._display: RichProgress | None = None
        if console is not None and console.is_interactive:
            self._display = RichProgress(
                TextColumn("{task.description}"),
                BarColumn(bar_width=24),
                _Percent(),
                _Items(),
                TextColumn("{task.fields[megabytes]:,.1f} MB"),
                _RateAndEta(),
                console=console,
                get_time=get_time,
                auto_refresh=auto_refresh,
            )
        self._task: TaskID | None = None

    @property
    def live(self) -> bool:
        """Whether the rich display is drawn (a terminal), rather than plain lines."""
        return self._display is not None

    def __call__(self, record: MoveRecord, line: str) -> None:
        if self._display is None:
            if line:
                self.stream.write(f"{record.id} {line}\n")
                self.stream.flush()
            return
        shown = Shown.of(record)
        fields = {"megabytes": shown.megabytes, "stalled": shown.stalled}
        if self._task is None:
            self._display.start()
            self._task = self._display.add_task(
                shown.description, total=shown.total, completed=shown.items, **fields
            )
        else:
            self._display.update(
                self._task,
                description=shown.description,
                total=shown.total,
                completed=shown.items,
                **fields,
            )
        if line:  # above the display, which stays below it
            self._display.console.print(line, markup=False, highlight=False, soft_wrap=True)
        self._display.refresh()

    def close(self) -> None:
        """Leave the display's last state on the screen, and the cursor below it."""
        if self._display is not None and self._task is not None:
            self._display.stop()
