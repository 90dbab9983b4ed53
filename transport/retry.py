"""What the transport does after a delivery fails (pure): when to try again, or give up.

A node's answer sorts the failure:
- WAIT: the mailbox is locked by a move, its database is failing or switching over, the
  node cannot be reached: nothing is wrong with the message; it waits, with backoff, up to
  `message_expiration` after it was queued.
- MOVED: the database answered that it has no such mailbox and the directory now names
  another database (a move finished): tried again at once, at the new one.
- COUNTS: the database has no such mailbox (or no such folder in it) and the directory
  still names it (or names no database): tried again with backoff, and counted towards
  `max_tries`: a mailbox removed for good ends in the poison queue after a few tries, one
  restored meanwhile is delivered.
- POISON: the message itself is refused (too large for the database, a bad request): no
  try can succeed; into the poison queue at once with the answer.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from dag_common.backoff import wait_after


class Failure(StrEnum):
    WAIT = "Wait"
    MOVED = "Moved"
    COUNTS = "Counts"
    POISON = "Poison"


@dataclass(frozen=True)
class RetryPolicy:
    interval: float  # seconds before the first retry
    max_interval: float  # the longest wait between two tries
    expiration: float  # seconds a message may wait in the queue in all
    max_tries: int  # tries that failed for the message's own sake


@dataclass(frozen=True)
class Next:
    """After a failed try: give up (`poison` is the reason), or try again in `delay` s."""

    delay: float = 0.0
    poison: str | None = None


def classify(status: int | None, *, directory_moved: bool) -> Failure:
    """The kind of failure of an answer with HTTP `status` (None: no answer, or one that
    says to ask again later)."""
    if status == 404:
        return Failure.MOVED if directory_moved else Failure.COUNTS
    if status in (400, 413, 422):
        return Failure.POISON
    return Failure.WAIT  # 409 locked/switching, 401 (a token being rotated), 5xx, no answer


def next_try(
    policy: RetryPolicy,
    failure: Failure,
    *,
    streak: int,
    failures: int,
    waited: float,
    error: str,
) -> Next:
    """What to do after a failed try.  `streak`: tries failed in a row so far for this
    recipient (this one included); `failures`: those that counted, this one included;
    `waited`: seconds since the message was queued."""
    if failure is Failure.POISON:
        return Next(poison=error)
    if failure is Failure.COUNTS and failures >= policy.max_tries:
        return Next(poison=f"{error} (after {failures} tries)")
    if waited >= policy.expiration:
        return Next(poison=f"expired after {waited:.0f} s in the queue; last: {error}")
    if failure is Failure.MOVED:
        return Next(delay=0.0)
    delay = wait_after(policy.interval, policy.max_interval, streak)
    return Next(delay=min(delay, policy.expiration - waited))
