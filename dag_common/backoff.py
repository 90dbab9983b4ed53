"""The one backoff every retry loop of the project uses: pure, on the caller's clock.

A loop that retries (announcing the open log, reading the active's record at mount, a
re-mount, re-opening a node's status stream, restarting a node process, a passive copy
reaching its active, seeding, its pipeline started again, block mode re-entered, the record
of a lossy activation's redelivery, a store file switched to WAL) asks `next()` for how long
to wait before its next try: `first`, then doubling up to `longest` (`fixed`: `first` every
time, where the interval is a setting); `reset()` once it worked.  `failures` counts the
tries that failed since, and `worth_saying()` says whether this one is worth a log line
(the first, then every tenth), so a store away for a minute is one warning and a few
reminders, not a line per try.

Why not a retry library's decorator: these loops sleep on an injected clock (tests run
their minutes in milliseconds), some stop on a condition of their own (the stream closing,
the role moving), and some run for ever; each keeps its loop and asks this for the waits.
"""

from __future__ import annotations

from dataclasses import dataclass


def wait_after(first: float, longest: float, failures: int) -> float:
    """The wait after `failures` failures in a row (at least 1): `first`, doubling to
    `longest`.  For a loop whose count of failures is kept elsewhere (a queued delivery's,
    in its queue)."""
    return min(longest, first * 2 ** max(0, failures - 1))


@dataclass
class Backoff:
    """Waits of `first` seconds, doubling to `longest`, until `reset()`."""

    first: float
    longest: float
    failures: int = 0

    @classmethod
    def fixed(cls, interval: float) -> Backoff:
        """Waits of `interval` every time: a loop whose retry interval is a setting (an
        operator's, or a test's on its clock) keeps it, and counts its failures here."""
        return cls(interval, interval)

    def __post_init__(self) -> None:
        if not 0 < self.first <= self.longest:
            raise ValueError(f"backoff of {self.first}s to {self.longest}s")

    def next(self) -> float:
        """The wait before the next try after one more failure."""
        self.failures += 1
        return wait_after(self.first, self.longest, self.failures)

    def worth_saying(self) -> bool:
        """Whether the failure just counted deserves a log line: the first, every tenth."""
        return self.failures == 1 or self.failures % 10 == 0

    def reset(self) -> None:
        """It worked: the next failure waits `first` again."""
        self.failures = 0
