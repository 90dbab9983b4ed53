"""The last answer the service gave per (database, method), for the status page.

The servicer records every answer it sends (never an aborted call: those carry no status);
the status page reads a frozen copy. Bounded twice over: at most `capacity` entries (the
servicer only answers for configured databases, so in practice two per database; the cap
holds whatever a caller does), and each reason is shortened to `max_reason` characters
when recorded, so a long multi-copy reason does not sit in memory for the page to cut.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum

from dag_common.model import DataMoveReplicationConstraint as Constraint
from dag_common.model import GuaranteeStatus

MAX_REASON = 200  # characters kept of an answer's reason
ELLIPSIS = "…"


class Method(StrEnum):
    """The two questions of the Data Guarantee API."""

    HEALTH = "CheckReplicationHealth"
    FLUSH = "CheckReplicationFlush"


@dataclass(frozen=True, slots=True)
class LastAnswer:
    """One answer as given: to whom, when (UTC), what, and why (shortened)."""

    database: str
    method: Method
    status: GuaranteeStatus
    at: datetime
    caller_id: str
    constraint: Constraint
    reason: str


def shorten(text: str, limit: int = MAX_REASON) -> str:
    """`text` cut to at most `limit` characters, ending in an ellipsis when cut."""
    if len(text) <= limit:
        return text
    return text[: max(0, limit - len(ELLIPSIS))].rstrip() + ELLIPSIS


class LastAnswers:
    """The newest answer per (database, method), at most `capacity` of them."""

    def __init__(self, *, capacity: int = 1024, max_reason: int = MAX_REASON) -> None:
        self._capacity = capacity
        self._max_reason = max_reason
        self._answers: OrderedDict[tuple[str, Method], LastAnswer] = OrderedDict()

    def record(
        self,
        *,
        database: str,
        method: Method,
        status: GuaranteeStatus,
        at: datetime,
        caller_id: str,
        constraint: Constraint,
        reason: str,
    ) -> None:
        """Remember this answer in place of the last one for (database, method)."""
        key = (database, method)
        self._answers.pop(key, None)
        self._answers[key] = LastAnswer(
            database, method, status, at, caller_id, constraint, shorten(reason, self._max_reason)
        )
        while len(self._answers) > self._capacity:
            self._answers.popitem(last=False)  # the least recently answered goes first

    def get(self, database: str, method: Method) -> LastAnswer | None:
        return self._answers.get((database, method))

    def all(self) -> tuple[LastAnswer, ...]:
        """Every remembered answer, oldest first."""
        return tuple(self._answers.values())
