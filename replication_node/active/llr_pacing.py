"""How long LLR's paced write of a large body gives way between two chunks (pure policy).

The database file's writes of a large body go a chunk at a time (`storage/writebehind.py`);
between two chunks, while the log's small commits flow, LLR pauses, so that a commit's log
write, journal commit and cache flush find the disk free rather than behind the next chunk
(bench/large_items.py, part 2).

Bound: LLR pauses only while it is at most MAX_BACKLOG generations behind the generation it
is due to write (closed - llr_depth + 1); further behind, it writes without a pause.  So
pacing can delay the database file by at most that many generations beyond what the disk
itself allows, and the overlay's memory and the logs the active keeps grow by no more.
"""

from __future__ import annotations

# A 1 MiB chunk is 1-2 ms of writes on the bench's disk; a small commit's fsync 1-3 ms.
PAUSE = 0.002
MAX_BACKLOG = 8


def llr_pause(*, commits_flowing: bool, backlog: int) -> float:
    """Seconds to pause before the next chunk: PAUSE while commits flow and LLR is at most
    MAX_BACKLOG generations behind; else 0."""
    if not commits_flowing or backlog > MAX_BACKLOG:
        return 0.0
    return PAUSE
