"""`read_body` against a real aiohttp server and client: a body of known length is read into
one buffer of its size, filled in place."""

from __future__ import annotations

import sys

import aiohttp
from aiohttp import web

from dag_common.http_body import BodyLimit, read_body

MIB = 1 << 20


async def test_a_body_of_known_length_is_filled_in_place_in_one_buffer_of_its_size():
    """A 1 MiB body sent in pieces comes back whole in a buffer allocated once at its size
    (a buffer grown piece by piece is over-allocated, and copied or remapped as it grows)."""
    seen: list[bytearray] = []

    async def handler(request: web.Request) -> web.Response:
        seen.append(await read_body(request, BodyLimit(4 * MIB, "of the test")))
        return web.Response(status=204)

    app = web.Application()
    app.router.add_put("/body", handler)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    body = bytes(range(256)) * (4 * 1024) + b"tail"

    async def pieces():
        for start in range(0, len(body), 100_000):
            yield body[start : start + 100_000]

    try:
        async with aiohttp.ClientSession() as session:
            headers = {"Content-Length": str(len(body))}
            async with session.put(
                f"http://127.0.0.1:{port}/body", data=pieces(), headers=headers
            ) as resp:
                assert resp.status == 204
    finally:
        await runner.cleanup()
    (got,) = seen
    assert got == body
    assert sys.getsizeof(got) == sys.getsizeof(bytearray(len(body)))
