"""The demo's one way to wait: ask the thing itself (a /healthz, a status, a queue) until it
answers what is awaited, never a fixed time.  The waits between asks grow from 50 ms to half
a second through the project's one backoff, so a quick answer is seen at once and a slow one
is not asked twenty times a second."""

from __future__ import annotations

import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from subprocess import Popen
from typing import TypeVar

from dag_common.backoff import Backoff

T = TypeVar("T")


def wait_for(check: Callable[[], T | None], timeout: float) -> T | None:
    """`check()`'s first answer that is not None, asked until `timeout` seconds have passed
    (None then).  `check` may raise to stop the wait (a process that exited)."""
    deadline = time.monotonic() + timeout
    between = Backoff(first=0.05, longest=0.5)
    while True:
        answer = check()
        if answer is not None:
            return answer
        left = deadline - time.monotonic()
        if left <= 0:
            return None
        time.sleep(min(between.next(), left))


@dataclass(frozen=True)
class Started:
    """A process the demo started: its name, the URL that answers 200 once it is ready (a
    node's or the guarantee service's /healthz), and its log."""

    name: str
    url: str
    log: Path
    proc: Popen[bytes]


def _tail(log: Path, lines: int = 15) -> str:
    try:
        text = log.read_text(errors="replace").splitlines()[-lines:]
    except OSError as exc:
        return f"  (its log cannot be read: {exc.strerror})"
    return "\n".join(f"  {line}" for line in text) or "  (its log is empty)"


def _answers(s: Started) -> bool | None:
    """True once `s` answers 200 on its URL; SystemExit if it exited first."""
    code = s.proc.poll()
    if code is not None:
        raise SystemExit(
            f"{s.name} exited (code {code}) before it was ready; the end of {s.log}:\n"
            + _tail(s.log)
        )
    try:
        with urllib.request.urlopen(s.url, timeout=2) as resp:
            return True if resp.status == 200 else None
    except (urllib.error.URLError, OSError):
        return None


def wait_healthy(started: list[Started], timeout: float = 90.0) -> None:
    """Wait until each process answers 200 on its URL; one that exits or does not answer in
    time is named, with its log's last lines."""
    deadline = time.monotonic() + timeout
    for s in started:
        if wait_for(lambda s=s: _answers(s), max(0.0, deadline - time.monotonic())) is None:
            raise SystemExit(
                f"{s.name} did not answer {s.url} within {timeout:g}s; the end of "
                f"{s.log}:\n" + _tail(s.log)
            )
