"""Block mode's wire: one frame per binary WebSocket message (`blocks.py` serves and reads
them; `log/blocks.py` is the feed they carry).

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

import struct
from dataclasses import dataclass
from enum import IntEnum

import crc32c

from dag_common.model import Position
from replication_node.errors import LogFormatError
from replication_node.log.blocks import FRAME_ROOM


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
assert FRAME_HEADER <= FRAME_ROOM, "a block's room holds a frame's header"


@dataclass(frozen=True, slots=True)
class Frame:
    kind: FrameKind
    generation: int = 0
    offset: int = 0
    payload: bytes | memoryview = b""  # a decoded DATA frame's: a view of the message
    crc: int = 0  # DATA: the payload's; CLOSED: the whole closed file's

    # The generation and offset stay fields: they are the header's, one for one.
    @property
    def position(self) -> Position:
        """DATA: where the payload goes; CLOSED: the closed file's end; ACK: held through."""
        return Position(self.generation, self.offset)


def encode_frame(frame: Frame, room: bytearray | None = None) -> bytes | memoryview:
    """The frame's bytes.  `room`: a buffer whose bytes past FRAME_ROOM are the payload
    (`log.blocks.Block.room`): the header is written in front of them there and the frame
    is a view of it, not a copy of the payload (the same header for every follower)."""
    crc = crc32c.crc32c(frame.payload) if frame.kind is not FrameKind.CLOSED else frame.crc
    head = _FRAME.pack(frame.kind, frame.generation, frame.offset, len(frame.payload), crc)
    if room is None or len(room) != FRAME_ROOM + len(frame.payload):
        return head + frame.payload
    start = FRAME_ROOM - FRAME_HEADER
    room[start:FRAME_ROOM] = head
    return memoryview(room)[start:]


def decode_frame(data: bytes) -> Frame:
    """One frame; BlockProtocolError if it is not a whole, valid one."""
    if len(data) < FRAME_HEADER:
        raise BlockProtocolError(f"a block frame of {len(data)} bytes is shorter than its header")
    kind, generation, offset, length, crc = _FRAME.unpack_from(data)
    try:
        kind = FrameKind(kind)
    except ValueError:
        raise BlockProtocolError(f"unknown block frame kind {kind}") from None
    # A DATA frame's payload is a view past the header, not a copy (it is up to a log
    # generation: a copy was a fresh megabyte, its page faults and its memcpy, per block).
    payload = memoryview(data)[FRAME_HEADER:] if kind is FrameKind.DATA else data[FRAME_HEADER:]
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
