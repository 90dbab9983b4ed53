"""A message written as its bytes, staged into the log as they arrive (issue 52): the request
read a part at a time and each part handed to the log writer (`LogStream.stage`, each part
going on with the body staged so far), its size, SHA-256 and UTF-8 check counted as it
goes, so that a large message is never held whole on the active.

Why: read whole before it was staged, a 30 MiB message cost the node its bytes at the edge
for as long as the upload and the staging took, beside the block feed's copies of the
parts just written (bench/README.md, memory).  Here it holds two parts (`PART`): the one
being staged and the one being read.

The part buffers are taken when a message needs them (the second only once its first part
is full and more comes) and given back once it is staged whole, every part written, for the
next messages (`PartBuffers`), so that a message does not pay for fresh ones.  Where the
allocator's mmap threshold is 128 KiB (`dag_common.memory`'s default) a buffer of PART bytes
is its own mapping, zero-filled page by page when made and unmapped when dropped: ~0.55 ms
of the active's CPU and 256 page faults each (issue 49); a node's heap serves it
(`storage/idle_memory.py`, HEAP_BLOCKS), where a fresh one still costs its zero-fill.  A
part known to be shorter (the message's declared size) gets a buffer of its own length
instead: the few bytes of a 1 MiB message past its first MiB (its trace header) take no
second buffer of PART.

While the node is busy every buffer given back is kept (KEPT_MOST at most), so the messages
staged at once (the transport's 32 deliveries at once of 1 MiB messages: 32 buffers) are
served from the buffers the ones before them used, not from four kept and the rest fresh
each round: what is kept is at most what was in use at once, so it never raises the node's
peak.  When the node goes
quiet they are let go of (`PartBuffers.let_go`, called by `storage/idle_memory.py` with the
rest of what a burst leaves): idle, the node keeps none.  An aborted message's buffers are
dropped, not given back: a part whose staging was cancelled may still be in the writer's
hands.

What the log holds is what the route wrote before, byte for byte (`rfc822.py`): a message
that is UTF-8 as its bytes (`MESSAGE`), else its bytes read as Latin-1 in UTF-8
(`MESSAGE_8BIT`).  Which one is known only at the end, so the parts are staged as they came
while every byte staged is ASCII (the same bytes either way), or UTF-8 (nearly all mail).  A
message found not UTF-8 once every byte before is ASCII goes on as 8-bit, each part
converted; one found not UTF-8 after non-ASCII UTF-8 bytes were staged (rare: a UTF-8 part
and a Latin-1 one in one message) is staged again, converted, from its parts read back from
the log (`_again`), and the first staging aborted.

A part is checked (a header field first, UTF-8 with its successor known) before it is
staged, and every failure (the client gone, 413, 400, the log closing) aborts what was
staged: nothing of it is ever committed.
"""

from __future__ import annotations

import asyncio
import codecs
import contextlib
import hashlib
from dataclasses import dataclass
from typing import NoReturn

import crc32c

from dag_common.counted_text import CountedText, known
from dag_common.errors import BadRequest, RequestTooLarge
from dag_common.http_body import bytes_and_mib
from dag_common.rfc822 import BodyFormat, is_message, subject_of
from replication_node.active.copy import ActiveCopy
from replication_node.active.logged_bodies import LogBodies
from replication_node.log.body import BodyReader
from replication_node.log.spanning import BlobRef

PART = 1 << 20  # bytes staged at a time (two held: one staged, one read)
# The message's first bytes kept to read its subject from (`rfc822.subject_of`, which reads
# the header section up to its first CRLF CRLF, else its first LF LF): kept until a CRLF CRLF
# is in them, or this many.  A header section longer than this is read as far as it goes.
HEAD_MOST = 1 << 20
_CHECK_SLICE = 64 * 1024  # a UTF-8 check's slice (`counted_text`'s)
# Part buffers kept between messages while the node is busy, at most (see the module): the
# transport's 32 deliveries at once (`delivery.concurrency`), a part each.
KEPT_MOST = 32


@dataclass(frozen=True)
class StagedMessage:
    """A message staged whole: its body as the store counts it (no text, no bytes: they
    are in the log under `ref`), its format and subject, and the SHA-256 and CRC32C of its
    bytes (the writer's check of what it sent: `dag_common.message_body`)."""

    ref: BlobRef
    body: CountedText
    format: BodyFormat
    subject: str
    sha256: str
    crc32c: int


