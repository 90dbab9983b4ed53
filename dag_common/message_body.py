"""A message a client writes to a node as its bytes (`PUT …/items/{id}/message`), sent a slice
at a time, and the node's answer checked against what was sent.

The body is bytes the caller holds (the IMAP front's APPEND), the parts a message came in
(the transport's delivery of a message it has just queued, `transport/delivery.py`) or a
file (the transport's queue keeps a large body in a file of its own, `transport/bodies.py`).
Each is sent in slices of SLICE bytes at most with its Content-Length (the node takes its
memory budget's share by it, and refuses one over its max_item_size with 413 before reading
it).  Bytes handed to aiohttp
whole are written to the socket at once, and what the kernel does not take is copied into
asyncio's write buffer (a node that does not read at once: up to the whole body again); in
slices the buffer holds one slice.  A file is read a slice at a time in a worker thread, so
a delivery holds SLICE bytes of its body, not the body.

Each attempt (the client asks again after a switchover or an unreachable node) sends the
body afresh: `payload` is a new iterator each time.  The node answers the SHA-256 of the
message it stored (`X-Message-SHA256`, the item's hash) and its CRC32C (`X-Message-CRC32C`);
`check` compares the CRC32C with that of what the attempt sent, so bytes changed on the way
(or a file changed under the sender) are an error, not an item written wrong in silence.

Why the CRC32C and not the SHA-256: the check is against accidents (a byte flipped or lost
between the sender's memory or file and the node's log), which a CRC32C catches as the log's
own records do (every burst up to 32 bits, any other change but one in 2^32), and it costs a
tenth of the SHA-256 (Castagnoli's instruction, against ~0.6 ms of CPU a MiB: the transport's
largest cost after its own writes, issue 49).  Neither is a defence against a forger on the
way: TLS and the node's token are.  A node that answers no CRC32C (one from before it) is not
checked, as one that answers no digest never was.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import BinaryIO

import crc32c

SLICE = 256 * 1024  # bytes sent at a time: asyncio's buffer holds one at most
# A file's slice is read in pieces of this many bytes (one trip to a thread for the slice):
# under the allocator's mmap threshold (`dag_common.memory`), each comes from the heap, whose
# pages are reused, rather than a fresh mapping faulted in page by page and unmapped once
# sent (four a MiB at 256 KiB, about 0.6 ms of the sender's CPU, issue 49).
PIECE = 64 * 1024
DIGEST_HEADER = "X-Message-SHA256"  # the stored message's SHA-256, hex (the item's hash)
CRC_HEADER = "X-Message-CRC32C"  # its CRC32C, 8 hex digits: what `check` compares


def digest_headers(sha256: str, crc: int) -> dict[str, str]:
    """A node's answer to a message written: the headers naming what it stored."""
    return {DIGEST_HEADER: sha256, CRC_HEADER: f"{crc:08x}"}


class BodyChanged(OSError):
    """The file did not hold `size` bytes when it was sent (changed since it was named)."""


Parts = tuple[bytes | bytearray, ...]  # a message's bytes in order, never joined


class MessageBody:
    """A message's bytes to send: `source` is the bytes, their parts in order, or a file
    holding them whole."""

    def __init__(self, source: bytes | bytearray | memoryview | Parts | Path) -> None:
        self._source = source
        if isinstance(source, Path):
            self.size = source.stat().st_size
        elif isinstance(source, tuple):
            self.size = sum(map(len, source))
        else:
            self.size = len(source)
        self._sent = 0  # the CRC32C of what the last attempt has sent so far
        self._count = 0

    def payload(self) -> AsyncIterator[memoryview | bytes]:
        """The body for one attempt, a slice at a time (a new iterator each call)."""
        self._sent = 0
        self._count = 0
        if isinstance(self._source, Path):
            return self._from_file(self._source)
        if isinstance(self._source, tuple):
            return self._from_bytes(self._source)
        return self._from_bytes((self._source,))

    async def _from_bytes(
        self, parts: tuple[bytes | bytearray | memoryview, ...]
    ) -> AsyncIterator[memoryview]:
        for whole in parts:
            view = memoryview(whole)
            for at in range(0, len(view), SLICE):
                part = view[at : at + SLICE]
                # counted before it is sent: an answer may come before the end
                self._sent = crc32c.crc32c(part, self._sent)
                self._count += len(part)
                yield part

    async def _from_file(self, path: Path) -> AsyncIterator[bytes]:
        with open(path, "rb", buffering=0) as f:  # its reads: in a thread, below
            while self._count < self.size:
                parts = await asyncio.to_thread(_read, f, min(SLICE, self.size - self._count))
                for part in parts:
                    self._sent = crc32c.crc32c(part, self._sent)
                    self._count += len(part)
                    yield part
                if not parts:
                    raise BodyChanged(f"{path} ended after {self._count} of {self.size} bytes")

    def check(self, answered: str | None) -> str | None:
        """Why the node's answer does not match what was sent (None: it does, or the node
        did not say).  `answered`: its `X-Message-CRC32C`."""
        if answered is None:
            return None
        if self._count != self.size:
            return f"the node answered after {self._count} of the {self.size} bytes were sent"
        sent = f"{self._sent:08x}"
        if answered.strip().lower() != sent:
            return f"the node stored a message of CRC32C {answered}, not {sent} as sent"
        return None


def _read(f: BinaryIO, size: int) -> list[bytes]:
    """Up to `size` bytes of `f`, in pieces of PIECE (fewer at its end; none past it)."""
    parts: list[bytes] = []
    while size > 0 and (part := f.read(min(PIECE, size))):
        parts.append(part)
        size -= len(part)
    return parts
