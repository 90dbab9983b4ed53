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

import logging
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, TextIO

from mrs_client.move_store.interface import MoveRecord
from mrs_client.policy import MoveState, MoveStep

if TYPE_CHECKING:  # rich is imported only to draw (progress_display), not for plain lines
    from rich.console import Console
    from rich.progress import Progress as RichProgress
    from rich.progress import TaskID


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
        self._display: RichProgress | None = None
        if console is not None or _isatty(self.stream):
            from mrs_client.progress_display import display  # rich: ~30 ms of imports

            self._display = display(self.stream, console, get_time, auto_refresh=auto_refresh)
        self._task: TaskID | None = None
        self._handlers: list[logging.Handler] = []

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
            self._take_logging()
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

    def _take_logging(self) -> None:
        """While the display is drawn, log records go above it through its console: a
        handler writing to the terminal by itself would tear the display in two."""
        from mrs_client.progress_display import log_handler

        assert self._display is not None
        root = logging.getLogger()
        self._handlers = root.handlers[:]
        handler = log_handler(self._display.console)
        if self._handlers:
            handler.setLevel(min(h.level for h in self._handlers))
        root.handlers = [handler]

    def close(self) -> None:
        """Leave the display's last state on the screen, and the cursor below it; logging
        as it was."""
        if self._display is not None and self._task is not None:
            self._display.stop()
            logging.getLogger().handlers = self._handlers