class PartBuffers:
    """Buffers of PART bytes given back by the messages staged, kept for the next ones (the
    event loop's: no lock), at most `most`, until the node goes quiet (`let_go`)."""

    def __init__(self, most: int = KEPT_MOST) -> None:
        self._most = most
        self._free: list[bytearray] = []
        self.made = 0  # buffers of PART made fresh (not kept ones), for tests and benches

    def take(self) -> bytearray:
        """A buffer of PART bytes (what it holds is left from its last message)."""
        if self._free:
            return self._free.pop()
        self.made += 1
        return bytearray(PART)

    def give(self, buffer: bytearray) -> None:
        """`buffer` is no longer read (every part from it written): for the next message."""
        if len(self._free) < self._most:
            self._free.append(buffer)

    @property
    def kept(self) -> int:
        """Bytes of the buffers kept now."""
        return len(self._free) * PART

    def let_go(self) -> int:
        """Let go of every buffer kept (the node went quiet): the bytes given back."""
        kept = self.kept
        self._free.clear()
        return kept


# The process's: a node's idle release lets go of them (`node.py`).
PART_BUFFERS = PartBuffers()


def _latin_1_as_utf8(part: memoryview) -> bytes:
    """A part's bytes read as Latin-1, in UTF-8 (each byte a character: parts convert alone)."""
    return str(part, "latin-1").encode("utf-8")


