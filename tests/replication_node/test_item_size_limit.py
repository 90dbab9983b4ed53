"""`max_item_size` at the HTTP edge, over one in-process node on a real port: an item over
its database's limit is a 413 naming it and the limit; a body over what a write may carry is
a 413 before it is read, whether its Content-Length says so, its chunks or its inflated
bytes; a client gone mid-upload writes nothing and the node serves on.  Each refusal
leaves the items and the log as they were.

The limits are small here (64 KiB, and 128 KiB for DB2) so that each case is quick; one
test holds the default, 36 MiB, to the byte."""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import json
import logging
import sys
import tracemalloc

import aiohttp
import pytest
from aiohttp import web

from dag_common.auth import bearer
from dag_common.config import parse_config
from dag_common.http_body import items_body_size, items_limit
from replication_node.http.context import json_body
from replication_node.http.models import ItemIn, parse
from tests.cluster_harness import cluster_config, free_port, serve_app, wait_until
from tests.replication_node.helpers import serving_node

TOKEN = "item-size-token-0123456789"
KIB = 1024
LIMIT = 64 * KIB  # DB1's, the default's
DB2_LIMIT = 128 * KIB
CAP = items_body_size(LIMIT)  # what a write to DB1 may carry: 2 * 64 KiB + 1 MiB
BOX = "/v1/databases/DB1/mailboxes/alice"
BOX2 = "/v1/databases/DB2/mailboxes/bob"  # a mailbox is in one database only


@contextlib.asynccontextmanager
async def one_node(tmp_path, defaults):
    """Node n1 with DB1 (the default max_item_size) and DB2 (128 KiB) and a mailbox in
    each (alice in DB1, bob in DB2): the node, a session with the token, and its port."""
    port = free_port()
    copies = [{"node": "n1", "activation_preference": 1}]
    config = parse_config(
        cluster_config(
            [("n1", "s", f"http://127.0.0.1:{port}")],
            [
                {"name": "DB1", "copies": copies},
                {"name": "DB2", "max_item_size": "128KiB", "copies": copies},
            ],
            cluster_store={"kind": "embedded", "path": "cluster.db"},
            defaults={"llr_depth": 2, "failover_after": None, **defaults},
        ),
        base_dir=tmp_path,
    )
    async with (
        serving_node(config, tmp_path, name="n1", port=port, token=TOKEN) as (n, url),
        aiohttp.ClientSession(base_url=url, headers=bearer(TOKEN)) as session,
    ):
        for box in (BOX, BOX2):
            async with session.put(box, json={}) as resp:
                assert resp.status == 201, await resp.text()
        yield n, session, port


@pytest.fixture
async def node(tmp_path):
    async with one_node(tmp_path, {"max_item_size": "64KiB"}) as served:
        yield served


async def call(session, method, path, **kw):
    async with session.request(method, path, **kw) as resp:
        return resp.status, await resp.json()


async def state(session, db="DB1", box=BOX):
    """What a refused write must leave as it was: the mailbox's items and the log's end."""
    _, items = await call(session, "GET", box + "/items")
    _, position = await call(session, "GET", f"/v1/databases/{db}/log/position")
    return items["items"], (position["open_generation"], position["durable"])


