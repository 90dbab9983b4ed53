"""The rich display of a move's progress (imported only when one is drawn: a terminal)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TextIO

from rich.console import Console
from rich.logging import RichHandler
from rich.progress import BarColumn, Progress, ProgressColumn, Task, TextColumn
from rich.text import Text


def display(
    stream: TextIO,
    console: Console | None,
    get_time: Callable[[], float] | None,
    *,
    auto_refresh: bool,
) -> Progress | None:
    """The display for `console` (else one made for `stream`), or None if it is not
    interactive."""
    console = console or Console(file=stream)
    if not console.is_interactive:
        return None
    return Progress(
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


def log_handler(console: Console) -> RichHandler:
    """Log records printed above the display, through its console."""
    return RichHandler(console=console, show_path=False, markup=False, rich_tracebacks=False)
