"""The aggregation's options as one frozen value, parsed and checked once at the edge."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from dag_common.durations import parse_duration
from dag_common.guarantee.values import Limits
from spark_metrics.errors import BadInputError

DAY_S = 86_400


@dataclass(frozen=True, slots=True)
class AggregateOptions:
    """What `spark-metrics aggregate` was asked to do."""

    input: Path
    output: Path
    window_s: int = 60
    since: datetime | None = None  # inclusive
    until: datetime | None = None  # exclusive
    master: str | None = None  # None: local[*], or the master spark-submit was given
    conf: Mapping[str, str] = field(default_factory=dict)
    limits: Limits = field(default_factory=Limits)
    full: bool = False  # recompute every date, ignoring what earlier runs did


def parse_window(text: str) -> int:
    """A window such as `1m`, `15m`, `1h`, `1d` in whole seconds; it must divide a day, so
    that windows (aligned to UTC midnight) never straddle two dates."""
    try:
        seconds = parse_duration(text).total_seconds()
    except ValueError as exc:
        raise BadInputError(f"--window: {exc}") from exc
    if seconds < 1 or seconds != int(seconds) or DAY_S % int(seconds):
        raise BadInputError(
            f"--window {text}: must be whole seconds that divide a day (1m, 5m, 1h, 1d, ...)"
        )
    return int(seconds)


def parse_time(text: str, name: str) -> datetime:
    """An ISO 8601 time (`2026-11-22`, `2026-11-22T10:00`, with or without a zone; UTC if
    none is given)."""
    try:
        value = datetime.fromisoformat(text)
    except ValueError as exc:
        raise BadInputError(f"{name} {text!r}: not an ISO 8601 time ({exc})") from exc
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def parse_conf(pairs: list[str]) -> dict[str, str]:
    """`k=v` pairs for Spark's configuration."""
    conf = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise BadInputError(f"--conf {pair!r}: expected key=value")
        conf[key.strip()] = value
    return conf


def check_range(since: datetime | None, until: datetime | None) -> None:
    """--since must come before --until."""
    if since is not None and until is not None and since >= until:
        raise BadInputError(
            f"--since {since.isoformat()} is not before --until {until.isoformat()}"
        )


WINDOW_NAMES = {60: "1m", 300: "5m", 900: "15m", 3600: "1h", DAY_S: "1d"}


def describe_window(window_s: int) -> str:
    """`1m` for 60, `90s` for 90."""
    return WINDOW_NAMES.get(window_s) or f"{window_s}s"
