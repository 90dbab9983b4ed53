"""A write of items (`{"items": [...]}`, POST …/items) as its JSON body, sent a slice at a
time: the writer holds its items and one slice of their JSON, not a second copy of them
whole.  Encoded whole, a batch's JSON was one more copy of its bodies for as long as it was
sent: a 30 MiB item was 60 MiB in the mover (bench/README.md, memory).

The body's length is counted first, by encoding it the same way (orjson, a body a slice of
`SLICE` characters at a time; JSON escapes each character alone, so the slices add up to the
whole), and the body goes with a Content-Length: the node takes its share of its memory budget
by it before reading a byte (a chunked body would take the most a write may carry).  The cost
is a second pass of orjson over the bodies: about a millisecond per MiB.

A body carried as its UTF-8 bytes alone (`counted_text.bytes_only`: a listing's large body
as the mover reads it, `listing_bodies`) is encoded from those bytes, a slice of `SLICE`
bytes at a time cut before a character's first byte, and its bytes kept (it may be sent
again): the page's bytes are the only copy of it in the mover.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Sequence

from aiohttp.abc import AbstractStreamWriter
from aiohttp.payload import Payload
from orjson import dumps

from dag_common.counted_text import held_utf8, is_bytes_only
from dag_common.store_api import Item

SLICE = 1 << 20  # characters of a body encoded at a time


def items_json(items: Sequence[Item]) -> Iterator[bytes]:
    """`{"items": [entry, ...]}` (`Item.entry`) as JSON, in parts: each item's fields but its
    body, then the body a slice at a time."""
    yield b'{"items":['
    for n, item in enumerate(items):
        entry = item.entry()
        body = entry.pop("body")
        yield (b"," if n else b"") + dumps(entry)[:-1] + b',"body":"'
        if is_bytes_only(body):  # type: ignore[arg-type]
            for text in utf8_slices(held_utf8(body)):  # type: ignore[arg-type]
                yield dumps(text)[1:-1]
        else:
            body = str(body)
            for start in range(0, len(body), SLICE):
                yield dumps(body[start : start + SLICE])[1:-1]
        yield b'"}'
    yield b"]}"


def utf8_slices(utf8: bytes | bytearray) -> Iterator[str]:
    """The text of the UTF-8 bytes `utf8`, about `SLICE` bytes at a time, each slice cut
    before a character's first byte (a continuation byte is 0b10xxxxxx)."""
    start, size = 0, len(utf8)
    while start < size:
        end = min(start + SLICE, size)
        while start < end < size and utf8[end] & 0xC0 == 0x80:
            end -= 1
        yield utf8[start:end].decode("utf-8")
        start = end


class ItemsPayload(Payload):
    """`items_json` of a batch as an aiohttp request body of known size; it can be sent
    again (a call that follows the active sends it once more)."""

    def __init__(self, items: Sequence[Item]) -> None:
        super().__init__(items, content_type="application/json")
        self._size = sum(len(part) for part in items_json(items))

    async def write(self, writer: AbstractStreamWriter) -> None:
        for part in items_json(self._value):
            await writer.write(part)
            await asyncio.sleep(0)  # a write yields only once the socket's buffer is full

    def decode(self, encoding: str = "utf-8", errors: str = "strict") -> str:
        return b"".join(items_json(self._value)).decode(encoding, errors)

    def __repr__(self) -> str:
        return f"<ItemsPayload of {len(self._value)} items, {self._size} bytes>"
