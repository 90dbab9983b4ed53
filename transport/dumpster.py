"""The transport dumpster's rule (pure): what leaves it.

The seeds: a message stays in the dumpster of its database for MaxDumpsterTime (7 days)
unless the database's dumpster outgrows MaxDumpsterSizePerStorageGroup (18 MB); either way
"messages are removed from the transport dumpster by order of first in, first out".  So a
single message larger than the limit empties the database's dumpster of everything else
(the seeds' warning): the newest message is always kept, whatever its size, because it is
the one a failover right now would need.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True)
class Entry:
    """A delivered message in one database's dumpster."""

    id: int
    delivered: float  # wall time, epoch seconds
    size: int


def evicted(entries: Iterable[Entry], *, now: float, max_time: float, max_size: int) -> list[int]:
    """The ids of `entries` (one database's, oldest first) that leave the dumpster: those
    older than `max_time`, then the oldest until the rest fit in `max_size` bytes (the
    newest one always stays)."""
    kept = list(entries)
    out = [e.id for e in kept if now - e.delivered > max_time]
    kept = [e for e in kept if now - e.delivered <= max_time]
    total = sum(e.size for e in kept)
    for entry in kept[:-1]:
        if total <= max_size:
            break
        out.append(entry.id)
        total -= entry.size
    return out
