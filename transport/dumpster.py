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


def evicted(
    entries: Iterable[Entry], *, total: int, now: float, max_time: float, max_size: int
) -> list[int]:
    """The ids of `entries` (one database's dumpster, oldest first, `total` bytes in all)
    that leave it: those older than `max_time`, and the oldest until the rest fit in
    `max_size` bytes (the newest one always stays).  `entries` is read only as far as
    needed: a dumpster within its bounds costs one entry, however large it is."""
    out: list[int] = []
    ahead = iter(entries)
    entry = next(ahead, None)
    while entry is not None:
        following = next(ahead, None)
        too_old = now - entry.delivered > max_time
        if not too_old and (total <= max_size or following is None):
            break
        out.append(entry.id)
        total -= entry.size
        entry = following
    return out
