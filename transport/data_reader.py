"""A DATA's content read from a session's stream in pieces, up to its end and no further.

The content ends at the first CRLF "." CRLF (RFC 5321 4.1.1.4), whose CRLF may be the one
before the content (an empty message: the lone dot at once).  The end is searched by
`StreamReader.readuntil` (a search in C over what is buffered, resumed where it stopped as
more arrives), and what is buffered before it is taken a piece at a time once more than the
reader's limit waits: a 1 MiB message is some 16 pieces, not its 13,800 lines, each a trip
through the event loop.  Every byte the search passed (`LimitOverrunError.consumed`: no end
begins in them) is taken then, in as many pieces as it makes, so that each byte is searched
once: taking one piece and searching again from its end searched what was buffered behind
it again (a 1 MiB message searched some three times over, ~1 ms of the transport's CPU).

A piece is at most MOST bytes (a reader lets up to twice its limit wait before it pauses the
socket, and `LimitOverrunError` offers all of it): under the allocator's mmap threshold
(`dag_common.memory`), a piece and what is made of it (`mail_policy.Content`: the carried
line joined to it, its whole lines cut from it) come from the heap, whose pages are reused,
rather than each from a fresh mapping, faulted in page by page and unmapped when dropped
(~20 mappings of 132 KiB a MiB of message, about 1.5 ms of the transport's CPU, issue 49).

Nothing past the end is read: a client's next commands (PIPELINING, RFC 2920) stay in the
stream for the session.  An end that begins in what was read and goes on in what was not
(a piece cut inside "\\r\\n.\\r\\n", or the CRLF before the content) is held back: it is
completed by reading exactly its missing bytes, which never reach past an end.

The pieces are as they came (dot-stuffing on, lines unchecked): `mail_policy.Content`
checks and unstuffs them.

The search itself is `_Buffer.find`: the reader's buffer is made one (`_searched_by_dots`,
asyncio's `StreamReader._buffer`, a private part asyncio has kept since 3.4).  An end has a
dot, and most of a large message has none (base64): the dots are found by `memchr` and each
looked at, rather than `bytes.find` of the end's five bytes, which steps through every byte
and stops at every CRLF (0.49 ms of CPU a MiB of the bench's message against 0.014, in
process, issue 49); past DENSE dots in one search (prose) it is `bytes.find` again.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

END = b"\r\n.\r\n"
MOST = 64 * 1024  # bytes of a piece at most (below dag_common.memory.MMAP_THRESHOLD)
DENSE = 32  # dots looked at in one search, at most, before bytes.find takes it over


class _Buffer(bytearray):
    """A StreamReader's buffer whose search for END goes from dot to dot (see the module's
    docstring); any other search is bytearray's."""

    def find(self, sub, start=0, end=None, /):  # type: ignore[no-untyped-def, override]
        if sub != END or end is not None or start < 0:
            return super().find(sub, start) if end is None else super().find(sub, start, end)
        find = super().find
        at = find(b".", start + 2)  # the dot of an end beginning at `start` or later
        for _ in range(DENSE):
            if at < 0:
                return -1
            if self[at - 2 : at] == b"\r\n" and self[at + 1 : at + 3] == b"\r\n":
                return at - 2
            at = find(b".", at + 1)
        # every end whose dot is before `at` ruled out: those beginning at `at - 2` or later
        return -1 if at < 0 else find(END, at - 2)


def _searched_by_dots(reader: asyncio.StreamReader) -> None:
    """Make `reader`'s buffer a `_Buffer` (once; what it holds is kept)."""
    buffer = getattr(reader, "_buffer", None)
    if type(buffer) is bytearray:
        reader._buffer = _Buffer(buffer)  # type: ignore[attr-defined]


def _begun(data: bytes) -> int:
    """How many of `data`'s last bytes may begin an end: the longest of its suffixes that is
    a proper prefix of END (0: none)."""
    for k in range(len(END) - 1, 0, -1):
        if data.endswith(END[:k]):
            return k
    return 0


async def pieces(reader: asyncio.StreamReader, most: int = MOST) -> AsyncIterator[bytes]:
    """The content of a DATA, in pieces of at most `most` bytes (or the reader's limit and
    the end, if more): dot-stuffing still on, the CRLF of its last line included (an empty
    message: no piece).  asyncio.IncompleteReadError: the stream ended before the end."""
    _searched_by_dots(reader)
    # Read and not given yet: the beginning of an end, perhaps.  At first the CRLF before
    # the content, which is not content (`skip`).
    held, skip = END[:2], 2
    while True:
        if held:
            data = held + await reader.readexactly(len(END) - len(held))
            if data == END:
                if skip < 2:
                    yield END[:2]  # the last line's CRLF
                return
        else:
            try:
                data = await reader.readuntil(END)
            except asyncio.LimitOverrunError as exc:  # more than the limit before an end
                # No end begins in its first `consumed` bytes (searched: any that began
                # there would be buffered whole), so all of them are content, taken now in
                # pieces: the next search starts past them, not at the piece's end again.
                left = exc.consumed
                while left:
                    piece = await reader.read(min(left, most))
                    left -= len(piece)
                    yield piece
                continue
            else:
                yield data[: -len(END) + 2]
                return
        keep = _begun(data)
        piece = data[skip : len(data) - keep]
        skip = 0
        if piece:
            yield piece
        held = data[len(data) - keep :]