async def raw_request(
    port, head: str, body: bytes = b"", *, close: bool = False, to_eof: bool = False
) -> tuple[str, dict[str, str], dict]:
    """Send `head` (request line and headers, without the blank line) and `body` on a plain
    socket, and read the answer: (status line, headers, JSON body); with `close`, the
    socket is closed right after the body instead (nothing read); with `to_eof`, the
    answer is followed to the server's end of the connection."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(head.replace("\n", "\r\n").encode() + b"\r\n\r\n" + body)
        await writer.drain()
        if close:
            return "", {}, {}
        # Not to the end of the stream: the server keeps it open a while after an early
        # answer, reading what the client still sends.
        raw = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), timeout=10)
        status, *lines = raw.decode().strip().split("\r\n")
        headers = {k.lower(): v.strip() for k, _, v in (line.partition(":") for line in lines)}
        answer = await reader.readexactly(int(headers["content-length"]))
        if to_eof:
            assert await asyncio.wait_for(reader.read(), timeout=10) == b""
        return status, headers, json.loads(answer)
    finally:
        writer.close()


def post_head(path: str, *headers: str) -> str:
    return "\n".join(
        [f"POST {path} HTTP/1.1", "Host: n1", f"Authorization: Bearer {TOKEN}", *headers]
    )


async def test_an_item_one_byte_over_the_limit_is_a_413_naming_it_and_nothing_is_written(node):
    _, session, _ = node
    # At the limit exactly, counted in UTF-8 bytes: a subject and a body of "é" (2 bytes).
    status, _ = await call(
        session, "POST", BOX + "/items", json={"subject": "s", "body": "x" * (LIMIT - 1)}
    )
    assert status == 201
    status, _ = await call(session, "POST", BOX + "/items", json={"body": "é" * (LIMIT // 2)})
    assert status == 201
    before = await state(session)

    big = {"item_id": "big", "subject": "s", "body": "x" * LIMIT}
    status, answer = await call(session, "POST", BOX + "/items", json=big)
    assert status == 413
    assert answer["error"] == (
        "the item (item_id 'big') is 65537 bytes (its subject and body in UTF-8), over the "
        "max_item_size of DB1, 65536 bytes (0.0625 MiB); nothing written"
    )
    assert answer["max_item_size"] == LIMIT and answer["item_size"] == LIMIT + 1

    # In a batch, the item is named by its place; the items before it are not written.
    items = [{"item_id": "small", "body": "ok"}, {"body": "é" * (LIMIT // 2) + "x"}]
    status, answer = await call(session, "POST", BOX + "/items", json={"items": items})
    assert status == 413
    assert answer["error"].startswith("items.1 is 65537 bytes (its subject and body in UTF-8)")
    assert answer["item"] == 1
    assert await state(session) == before


async def test_the_default_limit_is_exchange_onlines_36_mib_to_the_byte(tmp_path):
    async with one_node(tmp_path, {}) as (_, session, _):
        before = await state(session)
        over = {"item_id": "big", "body": "x" * (36 * 1024 * KIB + 1)}
        status, answer = await call(session, "POST", BOX + "/items", json=over)
        assert status == 413
        assert "max_item_size of DB1, 37748736 bytes (36 MiB)" in answer["error"]
        assert await state(session) == before


@pytest.mark.slow  # 36 MiB through a 1 MiB log: about 6 s
async def test_an_item_of_36_mib_is_taken_whole(tmp_path):
    async with one_node(tmp_path, {}) as (_, session, _):
        # It spans as many log generations as it needs.
        at = {"item_id": "at", "subject": "s", "body": "x" * (36 * 1024 * KIB - 1)}
        status, _ = await call(session, "POST", BOX + "/items", json=at)
        assert status == 201
        items, _ = await state(session)
        assert [len(i["body"]) for i in items if i["item_id"] == "at"] == [36 * 1024 * KIB - 1]


async def test_a_content_length_over_the_cap_is_a_413_before_the_body_is_read(node):
    n, session, port = node
    before = await state(session)
    # A terabyte announced, ten bytes sent: the answer comes back without the rest.
    status, headers, answer = await raw_request(
        port, post_head(BOX + "/items", "Content-Length: 1000000000000"), b'{"body": "'
    )
    assert status == "HTTP/1.1 413 Request Entity Too Large"
    assert headers["connection"] == "close", "the rest of the body is never read"
    assert answer["error"] == (
        f"request body of 1000000000000 bytes is over the limit of {CAP} bytes (1.125 MiB) of "
        "a write of items to DB1 (twice its max_item_size of 65536 bytes (0.0625 MiB), and "
        "1 MiB, for JSON's escapes and the items' other fields); nothing read or written"
    )
    assert (answer["limit"], answer["max_item_size"]) == (CAP, LIMIT)

    # A client asking first (Expect: 100-continue, as curl does) is not asked for the body.
    head = post_head(BOX + "/items", f"Content-Length: {CAP + 1}", "Expect: 100-continue")
    status, _, answer = await raw_request(port, head)
    assert status.startswith("HTTP/1.1 413"), "a final 413, never 100 Continue"
    assert answer["limit"] == CAP
    # ...and one within the limit is.
    head = post_head(BOX + "/items", "Content-Length: 2", "Expect: 100-continue")
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(head.replace("\n", "\r\n").encode() + b"\r\n\r\n")
    assert await asyncio.wait_for(reader.readline(), 10) == b"HTTP/1.1 100 Continue\r\n"
    writer.close()

    # The token is checked first: a stranger learns nothing of the limits.
    head = f"POST {BOX}/items HTTP/1.1\nHost: n1\nContent-Length: 1000000000000"
    status, _, _ = await raw_request(port, head, b"{")
    assert status.startswith("HTTP/1.1 401")

    assert await state(session) == before
    assert n.unexpected_errors == 0


@pytest.mark.parametrize("encoding", ["chunked", "gzip"])
async def test_a_body_without_a_true_length_is_read_only_up_to_the_cap(node, encoding):
    """Chunks, or a small compressed body that inflates past the cap: refused as soon as
    the bytes read pass it."""
    _, session, port = node
    before = await state(session)
    body = b'{"body": "' + b"x" * CAP + b'"}'
    if encoding == "chunked":
        size = 64 * KIB
        pieces = [body[i : i + size] for i in range(0, len(body), size)]
        sent = b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in pieces) + b"0\r\n\r\n"
        head = post_head(BOX + "/items", "Transfer-Encoding: chunked")
    else:
        sent = gzip.compress(body)
        assert len(sent) < 64 * KIB
        head = post_head(BOX + "/items", "Content-Encoding: gzip", f"Content-Length: {len(sent)}")
    status, _, answer = await raw_request(port, head, sent)
    assert status.startswith("HTTP/1.1 413")
    assert answer["error"].startswith(
        f"request body is over the limit of {CAP} bytes (1.125 MiB) of a write of items to DB1"
    )
    assert "refused after" in answer["error"] and answer["limit"] == CAP
    assert await state(session) == before
    status, _ = await call(session, "POST", BOX + "/items", json={"body": "next"})
    assert status == 201


async def test_a_compressed_body_that_does_not_inflate_is_a_400_not_a_bug(node, caplog):
    n, session, port = node
    before = await state(session)
    head = post_head(BOX + "/items", "Content-Encoding: gzip", "Content-Length: 16")
    status, headers, answer = await raw_request(port, head, b"not gzip at all!", to_eof=True)
    assert status.startswith("HTTP/1.1 400") and headers["connection"] == "close"
    assert answer["error"] == (
        "request body cannot be read: 400, message: Can not decode content-encoding: gzip"
    )
    assert await state(session) == before
    assert n.unexpected_errors == 0
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING or r.exc_info]


async def test_a_database_may_set_its_own_max_item_size(node):
    _, session, port = node
    item = {"item_id": "mid", "body": "x" * (100 * KIB)}
    status, answer = await call(session, "POST", BOX + "/items", json=item)
    assert status == 413 and "max_item_size of DB1, 65536 bytes" in answer["error"]
    status, _ = await call(session, "POST", BOX2 + "/items", json=item)
    assert status == 201, "DB2's 128 KiB holds it"

    before = await state(session, "DB2", BOX2)
    status, answer = await call(
        session, "POST", BOX2 + "/items", json={"item_id": "big", "body": "x" * (DB2_LIMIT + 1)}
    )
    assert status == 413
    assert "max_item_size of DB2, 131072 bytes (0.125 MiB)" in answer["error"]
    # What a write may carry follows the database's limit too.
    over_db1 = items_body_size(DB2_LIMIT) - 1
    head = post_head(BOX2 + "/items", f"Content-Length: {over_db1}", "Expect: 100-continue")
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(head.replace("\n", "\r\n").encode() + b"\r\n\r\n")
    assert await asyncio.wait_for(reader.readline(), 10) == b"HTTP/1.1 100 Continue\r\n"
    writer.close()
    head = post_head(BOX + "/items", f"Content-Length: {over_db1}")
    status, _, answer = await raw_request(port, head)
    assert status.startswith("HTTP/1.1 413") and answer["limit"] == CAP
    assert await state(session, "DB2", BOX2) == before


async def test_a_client_gone_mid_upload_writes_nothing_and_the_next_write_succeeds(node, caplog):
    n, session, port = node
    caplog.set_level(logging.INFO)
    status, first = await call(session, "POST", BOX + "/items", json={"body": "before"})
    assert status == 201
    before = await state(session)

    body = json.dumps({"item_id": "cut", "body": "x" * 50_000}).encode()
    head = post_head(BOX + "/items", f"Content-Length: {len(body)}")
    await raw_request(port, head, body[: len(body) // 2], close=True)
    await wait_until(
        "the node to see the body end early",
        lambda: any("the body ended after" in r.getMessage() for r in caplog.records),
        timeout=10,
    )

    assert await state(session) == before
    assert n.unexpected_errors == 0
    # Said once, as what it is: no traceback, no error (not a disk's 503, not a bug's 500).
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING or r.exc_info]
    again = {"item_id": "cut", "body": "y"}
    status, after = await call(session, "POST", BOX + "/items", json=again)
    assert status == 201 and after["change_number"] == first["change_number"] + 1
    items, _ = await state(session)
    assert [i["item_id"] for i in items if i["item_id"] == "cut"] == ["cut"]


async def test_an_item_costs_the_edge_about_twice_its_size():
    """Reading and parsing a write of one 8 MiB item holds at most two copies of it at once
    (its bytes and text, then its text and the item); `request.json()` and orjson hold
    three.  The client is another process, so that only the node's memory is counted."""
    size = 8 * 1024 * KIB
    peaks: list[float] = []

    async def handler(request: web.Request) -> web.Response:
        tracemalloc.start()
        try:
            base = tracemalloc.get_traced_memory()[0]
            item = parse(ItemIn, await json_body(request, items_limit("DB1", size)))
            peaks.append((tracemalloc.get_traced_memory()[1] - base) / size)
        finally:
            tracemalloc.stop()
        return web.json_response({"size": len(item.body)})

    app = web.Application()
    app.router.add_post("/items", handler)
    runner, url = await serve_app(app)
    try:
        client = (
            "import json, sys, urllib.request\n"
            f"body = json.dumps({{'body': 'x' * {size}}}).encode()\n"
            f"print(urllib.request.urlopen('{url}/items', data=body).read().decode())\n"
        )
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-c", client, stdout=asyncio.subprocess.PIPE
        )
        out, _ = await proc.communicate()
        assert json.loads(out) == {"size": size}
    finally:
        await runner.cleanup()
    assert 2 <= peaks[0] < 2.3, f"the edge held {peaks[0]:.2f} times the item"
