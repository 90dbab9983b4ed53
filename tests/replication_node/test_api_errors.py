"""The node API's error answers: JSON with a cause, whatever raised them (a real aiohttp
server on port 0 with the node's middlewares)."""

from __future__ import annotations

import aiohttp
import pytest
from aiohttp import web

from replication_node.errors import NotFound
from replication_node.http.auth import auth_middleware
from replication_node.http.context import NODE, json_body
from replication_node.http.error_middleware import error_middleware
from tests.cluster_harness import serve_app

TOKEN = "t0ken-0123456789abcdef"


class _Node:
    name = "mbx9"
    unexpected_errors = 0


async def _bug(request: web.Request) -> web.Response:
    raise ValueError("a bug")


async def _disk(request: web.Request) -> web.Response:
    raise OSError(28, "No space left on device")


async def _missing(request: web.Request) -> web.Response:
    raise NotFound("no mailbox 'x'")


async def _echo(request: web.Request) -> web.Response:
    return web.json_response(await json_body(request))


@pytest.fixture
async def server():
    app = web.Application(middlewares=[auth_middleware(TOKEN), error_middleware])
    node = _Node()
    app[NODE] = node  # type: ignore[assignment]
    app.router.add_get("/bug", _bug)
    app.router.add_get("/disk", _disk)
    app.router.add_get("/missing", _missing)
    app.router.add_post("/post-only", _missing)
    app.router.add_post("/echo", _echo)
    runner, url = await serve_app(app)
    async with aiohttp.ClientSession(headers={"Authorization": f"Bearer {TOKEN}"}) as session:
        yield url, session, node
    await runner.cleanup()


@pytest.mark.parametrize(
    ("method", "path", "status", "fragment"),
    [
        ("GET", "/bug", 500, "internal error (ValueError: a bug)"),
        ("GET", "/disk", 503, "storage error on node mbx9: [Errno 28] No space left on device"),
        ("GET", "/missing", 404, "no mailbox 'x'"),
        ("GET", "/no/such/route", 404, "404 Not Found: GET /no/such/route"),
        ("GET", "/post-only", 405, "405 Method Not Allowed"),
        ("GET", "/no/" + "x" * 8000, 404, "404 Not Found: GET /no/xxx"),
    ],
    ids=["bug", "disk", "not found", "no route", "method", "no route, 8 KB path"],
)
async def test_every_error_is_json_with_its_cause(server, method, path, status, fragment):
    url, session, node = server
    async with session.request(method, url + path) as resp:
        assert resp.status == status
        assert resp.content_type == "application/json"
        body = await resp.json()
    assert fragment in body["error"]
    assert len(body["error"]) < 300, "a path is the caller's: quoted cut short"
    if status == 405:
        assert "POST" in resp.headers["Allow"]
    assert node.unexpected_errors == (1 if path == "/bug" else 0)


@pytest.mark.parametrize(
    ("body", "fragment"),
    [
        (b"[" * 100_000 + b"]" * 100_000, "nested too deeply"),
        (b"{not json", "not JSON"),
        (b"[1, 2]", "must be a JSON object"),
    ],
    ids=["100,000 deep", "not JSON", "not an object"],
)
async def test_a_malformed_body_is_a_400_naming_why(server, body, fragment):
    url, session, node = server
    async with session.post(url + "/echo", data=body) as resp:
        assert resp.status == 400
        assert fragment in (await resp.json())["error"]
    assert node.unexpected_errors == 0
