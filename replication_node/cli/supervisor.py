"""`cluster up`'s supervision of its node processes: a node that exits is named, with why,
and started again after a backoff, while the others keep running.

`Restarts` is the rule, pure and on the caller's clock: the first restart after 1 s, doubling
to 60 s while a node keeps dying soon after it starts, back to 1 s once it ran a minute.
A node that exits 2 (bad input: its config, its data directory or port held by another
process) is not restarted: the same start would fail the same way.
"""

from __future__ import annotations

import signal
from dataclasses import dataclass, field
from pathlib import Path

from dag_common.backoff import Backoff
from dag_common.cli import ExitCode

FIRST, LONGEST, STEADY = 1.0, 60.0, 60.0


@dataclass
class Restarts:
    """When a node that exited may start again (`dag_common.backoff`, reset by a steady
    run)."""

    backoff: Backoff = field(default_factory=lambda: Backoff(FIRST, LONGEST))
    started: float = 0.0

    def started_at(self, now: float) -> None:
        self.started = now

    def exited_at(self, now: float) -> float:
        """The delay before the next start, after an exit at `now`."""
        if now - self.started >= STEADY:
            self.backoff.reset()
        return self.backoff.next()


def why_exited(returncode: int) -> str:
    """A process's end in words: its exit code, or the signal that killed it."""
    if returncode < 0:
        try:
            return f"killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"killed by signal {-returncode}"
    return f"exit code {returncode}"


def last_line(log: Path) -> str:
    """The last line a node's log holds (what it said as it went), or ''."""
    try:
        with log.open("rb") as f:
            f.seek(max(0, log.stat().st_size - 4096))
            lines = [ln for ln in f.read().decode(errors="replace").splitlines() if ln.strip()]
    except OSError:
        return ""
    return lines[-1].strip() if lines else ""


def restartable(returncode: int) -> bool:
    """Whether starting the node again could help (not after bad input)."""
    return returncode != ExitCode.BAD_INPUT


@dataclass
class NodeSlot:
    """One node under supervision."""

    name: str
    log: Path
    restarts: Restarts = field(default_factory=Restarts)
    restart_at: float | None = None  # when it starts again, while it is down
