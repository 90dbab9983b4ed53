"""Naming a caller's bad input in an error without carrying it whole.

An error that quotes what it was sent whole can be larger than the channel it travels on:
a 10 KB database name quoted in an INVALID_ARGUMENT message overflows gRPC's 8 KB limit on
trailing metadata, and the caller is told RESOURCE_EXHAUSTED instead of what was wrong.  A
long path or key fills an HTTP answer, a log line or a terminal the same way.  So every
service and command quotes input through here: its first characters, enough to recognise
it, and its size.
"""

from __future__ import annotations

MAX_ECHO = 64  # characters of an input an error repeats


def _size(text: str) -> int:
    return len(text.encode("utf-8", "surrogatepass"))


def quoted(value: str, limit: int = MAX_ECHO) -> str:
    """`value` in quotes (as `repr`), cut to its first `limit` characters when longer, then
    its size: `'DB1xxxxx'…(10240 bytes)`."""
    if len(value) <= limit:
        return repr(value)
    return f"{value[:limit]!r}…({_size(value)} bytes)"


def clipped(text: str, limit: int = MAX_ECHO) -> str:
    """`text` as it is, cut to its first `limit` characters when longer, then its size (a
    request path in a sentence: `GET /v1/xxxx…(8190 bytes)`)."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}…({_size(text)} bytes)"
