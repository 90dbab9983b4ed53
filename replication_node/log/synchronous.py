"""Synchronous commit in block mode: a commit is answered only once `copies` copies following
the log in block mode hold it (`LogStream.set_synchronous`).

Before a commit is written: at least `copies` copies must follow, waited for up to `wait`
seconds, else the commit is refused with nothing written (`followers`).  After its batch is
durable: they must hold it within `wait` seconds (`held`), else the stream stops and the
commit, durable here but not held by them, is never answered (crash recovery reads it back:
its outcome was not given).
"""

from __future__ import annotations

from dag_common.clock import Clock
from replication_node.errors import SynchronousCopiesMissing
from replication_node.log.blocks import Block, BlockFeed


class SynchronousCommit:
    """How many copies must hold a commit before it is answered, and the waits for them."""

    def __init__(self, *, feed: BlockFeed, clock: Clock) -> None:
        self._feed = feed
        self._clock = clock
        self.copies = 0  # 0: asynchronous, answered once durable here
        self.wait = 0.0

    def set(self, copies: int, wait: float) -> None:
        """Answer a commit only once `copies` copies hold it (waiting up to `wait` seconds)."""
        self.copies, self.wait = copies, wait

    async def followers(self) -> None:
        """SynchronousCopiesMissing (nothing written) unless at least `copies` copies follow
        in block mode, waiting up to the wait."""
        need, feed = self.copies, self._feed
        if not need or len(feed.followers) >= need:
            return
        if await feed.wait_for(lambda: len(feed.followers) >= need, self.wait, self._clock):
            return
        following = ", ".join(sorted(feed.followers)) or "none"
        raise SynchronousCopiesMissing(
            f"{len(feed.followers)} of {need} synchronous copies follow the log in block "
            f"mode ({following}) after {self.wait:g}s: the commit was refused, nothing "
            "was written"
        )

    async def held(self, last: Block) -> BaseException | None:
        """Wait until enough copies hold the batch (through `last`); else why not."""
        position, need, feed = last.through, self.copies, self._feed
        if await feed.wait_for(lambda: len(feed.holding(position)) >= need, self.wait, self._clock):
            return None
        holding = feed.holding(position)
        return SynchronousCopiesMissing(
            f"{len(holding)} of {need} synchronous copies held the commit within "
            f"{self.wait:g}s ({', '.join(holding) or 'none'}): it is durable here but "
            "was not acknowledged"
        )
