"""Move progress for a person: a one-line bar on a TTY, plain lines otherwise."""

from __future__ import annotations

import sys
from typing import TextIO

from mrs_client.requests_store import MoveRecord


class Progress:
    """Callable given to the Mover: `progress(record, line)`."""

    def __init__(self, stream: TextIO | None = None, *, tty: bool | None = None) -> None:
        self.stream = stream or sys.stdout
        self.tty = self.stream.isatty() if tty is None else tty
        self._bar_shown = False

    def bar(self, record: MoveRecord) -> str:
        step = int(record.step)
        filled = "#" * step + "-" * (10 - step)
        stall = f" | stalled: {record.stall_reason}" if record.stall_reason else ""
        return (
            f"[{filled}] step {step}/10 {record.step.label:<22} "
            f"{record.items_copied} items {record.bytes_copied / 1e6:.1f} MB{stall}"
        )

    def __call__(self, record: MoveRecord, line: str) -> None:
        if self.tty:
            if line:
                self.stream.write("\r\033[K" + line + "\n")
            self.stream.write("\r\033[K" + self.bar(record)[:200])
            self.stream.flush()
            self._bar_shown = True
        elif line:
            self.stream.write(f"{record.id} {line}\n")
            self.stream.flush()

    def close(self) -> None:
        if self.tty and self._bar_shown:
            self.stream.write("\n")
            self.stream.flush()
