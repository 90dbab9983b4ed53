"""A DATA's content read from a real asyncio StreamReader, the bytes arriving cut at every
place (and with a reader limit small enough that the content comes in many pieces): the
pieces are the content as sent, and what followed the end (a pipelined command) is still
in the stream."""

from __future__ import annotations

import asyncio

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dag_common.memory import MMAP_THRESHOLD
from transport.data_reader import DENSE, END, MOST, _Buffer, pieces

NEXT = b"MAIL FROM:<a@x>\r\n"  # a client's next command, pipelined behind the end

CONTENTS = [
    b"",  # an empty message: the lone dot at once
    b"\r\n",  # one empty line
    b"a\r\n",
    b"Subject: x\r\n\r\nbody\r\n",
    b"..stuffed\r\n.\r\r\n",  # a stuffed line; a line of a dot and a bare CR (not an end)
    b"x\r\n..\r\n\r\n.a\r\n",  # ends that are not: "\r\n..\r\n", "\r\n.a"
    b"\r\n\r\n\r\n",
    b"tail with a CR\r\r\n",
    b"y" * 50 + b"\r\n" + b"." * 7 + b"\r\n",
]


async def read(stream: bytes, cuts: list[int], limit: int) -> tuple[list[bytes], bytes]:
    """The pieces read from `stream` arriving in parts cut at `cuts`, and what is left."""
    reader = asyncio.StreamReader(limit=limit)

    async def feed() -> None:
        at = 0
        for cut in [*cuts, len(stream)]:
            reader.feed_data(stream[at:cut])
            at = cut
            await asyncio.sleep(0)  # let the reader run between parts
        reader.feed_eof()

    feeder = asyncio.create_task(feed())
    got = [piece async for piece in pieces(reader)]
    await feeder
    return got, await reader.read()


@pytest.mark.parametrize("content", CONTENTS)
@pytest.mark.parametrize("limit", [4, 8, 1 << 16])
async def test_the_content_up_to_its_end_and_not_a_byte_further_wherever_it_is_cut(content, limit):
    stream = content + b".\r\n" + NEXT
    for cut in range(len(stream) + 1):
        got, left = await read(stream, [cut], limit)
        assert b"".join(got) == content, (cut, got)
        assert all(got), "no empty piece"
        assert left == NEXT, (cut, left)
    got, left = await read(stream, list(range(1, len(stream))), limit)  # a byte at a time
    assert (b"".join(got), left) == (content, NEXT)


async def test_a_large_content_comes_in_pieces_as_it_arrives():
    content = b"".join(b"%07d" % n + b"x" * 66 + b"\r\n" for n in range(20_000))  # 1.5 MB
    stream = content + b".\r\n" + NEXT
    part = 32 * 1024  # as a socket's reads bring it
    got, left = await read(stream, list(range(part, len(stream), part)), 1 << 16)
    assert b"".join(got) == content and left == NEXT
    assert max(map(len, got)) <= 2 * (1 << 16) + part, "never the whole message at once"


async def test_a_stream_that_ends_before_the_end_is_an_incomplete_read():
    for stream in (b"", b"abc\r\n", b"abc\r\n.", b"abc\r\n.\r"):
        with pytest.raises(asyncio.IncompleteReadError):
            await read(stream, [], 1 << 16)


async def test_a_large_content_arriving_in_large_reads_comes_in_pieces_of_at_most_most():
    """A reader holding far more than a piece (its socket's reads arrive faster than it is
    read): each piece is at most MOST bytes, under the allocator's mmap threshold, however
    much the reader offers at once; the bytes are the content all the same."""
    content = b"".join(b"%07d" % n + b"x" * 66 + b"\r\n" for n in range(20_000))  # 1.5 MB
    stream = content + b".\r\n" + NEXT
    part = 256 * 1024
    got, left = await read(stream, list(range(part, len(stream), part)), 1 << 16)
    assert b"".join(got) == content and left == NEXT
    assert max(map(len, got)) <= MOST < MMAP_THRESHOLD


@settings(max_examples=500, deadline=None)
@given(st.lists(st.sampled_from([b".", b"\r\n", b"x", b"\r", b"\n", END, b"." * DENSE]),
                max_size=60),
       st.integers(0, 200))  # fmt: skip
def test_the_search_for_the_end_from_dot_to_dot_is_bytes_find(parts, start):
    """The reader's buffer finds the end where `bytes.find` does, from any offset, however
    many dots come before it (past DENSE it is `bytes.find` again)."""
    data = b"".join(parts)
    assert _Buffer(data).find(END, start) == data.find(END, start)
    assert _Buffer(data).find(b"\r\n", start) == data.find(b"\r\n", start)
