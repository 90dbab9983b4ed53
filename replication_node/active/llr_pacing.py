"""When LLR's paced write of a large body gives way to the log (pure policy).

The database file's writes of a large body go a chunk at a time (`storage/writebehind.py`);
before each chunk, LLR asks here whether to wait.  The log stream's writes are what a
committer waits for; the database file's are not (the log holds every transaction LLR has
not written yet), so on a shared disk the log goes first:

- While a large body is being staged into the log (a large commit is on its way) and no small
  commits flow, LLR holds its chunks back altogether (`yields`): the log's parts, their fsyncs
  at each settle and the commit's fsync then have the disk to themselves. With LLR writing the
  same bodies into the database file beside it (its WAL, then the checkpoint: twice the log's
  bytes), the log committed 8 MiB items at half the rate it reached alone (bench/README.md,
  large_items run 6).
- While the log's small commits flow, LLR pauses PAUSE before each chunk (`llr_pause`), and
  its chunks are of PACED_CHUNK (`llr_chunk`), so that a commit's log write, journal commit
  and cache flush find the disk free rather than behind the next chunk, and carry little of
  the database file's writes when they do not (bench/large_items.py, part 2).  It does not
  yield to a large body then: held back, it fell past MAX_BACKLOG, and caught up without
  pausing, in bursts the small commits waited behind (part 2's p99 beside large items went
  from 2.2-2.6x its p99 alone to 2.5-3.0x).

Bounds: LLR yields only while it is at most YIELD_BACKLOG generations behind the generation
it is due to write (closed - llr_depth + 1), and pauses only while at most MAX_BACKLOG
behind; further behind, it writes without waiting.  So giving way can delay the database file
by at most YIELD_BACKLOG generations beyond what the disk itself allows, and the overlay's
memory (the bodies of the transactions not yet written) and the logs the active keeps grow by
no more.  YIELD_BACKLOG covers a whole item of the default `max_item_size` (36 MiB, 37
generations of the seeds' 1 MiB): the largest commit a database takes by default goes to the
disk without LLR beside it.
"""

from __future__ import annotations

# While small commits flow: chunks of 256 KiB (not writebehind.CHUNK, 1 MiB) with a pause of
# 0.5 ms before each, the pace of 2 ms a MiB in four smaller steps.  A small commit's log fsync
# then finds at most 256 KiB of the database file's writes in front of it, and its cache
# flush carries little more.  On a disk whose flush of 8 MiB took 17 ms, 1 MiB chunks left the
# small commits' p99 beside 8 MiB items at 2.6-3.9x their p99 alone (median 3.4, 22 runs; issue
# 29's target 2 is 3x); paced chunks of 256 KiB brought it to 1.8-2.5x in four runs (2.6-3.6x
# for 1 MiB in the runs between them; bench/large_items.py part 2, bench/README.md
# large_items run 8).  Only then: written back without pauses (no commits flow, or LLR is
# far behind), 256 KiB chunks gained the log's large commits beside them nothing (part 1,
# within the noise), so there, as in a passive's replay, the chunks stay 1 MiB.
PAUSE = 0.0005
PACED_CHUNK = 256 << 10
MAX_BACKLOG = 8
# How long LLR waits at a time while it yields (it looks again after each wait), and at
# most in all before one chunk: the stream's `staging` reads a clock, and a clock that stands
# still (a test's) or a body staged for minutes must not hold the database lock for longer.
YIELD_STEP = 0.002
YIELD_STEPS = 250
YIELD_BACKLOG = 40


def yields(*, staging: bool, commits_flowing: bool, backlog: int) -> bool:
    """Whether LLR holds its next chunk back: a large body is being staged into the log, no
    small commits flow, and LLR is at most YIELD_BACKLOG generations behind."""
    return staging and not commits_flowing and backlog <= YIELD_BACKLOG


def llr_chunk(pause: float) -> int | None:
    """The size of the chunk written after a pause of `pause` seconds (`llr_pause`):
    PACED_CHUNK after a pause, else None (the write-behind's own chunk)."""
    return PACED_CHUNK if pause else None


def llr_pause(*, commits_flowing: bool, backlog: int) -> float:
    """Seconds to pause before the next chunk: PAUSE while commits flow and LLR is at most
    MAX_BACKLOG generations behind; else 0."""
    if not commits_flowing or backlog > MAX_BACKLOG:
        return 0.0
    return PAUSE
