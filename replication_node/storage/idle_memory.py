"""A node gone quiet gives back what its last burst left resident (issue 52: within 25 % of
its resting RSS when idle).

After a burst of large items a node held 2.2-2.8 times its resting RSS for as long as it
stayed idle (bench/README.md, memory).  What held it, found with /proc/PID/smaps and a scan of
the live objects, and what gives each back:

- **SQLite's copy of the last body each statement bound** (25-30 MB on every node: the last
  item replayed or flushed, one whole copy in SQLite's own memory): cleared after every write
  of large bodies (`Database.apply`) and here (`dag_common/sqlite_memory.py`).
- **SQLite's page caches** (16 MiB for the writing connection): `PRAGMA shrink_memory` here.
  Not after every write: a replay's next batch wants the index pages it holds.
- **The free memory those leave in the malloc arenas** of the threads that wrote (the page
  cache is allocated by the replay and LLR worker threads, in their own arenas, where freed
  pages stay resident): `malloc_trim(0)` (`dag_common.memory.trim_heap`) once the above are
  freed.  Without freeing them first it gives back nothing, as the first look found; after,
  each passive went back to its resting RSS (105 -> 62 MB, rest 63).  Capping the number of
  arenas (M_ARENA_MAX) would not: the pages are in use until SQLite frees them, whichever
  arena they are in.
- **The active's block-mode buffer**: the blocks every follower has been sent, at every
  tick (`BlockFeed.let_go_sent`).
- **What the node keeps for its next writes while busy** (`Holders.let_go`): the message
  stager's part buffers (`active/message_staging.py`), let go of before the trim, on the
  event loop that owns them.

**What the heap keeps while busy** (`HEAP_BLOCKS`, `HEAP_TOP`, `HEAP_ARENAS`: the node's
allocator, `dag_common.memory.busy_heap`, set by `replication-node serve`; the transport's
too, which trims it when quiet with `dag_common.memory.trim_when_quiet`).  A node
takes and frees blocks of about a megabyte all the time: each generation the LLR flush, the
replay and the inspection read whole, each part read alone, each group commit's block.  With
glibc's mmap threshold held at 128 KiB each was a fresh mapping, zero-filled page by page as
it was written and unmapped when freed: ~600 page faults a MiB delivered on the active,
~1,100 on a passive (with the unmaps, 10 % and 20 % of their CPU on the 1 MiB LMTP path;
issue 49).  Up to HEAP_BLOCKS they come from the heap instead, where a block freed is the
next one's, already mapped, and the heap keeps HEAP_TOP free at its top before giving it
back; a body past HEAP_BLOCKS is still its own mapping, unmapped as soon as it is freed
(issue 52's reason for the threshold: a node that wrote 30 MiB items held them).  What the
heap holds after a burst is given back here, with the rest (`trim_heap`), once the node is
quiet: its free pages inside every arena and the free top of the main one, which is why the
node's threads share that one (`HEAP_ARENAS`: a thread's own arena keeps its free top, up
to HEAP_TOP, whatever `malloc_trim` is asked).  Measured (bench/README.md, "lmtp: the
active's part buffers"): ~30 page faults a MiB on both, their CPU a MiB 13 % and 25 % less;
`bench/memory.py --quick` kept every target, each node back at its rest when idle.

Quiet means nothing was written for a whole `interval`: no database's waypoint moved and no
log block was published.  Then, once per burst, everything above is released (a worker
thread: the trim walks the arenas); a database busy at that moment is tried again at the next
tick.  At each quiet tick after that the heap alone is trimmed again: reads write nothing,
so a burst of them (a 30 MiB body sent a part at a time) is no burst here, and what they
left in the heap (up to HEAP_TOP) is given back within an interval or two all the same (a
trim: a millisecond or so, each quiet tick).  The cost while busy is nothing; after a burst,
a first write that reads its index pages back from the OS's page cache.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from dag_common.clock import Clock
from dag_common.memory import trim_heap
from replication_node.log.blocks import BlockFeed
from replication_node.storage.database import Database

logger = logging.getLogger(__name__)

# How long a node must have written nothing before it gives memory back.
IDLE_INTERVAL = 5.0


@dataclass(frozen=True, slots=True)
class Holders:
    """What a node holds memory in: its open database files, its active copies' feeds, and
    what it keeps for its next writes while busy (`let_go`: each drops it, on the loop)."""

    databases: Sequence[Database]
    feeds: Sequence[BlockFeed]
    let_go: Sequence[Callable[[], object]] = ()

    def activity(self) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """A mark that moves with every write: each database's waypoint, each feed's next
        block."""
        return (
            tuple(db.header.waypoint for db in self.databases),
            tuple(feed.position()[2] for feed in self.feeds),
        )


@dataclass(frozen=True, slots=True)
class IdleState:
    """The marks `release_due` decides on: the last tick's and the last release's."""

    last: object = None
    released: object = None


def release_due(state: IdleState, mark: object) -> tuple[bool, IdleState]:
    """Whether to release now, given this tick's activity `mark`: quiet for a whole interval
    (the same mark as the last tick's) and not released at this mark yet."""
    due = mark == state.last and mark != state.released
    return due, IdleState(last=mark, released=state.released)


class IdleMemory:
    """Every `interval`, release what the node holds if it has been quiet (module docstring)."""

    def __init__(
        self, *, holders: Callable[[], Holders], clock: Clock, interval: float = IDLE_INTERVAL
    ) -> None:
        self._holders = holders
        self._clock = clock
        self._interval = interval
        self.releases = 0  # how many times it released (a test reads it)
        self.trims = 0  # quiet ticks after a release that trimmed the heap alone

    async def run(self) -> None:
        state = IdleState()
        while True:
            await self._clock.sleep(self._interval)
            holders = self._holders()
            for feed in holders.feeds:  # cheap, and needs two ticks (`let_go_sent`)
                feed.let_go_sent()
            mark = holders.activity()
            quiet = mark == state.last
            due, state = release_due(state, mark)
            if not due:
                if quiet:  # released already: what reads left in the heap since (HEAP_TOP)
                    await asyncio.to_thread(trim_heap)
                    self.trims += 1
                continue
            try:
                done = await self.release(holders)
            except Exception:
                logger.exception("giving idle memory back failed; will try at the next quiet tick")
                continue
            if done:
                state = IdleState(last=state.last, released=state.last)

    async def release(self, holders: Holders) -> bool:
        """Release everything now; False if a database was busy (tried again later)."""
        for let_go in holders.let_go:
            let_go()
        released = await asyncio.to_thread(_release, holders.databases)
        self.releases += 1
        logger.debug("idle: SQLite's memory released and the heap trimmed")
        return released


def _release(databases: Sequence[Database]) -> bool:
    released = all([db.release_memory() for db in databases])
    trim_heap()
    return released
