"""Block mode's source and wire: the open log's bytes as they become durable, in order.

The log stream's writer records every byte range it makes durable in the open log (`Block`:
the records of a group commit, a roll's DIGEST and CLOSE records with `closed` set, the next
generation's header at offset 0) and the stream publishes them to its `BlockFeed` after the
fsync, before any commit of the batch is answered.  Passive copies in block mode follow the
feed over a WebSocket (`http/blocks.py`): the open log's durable prefix read from disk, then
every block as it is published.  The feed keeps the most recent blocks only (`capacity`
bytes); a follower that falls further behind is dropped and goes back to file mode.

Frames (binary WebSocket messages), big-endian: kind (1 byte), generation (8), offset (8),
length (4), CRC32C (4), then `length` bytes of payload:

- DATA: the generation's file bytes at [offset, offset + length); the CRC is the payload's;
- CLOSED: the generation is closed; offset is the closed file's length and the CRC that of
  the whole file (what the copy's buffer must equal);
- HELLO: the payload is JSON: the stream's log signature, the active's node and epoch;
- HEARTBEAT: nothing happened for a while.

The copy answers ACK frames (generation, offset: durable through there) for synchronous
commit.  Decoding checks the kind, the length and the CRC; the receiver checks the order.
"""

from __future__ import annotations

import asyncio
import struct
from collections import deque
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from enum import IntEnum

import crc32c

from dag_common.clock import Clock
from dag_common.tasks import cancel_and_wait
from replication_node.errors import LogFormatError


class BlockProtocolError(LogFormatError):
    """A block frame that is malformed, fails its CRC, or comes out of order."""


class FrameKind(IntEnum):
    HELLO = 1
    DATA = 2
    CLOSED = 3
    HEARTBEAT = 4
    ACK = 5


_FRAME = struct.Struct("!BQQII")
FRAME_HEADER = _FRAME.size


@dataclass(frozen=True, slots=True)
class Frame:
    kind: FrameKind
    generation: int = 0
    offset: int = 0
    payload: bytes = b""
    crc: int = 0  # DATA: the payload's; CLOSED: the whole closed file's


def encode_frame(frame: Frame) -> bytes:
    crc = crc32c.crc32c(frame.payload) if frame.kind is not FrameKind.CLOSED else frame.crc
    head = _FRAME.pack(frame.kind, frame.generation, frame.offset, len(frame.payload), crc)
    return head + frame.payload


def decode_frame(data: bytes) -> Frame:
    """One frame; BlockProtocolError if it is not a whole, valid one."""
    if len(data) < FRAME_HEADER:
        raise BlockProtocolError(f"a block frame of {len(data)} bytes is shorter than its header")
    kind, generation, offset, length, crc = _FRAME.unpack_from(data)
    try:
        kind = FrameKind(kind)
    except ValueError:
        raise BlockProtocolError(f"unknown block frame kind {kind}") from None
    payload = data[FRAME_HEADER:]
    if len(payload) != length:
        raise BlockProtocolError(
            f"block frame of generation {generation} at {offset}: {len(payload)} bytes of "
            f"payload, its header says {length}"
        )
    if kind is not FrameKind.CLOSED and crc32c.crc32c(payload) != crc:
        raise BlockProtocolError(
            f"block frame of generation {generation} at {offset} fails its CRC32C"
        )
    return Frame(kind, generation, offset, payload, crc)


@dataclass(frozen=True, slots=True)
class Block:
    """Bytes made durable in generation `generation`'s file at `offset`; `closed`: these are
    the roll's last bytes, the generation is closed after them."""

    generation: int
    offset: int
    data: bytes
    closed: bool = False

    @property
    def end(self) -> int:
        return self.offset + len(self.data)


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
        self.acks: dict[str, tuple[int, int]] = {}
        self._moved = asyncio.Event()  # an ack came, or a follower came or went

    @property
    def followers(self) -> set[str]:
        return set(self._connections)

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

    def ack(self, node: str, generation: int, offset: int) -> None:
        """The copy on `node` holds the log durably through (`generation`, `offset`)."""
        self.acks[node] = max(self.acks.get(node, (0, 0)), (generation, offset))
        self._moved.set()

    def holding(self, position: tuple[int, int]) -> list[str]:
        """The followers that hold the log through `position` (generation, offset)."""
        return sorted(n for n in self.followers if self.acks.get(n, (0, 0)) >= position)

    async def wait_for(self, enough: Callable[[], bool], seconds: float, clock: Clock) -> bool:
        """Wait up to `seconds` on `clock` until `enough()`; whether it is."""
        deadline = clock.monotonic() + seconds
        while not enough():
            left = deadline - clock.monotonic()
            if left <= 0 or self.closed:
                return enough()
            self._moved.clear()
            moved = asyncio.ensure_future(self._moved.wait())
            timer = asyncio.ensure_future(clock.sleep(left))
            try:
                await asyncio.wait({moved, timer}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                await cancel_and_wait([moved, timer])
        return True

    def position(self) -> tuple[int, int, int]:
        """(open generation, its durable length, the sequence of the next block): a
        consistent point to follow from, taken on the event loop."""
        return self.generation, self.durable, self._next

    async def publish(self, blocks: list[Block]) -> None:
        """Add blocks made durable (in order) and wake the followers."""
        for block in blocks:
            self._blocks.append((self._next, block))
            self._next += 1
            self._bytes += len(block.data)
            if block.closed:
                self.generation, self.durable = block.generation + 1, 0
            else:
                self.generation, self.durable = block.generation, block.end
        while self._bytes > self._capacity and len(self._blocks) > 1:
            self._bytes -= len(self._blocks.popleft()[1].data)
        async with self._changed:
            self._changed.notify_all()

    async def close(self) -> None:
        """No more blocks: the stream stopped; followers end."""
        self.closed = True
        async with self._changed:
            self._changed.notify_all()

    async def follow(self, sequence: int, *, idle: float) -> AsyncIterator[Block | None]:
        """Every block from `sequence` on, as published; None after `idle` seconds without
        one (a heartbeat is due).  FeedBehind once the feed no longer keeps what is next."""
        while not self.closed:
            first = self._blocks[0][0] if self._blocks else self._next
            if sequence < first:
                raise FeedBehind(f"block {sequence} is gone from the feed (it keeps {first} on)")
            if sequence < self._next:
                block = self._blocks[sequence - first][1]
                sequence += 1
                yield block
                continue
            async with self._changed:  # the check again under the lock: no wake-up missed
                try:
                    await asyncio.wait_for(
                        self._changed.wait_for(lambda at=sequence: at < self._next or self.closed),
                        idle,
                    )
                    idle_passed = False
                except TimeoutError:
                    idle_passed = True
            if idle_passed:
                yield None