class MessageStager:
    """Stages one message's bytes into `copy`'s log as they are `add`ed (see the module)."""

    def __init__(
        self, copy: ActiveCopy, *, max_item_size: int, database: str, size: int | None = None
    ) -> None:
        """`size`: the message's length if it is known (a plain body's Content-Length): what
        its parts' buffers are sized by, no more (a body longer than it is staged all the
        same, in buffers grown or taken as they fill)."""
        self._copy = copy
        self._declared = size
        self._max = max_item_size
        self._database = database
        # Filled in turn, taken when first needed (`_buffer`).  One of PART is never resized;
        # a short one grows only past a declared size that was short.
        self._buffers: list[bytearray | None] = [None, None]
        self._which = 0
        self._fill = 0
        self._staging: asyncio.Task[BlobRef] | None = None
        self._ref: BlobRef | None = None  # the body staged so far
        self._parts = 0
        self._size = 0  # bytes of the message read
        self._taken = 0  # bytes of the message in the parts handed to the writer
        self._stored = 0  # bytes of the body staged (its UTF-8)
        self._message_sha = hashlib.sha256()
        self._message_crc = 0
        self._body_sha: hashlib._Hash | None = None  # 8-bit: the UTF-8's, apart
        self._decoder = codecs.getincrementaldecoder("utf-8")()
        self._ascii = True  # every byte staged so far is ASCII
        self._eight_bit = False
        self._head = bytearray()
        self._head_done = False

    async def add(self, data: bytes | bytearray) -> None:
        """The message's next bytes (RequestTooLarge once the message is over the
        max_item_size: its body is at least its bytes)."""
        self._size += len(data)
        self._within_max(self._size, "the message", "")
        self._keep_head(data)
        view = memoryview(data)
        while view:
            if self._fill == PART:  # full, and more comes: it is not the last
                await self._stage_part(final=False)
            n = min(PART - self._fill, len(view))
            self._buffer()[self._fill : self._fill + n] = view[:n]
            self._fill += n
            view = view[n:]

    def _keep_head(self, data: bytes | bytearray) -> None:
        if self._head_done:
            return
        seen = len(self._head)
        self._head += data[: HEAD_MOST - seen]
        at = self._head.find(b"\r\n\r\n", max(0, seen - 3))
        if at >= 0:
            del self._head[at + 4 :]
        self._head_done = at >= 0 or len(self._head) >= HEAD_MOST

    async def finish(self) -> StagedMessage:
        """The message staged whole, once its last bytes are (BadRequest for a body that is
        not a message; RequestTooLarge for an item over the max_item_size)."""
        await self._stage_part(final=True)
        assert self._staging is not None
        self._ref = await self._staging
        self._staging = None
        self._give_back()
        subject = subject_of(bytes(self._head))
        size = len(subject.encode("utf-8")) + self._stored
        if size > self._max:
            self._refuse(size, f"the item is {size} bytes (its subject and body in UTF-8), over")
        message_sha = self._message_sha.hexdigest()
        body_sha = message_sha if self._body_sha is None else self._body_sha.hexdigest()
        fmt = BodyFormat.MESSAGE_8BIT if self._eight_bit else BodyFormat.MESSAGE
        body = known("", utf8_size=self._stored, sha256=body_sha)
        return StagedMessage(self._ref, body, fmt, subject, message_sha, self._message_crc)

    async def abort(self) -> None:
        """Abort what was staged (the write failed or was refused): no commit will use it."""
        if self._staging is not None:
            with contextlib.suppress(Exception):  # its answer names the body to abort
                self._ref = await self._staging
            self._staging = None
        if self._ref is not None:
            await self._copy.abort_staged([self._ref])
            self._ref = None

    async def _stage_part(self, *, final: bool) -> None:
        """Check the part read and hand it to the writer, once the one before is staged."""
        buffer = self._buffer()
        part = memoryview(buffer)[: self._fill]
        if self._parts == 0 and not is_message(bytes(part[:1000])):
            raise BadRequest(
                "the body is not an RFC 5322 message: it does not begin with a header field"
            )
        plain = (buffer if len(part) == len(buffer) else part.tobytes()).isascii()
        if not self._eight_bit and not self._utf8(part, plain=plain, final=final):
            if self._ascii:  # every byte staged is ASCII: the same bytes as 8-bit
                self._body_sha = self._message_sha.copy()
            else:
                await self._again()
            self._eight_bit = True
        self._message_sha.update(part)
        self._message_crc = crc32c.crc32c(part, self._message_crc)
        if self._eight_bit:
            data: bytes | memoryview = _latin_1_as_utf8(part)
            assert self._body_sha is not None
            self._body_sha.update(data)
        else:
            data = part
            self._ascii = self._ascii and plain
        await self._staged_so_far()
        self._stored += len(data)
        self._within_max(self._stored, "the message's body", " of it")
        self._start(data)
        self._taken += len(part)
        if len(buffer) < PART:  # a part's own (`_buffer`): never filled again
            self._buffers[self._which] = None
        self._which ^= 1
        self._fill = 0

    def _buffer(self) -> bytearray:
        """The buffer being filled, taken now if this is its first part: one of the part's
        own length if the message's declared size leaves fewer than PART bytes for it, else
        one of PART (kept, or fresh)."""
        buffer = self._buffers[self._which]
        if buffer is None:
            left = None if self._declared is None else self._declared - self._taken
            buffer = (
                bytearray(left) if left is not None and 0 < left < PART else PART_BUFFERS.take()
            )
            self._buffers[self._which] = buffer
        return buffer

    def _give_back(self) -> None:
        """The buffers of PART bytes for the next message: nothing staged from them is
        pending."""
        for i, buffer in enumerate(self._buffers):
            if buffer is not None:
                self._buffers[i] = None
                if len(buffer) == PART:
                    PART_BUFFERS.give(buffer)

    def _within_max(self, count: int, what: str, of: str) -> None:
        """RequestTooLarge once `count` bytes of `what` are over the max_item_size."""
        if count > self._max:
            self._refuse(count, f"{what} is over", f" (refused after {count} bytes{of})")

    def _refuse(self, size: int, over: str, after: str = "") -> NoReturn:
        """The one refusal of an item over the max_item_size: `over` says what is, `after`
        how far it was read."""
        limit = f"the max_item_size of {self._database}, {bytes_and_mib(self._max)}"
        raise RequestTooLarge(
            f"{over} {limit}{after}; nothing written",
            {"max_item_size": self._max, "item_size": size},
        )

    def _start(self, data: bytes | memoryview) -> None:
        continues = None if self._ref is None else self._ref.id
        staging = self._copy.stage(BodyReader(data), continues=continues)
        self._staging = asyncio.ensure_future(staging)
        self._parts += 1

    async def _staged_so_far(self) -> None:
        if self._staging is not None:
            self._ref = await self._staging
            self._staging = None

    def _utf8(self, part: memoryview, *, plain: bool, final: bool) -> bool:
        """Whether the message is UTF-8 so far (`final`: and ends with `part`)."""
        try:
            if self._decoder.getstate()[0] or not plain:  # plain: ASCII
                for start in range(0, len(part), _CHECK_SLICE):
                    self._decoder.decode(part[start : start + _CHECK_SLICE])
            if final:
                self._decoder.decode(b"", final=True)
        except UnicodeDecodeError:
            return False
        return True

    async def _again(self) -> None:
        """The parts staged so far staged again as 8-bit (their bytes read as Latin-1, in
        UTF-8), read back from the log, and the first staging aborted."""
        await self._staged_so_far()
        first = self._ref
        assert first is not None
        stream = self._copy.stream
        await stream.roll()  # its batch settles: every generation of the parts has its name
        parts = LogBodies(stream.log_dir).parts(first, stream.generation)
        self._ref, self._stored = None, 0
        self._body_sha = hashlib.sha256()
        try:
            while (chunk := await asyncio.to_thread(next, parts, None)) is not None:
                data = _latin_1_as_utf8(memoryview(chunk))
                self._body_sha.update(data)
                self._stored += len(data)
                self._start(data)
                await self._staged_so_far()
        finally:
            await self._copy.abort_staged([first])
