"""Human durations in config files and on command lines: `500ms`, `30s`, `15m`, `2h`, `1d`,
or plain seconds.  Plain Python: a command line parses its durations without pydantic (the
config's field type, `dag_common.model.Duration`, is built on these two functions)."""

from __future__ import annotations

import re
from datetime import timedelta

_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0, "d": 86400.0}
_PART = re.compile(r"(\d+(?:\.\d+)?)\s*(ms|min|s|m|h|d)")


def parse_duration(value: object) -> timedelta:
    """Parse `1h30m`, `90s`, `0s`, `1.5`, or a timedelta; raise ValueError otherwise."""
    if isinstance(value, timedelta):
        return value
    if isinstance(value, bool):
        raise ValueError("a duration, such as 30s or 15m, is required")
    if isinstance(value, int | float):
        if value < 0:
            raise ValueError("a duration cannot be negative")
        return timedelta(seconds=float(value))
    if not isinstance(value, str):
        raise ValueError("a duration, such as 30s or 15m, is required")
    text = value.strip().lower()
    if not text:
        raise ValueError("empty duration")
    pos, total = 0, 0.0
    for match in _PART.finditer(text):
        if match.start() != pos:
            break
        total += float(match.group(1)) * _UNITS[match.group(2)]
        pos = match.end()
    if pos != len(text):
        raise ValueError(f"{value!r} is not a duration (use e.g. 500ms, 30s, 15m, 2h, 1d)")
    return timedelta(seconds=total)


def format_duration(value: timedelta) -> str:
    """Render a duration the way the config accepts it."""
    seconds = value.total_seconds()
    return f"{seconds:g}s"
