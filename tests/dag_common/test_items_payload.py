"""A write of items sent a slice at a time: the same JSON as the batch encoded whole, its
length known before it is sent, no part of it larger than a slice's, and a real server
reads it as the write it is."""

from __future__ import annotations

import hashlib
from dataclasses import replace

import orjson
import pytest
from aiohttp import ClientSession, web

from dag_common import items_payload
from dag_common.counted_text import bytes_only
from dag_common.items_payload import ItemsPayload, items_json
from dag_common.store_api import Item

BODIES = [
    "plain",
    "",
    'quotes " and \\ backslashes, \n newlines \r\n and \t tabs, \x00 \x1f controls',
    "accents é, scripts 日本語, emoji 😀, and U+2028 \u2028",
    "x" * 10_000 + '"' + "y" * 10_000,  # an escape across where a slice ends
]


def batch() -> list[Item]:
    return [
        Item(f"m{n}", "Inbox" if n % 2 else "Projects é", f"subject {n} \"'", body, n)
        for n, body in enumerate(BODIES)
    ]


@pytest.mark.parametrize("slice_chars", [3, 1000, 1 << 20])
def test_the_json_is_the_batch_encoded_whole(monkeypatch, slice_chars):
    monkeypatch.setattr(items_payload, "SLICE", slice_chars)
    items = batch()
    whole = orjson.dumps({"items": [i.entry() for i in items]})
    parts = list(items_json(items))
    assert b"".join(parts) == whole
    assert ItemsPayload(items).size == len(whole)
    # a body's part is a slice of it, escaped (at most 6 bytes a character), never the body
    assert max(len(p) for p in parts) <= max(6 * slice_chars, 200)


def test_an_item_listed_without_its_body_is_never_written():
    head = Item("m1", "Inbox", "s", "", 1, body_hash="ab" * 32, body_size=10)
    with pytest.raises(ValueError, match="listed without its body"):
        ItemsPayload([head])


async def test_a_server_reads_it_with_its_length_as_the_batch_it_is():
    seen = []

    async def handler(request: web.Request) -> web.Response:
        seen.append((request.content_length, request.headers.get("Transfer-Encoding")))
        return web.json_response(await request.json())

    app = web.Application()
    app.router.add_post("/items", handler)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    port = runner.addresses[0][1]
    try:
        items = batch()
        payload = ItemsPayload(items)
        async with ClientSession() as session:
            for _ in range(2):  # sent again, as a call following the active does
                url = f"http://127.0.0.1:{port}/items"
                async with session.post(url, data=payload) as resp:
                    assert await resp.json() == {"items": [i.entry() for i in items]}
    finally:
        await runner.cleanup()
    assert seen == [(payload.size, None)] * 2, "a Content-Length, not chunked"


@pytest.mark.parametrize("slice_bytes", [4, 5, 7, 1000, 1 << 20])
def test_a_body_carried_as_its_bytes_is_the_same_json_as_its_text(monkeypatch, slice_bytes):
    """Issue 52: a listing's large body comes to the mover as its UTF-8 bytes alone; it is
    written as its text would be, wherever a slice of its bytes ends (in a character of two
    to four bytes, in an escape), and it can be sent again (its bytes kept)."""
    monkeypatch.setattr(items_payload, "SLICE", slice_bytes)
    texts = batch()
    as_bytes = [
        replace(i, body=bytes_only(bytearray(i.body.encode()), hashlib.sha256().hexdigest()))
        if i.body
        else i
        for i in texts
    ]
    whole = orjson.dumps({"items": [i.entry() for i in texts]})
    assert b"".join(items_json(as_bytes)) == whole
    payload = ItemsPayload(as_bytes)
    assert payload.size == len(whole)
    assert payload.decode() == whole.decode()  # sent again: the same
