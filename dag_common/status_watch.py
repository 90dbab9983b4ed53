"""The node's pushed status: `GET /v1/status/watch`, a long-lived NDJSON response.

One JSON object a line, each with its `kind`:

    {"kind": "snapshot", "status": {NodeStatus}}       first, once: every copy on the node
    {"kind": "copies", "copies": [CopyStatusReport]}   the copies whose status changed
    {"kind": "heartbeat"}                              nothing changed for `heartbeat` s

A watcher holds the node's status as the snapshot and the changes since make it; any line
(a heartbeat too) says the node still stands by what it last sent.  A line that does not
decode whole (`WatchProtocolError`) ends the watch: nothing of it is used.

`Coalescer` (pure, on the caller's clock) decides which changed copies go out now, called
once per look at the node's status: each copy has a small bucket of sends (`burst`),
refilled at `rate` a second, so a copy that moves once (a roll, a replay) is sent at once
and one that moves all the time (block mode under load) at most `rate` times a second,
always with its newest status.  A change held back goes out as soon as the copy is found
quiet (unchanged since the previous look), bucket or not: a burst of changes (a final sync's
writes, then the roll's copy, inspection and replay) ends with its last state one look
later, not a refill later, which is what a question waiting on that state needs.  (At
worst, a copy that changes every other look is sent every other look.)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson
from pydantic import ValidationError

from dag_common.model import CopyStatusReport, NodeStatus

CONTENT_TYPE = "application/x-ndjson"
MAX_LINE = 4 * 1024 * 1024  # a snapshot of a node with many copies fits well inside


class WatchProtocolError(Exception):
    """A watch line that is not one of the three kinds, whole and valid."""


@dataclass(frozen=True, slots=True)
class Snapshot:
    status: NodeStatus


@dataclass(frozen=True, slots=True)
class Changed:
    copies: tuple[CopyStatusReport, ...]


@dataclass(frozen=True, slots=True)
class Heartbeat:
    pass


WatchEvent = Snapshot | Changed | Heartbeat


def encode(event: WatchEvent) -> bytes:
    """One line of the watch (newline included)."""
    if isinstance(event, Snapshot):
        body = orjson.dumps({"kind": "snapshot", "status": event.status.model_dump(mode="json")})
    elif isinstance(event, Changed):
        copies = [c.model_dump(mode="json") for c in event.copies]
        body = orjson.dumps({"kind": "copies", "copies": copies})
    else:
        body = orjson.dumps({"kind": "heartbeat"})
    return body + b"\n"


def decode(line: bytes) -> WatchEvent:
    """The event a line carries; WatchProtocolError if it is not a whole, valid one."""
    try:
        body = orjson.loads(line)
    except orjson.JSONDecodeError as exc:
        raise WatchProtocolError(f"a line that is not JSON ({exc})") from None
    if not isinstance(body, dict):
        raise WatchProtocolError("a line that is not a JSON object")
    kind = body.get("kind")
    try:
        if kind == "snapshot":
            return Snapshot(NodeStatus.model_validate(body["status"]))
        if kind == "copies":
            copies = body["copies"]
            if not isinstance(copies, list):
                raise WatchProtocolError("copies is not a list")
            return Changed(tuple(CopyStatusReport.model_validate(c) for c in copies))
        if kind == "heartbeat":
            return Heartbeat()
    except KeyError as exc:
        raise WatchProtocolError(f"a {kind} line without {exc}") from None
    except ValidationError as exc:
        raise WatchProtocolError(
            f"a {kind} line with {exc.error_count()} invalid field(s)"
        ) from None
    raise WatchProtocolError(f"a line of unknown kind {kind!r}")


# Fields that move with time alone, not with replication: a change of only these is no news.
_TIMELY = frozenset({"lease_expires_in"})


def fingerprint(report: CopyStatusReport) -> tuple[Any, ...]:
    """What a change of a copy's status is judged by."""
    return tuple(v for k, v in report.__dict__.items() if k not in _TIMELY)


class Coalescer:
    """Which copies' changes go out now: at once while a copy has sends in its bucket, then
    at most `rate` a second, each time the copy's newest status."""

    def __init__(self, *, rate: float = 4.0, burst: int = 4) -> None:
        self._rate = rate
        self._burst = float(burst)
        self._sent: dict[tuple[str, str], tuple[Any, ...]] = {}
        self._tokens: dict[tuple[str, str], tuple[float, float]] = {}  # (tokens, at)
        self._held: dict[tuple[str, str], tuple[Any, ...]] = {}  # held back at the last look

    def sent(self, copies: list[CopyStatusReport], now: float) -> None:
        """These statuses went out whole (a snapshot): changes count from them."""
        for c in copies:
            self._sent[(c.database, c.node)] = fingerprint(c)
            self._tokens[(c.database, c.node)] = (self._burst, now)

    def due(self, copies: list[CopyStatusReport], now: float) -> list[CopyStatusReport]:
        """The copies whose status changed since last sent and may go out now (their sends
        taken); a change held back is found again on a later call, newer if it moved on,
        and goes out once found quiet."""
        out = []
        for c in copies:
            key = (c.database, c.node)
            mark = fingerprint(c)
            if self._sent.get(key) == mark:
                continue
            tokens, at = self._tokens.get(key, (self._burst, now))
            tokens = min(self._burst, tokens + (now - at) * self._rate)
            if tokens < 1.0 and self._held.get(key) != mark:
                self._tokens[key] = (tokens, now)
                self._held[key] = mark  # still moving: held back
                continue
            self._tokens[key] = (max(0.0, tokens - 1.0), now)
            self._sent[key] = mark
            self._held.pop(key, None)
            out.append(c)
        return out
