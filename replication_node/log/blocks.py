"""Block mode's source: the open log's bytes as they become durable, in order.

The log stream's writer records every byte range it makes durable in the open log (`Block`:
the records of a group commit, a roll's DIGEST and CLOSE records with `closed` set, the next
generation's header at offset 0) and the stream publishes them to its `BlockFeed` after the
fsync, before any commit of the batch is answered.  Passive copies in block mode follow the
feed over a WebSocket (`shipping/blocks.py`): the open log's durable prefix read from disk, then
every block as it is published.  The feed keeps the most recent blocks only (`capacity`
bytes); a follower that falls further behind is dropped and goes back to file mode.

Blocks are made only while a copy follows (issue 52): a block is the log's bytes joined and
held in memory until they are durable, and a staged body's span holds many generations of
them (`writer.py`), about 0.7 times a 30 MiB item beside the request's own body, for no one
when every copy is in file mode.  A copy that asks to follow takes a `reader` first, before
it takes its `position`: every batch the writer begins from then on makes its blocks.  A
batch already being written when it came makes none, and is published as a `gap` (a block
with no bytes at the position the log is durable through); the follower reads what a gap
leaves out from the log's files, durable and named by then (`shipping/blocks.py`).  Without
a reader a gap is not kept: a copy that asks later starts at the next block, as after
`let_go_sent`.

The frames that carry them over the wire are `shipping/frames.py`.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass

from dag_common.clock import Clock, sleep_unless
from dag_common.model import Position
from replication_node.log.events import AtPosition

# Bytes a group commit's block keeps free in front of its data (`Block.room`), for a
# sender's frame header (`shipping/frames.py`): sent as one message without a copy of it.
FRAME_ROOM = 32


@dataclass(frozen=True, slots=True)
class Block(AtPosition):
    """Bytes made durable in the log at `position` (its generation's file, at an offset);
    `closed`: these are the roll's last bytes, the generation is closed after them.
    `room`: when given, the buffer `data` views, FRAME_ROOM bytes past its start (the writer
    joins a group commit's records there once: a sender writes its header in front of them
    instead of copying a megabyte into a frame of its own, issue 49).
    `gap`: no bytes; the log is durable through `position`, and what was written before it
    since the last block was made into no block (no copy followed when it was written): a
    follower reads it from the log's files."""

    position: Position
    data: bytes | memoryview
    closed: bool = False
    room: bytearray | None = None
    gap: bool = False

    @property
    def end(self) -> int:
        """The offset after the block's last byte."""
        return self.position.offset + len(self.data)

    @property
    def through(self) -> Position:
        """The position the log is durable through once the block is."""
        return Position(self.position.generation, self.end)


_NOTHING = Position(0, 0)  # a follower's acknowledgement before its first


class FeedBehind(Exception):
    """The follower asked for blocks the feed no longer keeps."""


class BlockFeed:
    """The recent durable blocks of one log stream, for followers on the event loop."""

    def __init__(self, *, generation: int, durable: int, capacity: int = 8 * 1024 * 1024) -> None:
        self._blocks: deque[tuple[int, Block]] = deque()  # (sequence, block)
        self._bytes = 0
        self._capacity = capacity
        self._next = 0  # the sequence number of the next block published
        self.generation = generation  # the open generation
        self.durable = durable  # its durable length
        self._changed = asyncio.Condition()
        self.closed = False
        # The copies following in block mode, and how far each holds the log durably.
        # (A node's connection counted: its old one may end after its new one began.)
        self._connections: dict[str, int] = {}
        self.acks: dict[str, Position] = {}
        self._moved = asyncio.Event()  # an ack came, or a follower came or went
        # Each running `follow`'s next sequence: what `let_go_sent` may not drop.
        self._cursors: dict[object, int] = {}
        self._kept_at_last_call = 0  # `_next` at the last `let_go_sent`
        self._readers = 0  # copies following, or asking to (`reader`)

    @property
    def followers(self) -> set[str]:
        return set(self._connections)

    @property
    def wanted(self) -> bool:
        """Whether a copy follows or asks to: the writer makes blocks for the batches it
        begins while one does."""
        return self._readers > 0

    @contextlib.contextmanager
    def reader(self) -> Iterator[None]:
        """Held by a copy's connection from before it takes its `position` until it ends:
        the writer makes blocks for every batch begun meanwhile."""
        self._readers += 1
        try:
            yield
        finally:
            self._readers -= 1

    def follower_joined(self, node: str) -> None:
        self._connections[node] = self._connections.get(node, 0) + 1
        self._moved.set()

    def follower_left(self, node: str) -> None:
        left = self._connections.get(node, 1) - 1
        if left > 0:
            self._connections[node] = left
        else:
            self._connections.pop(node, None)
            self.acks.pop(node, None)
        self._moved.set()

    def ack(self, node: str, position: Position) -> None:
        """The copy on `node` holds the log durably through `position`."""
        self.acks[node] = max(self.acks.get(node, _NOTHING), position)
        self._moved.set()

    def holding(self, position: Position) -> list[str]:
        """The followers that hold the log through `position`."""
        return sorted(n for n in self.followers if self.acks.get(n, _NOTHING) >= position)

    async def wait_for(self, enough: Callable[[], bool], seconds: float, clock: Clock) -> bool:
        """Wait up to `seconds` on `clock` until `enough()`; whether it is."""
        deadline = clock.monotonic() + seconds
        while not enough():
            left = deadline - clock.monotonic()
            if left <= 0 or self.closed:
                return enough()
            self._moved.clear()
            await sleep_unless(clock, left, self._moved)
        return True

    def position(self) -> tuple[int, int, int]:
        """(open generation, its durable length, the sequence of the next block): a
        consistent point to follow from, taken on the event loop."""
        return self.generation, self.durable, self._next

    async def publish(self, blocks: list[Block]) -> None:
        """Add blocks made durable (in order) and wake the followers.  The older blocks are
        dropped down to `capacity`, never the ones published here: a settle of many
        generations (`writer.SPAN_LIMIT`) publishes more than the capacity at once, and a
        follower that was caught up must find all of it.  A publish of gaps alone (a batch
        written while no copy followed) with no reader keeps nothing: no one holds a place
        in the feed, and a copy that asks later starts at the next block."""
        first = self._next
        if blocks and not (self._readers or self._cursors) and all(b.gap for b in blocks):
            self._blocks.clear()
            self._bytes = 0
            self._next += 1  # the feed moved (`idle_memory` reads it as activity)
            self.generation, self.durable = blocks[-1].position
            return
        for block in blocks:
            self._blocks.append((self._next, block))
            self._next += 1
            self._bytes += len(block.data)
            if block.closed:
                self.generation, self.durable = block.generation + 1, 0
            else:
                self.generation, self.durable = block.generation, block.end
        while self._bytes > self._capacity and self._blocks[0][0] < first:
            self._bytes -= len(self._blocks.popleft()[1].data)
        async with self._changed:
            self._changed.notify_all()

    def let_go_sent(self) -> int:
        """Drop the blocks every running follower has been given (all of them, without a
        follower); the bytes let go.  `publish` keeps the last publish whole whatever its
        size (a settle of many generations: 15 blocks, 14 MB after a burst of 30 MiB items,
        bench/README.md memory), and older blocks past `capacity` only until the next
        publish: an idle node held them for good.  A follower that joins later starts at
        the next block (`position`), so nothing dropped here is asked for again; one that
        took its `position` but has not started to follow yet may still ask for what was
        published since, so only blocks already kept at the last call are dropped (call it
        every so often while idle: the second call lets them go)."""
        floor = min(self._cursors.values(), default=self._next)
        floor, self._kept_at_last_call = min(floor, self._kept_at_last_call), self._next
        dropped = 0
        while self._blocks and self._blocks[0][0] < floor:
            size = len(self._blocks.popleft()[1].data)
            self._bytes -= size
            dropped += size
        return dropped

    async def close(self) -> None:
        """No more blocks: the stream stopped; followers end."""
        self.closed = True
        async with self._changed:
            self._changed.notify_all()

    async def follow(self, sequence: int, *, idle: float) -> AsyncIterator[Block | None]:
        """Every block from `sequence` on, as published; None after `idle` seconds without
        one (a heartbeat is due).  FeedBehind once the feed no longer keeps what is next."""
        cursor = object()
        try:
            while not self.closed:
                self._cursors[cursor] = sequence
                first = self._blocks[0][0] if self._blocks else self._next
                if sequence < first:
                    raise FeedBehind(
                        f"block {sequence} is gone from the feed (it keeps {first} on)"
                    )
                if sequence < self._next:
                    block = self._blocks[sequence - first][1]
                    sequence += 1
                    yield block
                    continue
                async with self._changed:  # the check again under the lock: no wake-up missed
                    try:
                        await asyncio.wait_for(
                            self._changed.wait_for(
                                lambda at=sequence: at < self._next or self.closed
                            ),
                            idle,
                        )
                        idle_passed = False
                    except TimeoutError:
                        idle_passed = True
                if idle_passed:
                    yield None
        finally:
            self._cursors.pop(cursor, None)
