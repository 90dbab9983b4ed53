"""Stand-in replication nodes for the guarantee API tests: real aiohttp servers on
127.0.0.1 port 0 that serve a controllable `GET /v1/status` (with the bearer-token check a
real node does) and, when asked to (`watch`), `GET /v1/status/watch`: the node's own
handler over the status set here ("live"), or scripted lines and then silence ("script").
Without `watch` the stream is absent (404), as from a node that predates it: the service
polls.  The status endpoints are all the guarantee API reads.
"""

from __future__ import annotations

import asyncio

from aiohttp import web

from dag_common.auth import HEADER, token_matches
from dag_common.model import NodeStatus
from replication_node.http.context import NODE
from replication_node.http.status_watch import WATCH_TICK, setup_status_watch, status_watch
from tests.cluster_harness import serve_app


class FakeNode:
    """One node: answers `/v1/status` with whatever `status` is set to."""

    def __init__(self, name: str, token: str) -> None:
        self.name = name
        self.token = token
        self.status: NodeStatus | None = None
        self.http_error: int | None = None  # answer with this HTTP status instead
        self.raw_body: bytes | None = None  # answer with this body instead (malformed)
        self.gate: asyncio.Event | None = None  # hold answers until set
        self.polls = 0
        self.watch: str | None = None  # None: no stream (404); "live"; "script"
        # The lines a "script" stream sends before it hangs; an Event in it: wait for it.
        self.script: list[bytes | asyncio.Event] = []
        self.watches = 0  # streams opened
        self.port = 0
        self._runner: web.AppRunner | None = None
        self._hang = asyncio.Event()

    def node_status(self) -> NodeStatus:
        """What the node's own watch handler reads (it asks the node for `status()`)."""
        assert self.status is not None
        return self.status

    async def _watch(self, request: web.Request) -> web.StreamResponse:
        if not token_matches(request.headers.get(HEADER), self.token):
            return web.json_response({"error": "unauthorized"}, status=401)
        if self.watch is None:
            return web.json_response({"error": "not found"}, status=404)
        self.watches += 1
        if self.watch == "live":
            return await status_watch(request)
        response = web.StreamResponse(headers={"Content-Type": "application/x-ndjson"})
        await response.prepare(request)
        for line in self.script:
            if isinstance(line, asyncio.Event):
                await line.wait()
            else:
                await response.write(line)
        await self._hang.wait()  # then silence, until the node stops
        return response

    async def _status(self, request: web.Request) -> web.Response:
        if not token_matches(request.headers.get(HEADER), self.token):
            return web.json_response({"error": "unauthorized"}, status=401)
        if self.gate is not None:
            await self.gate.wait()
        self.polls += 1
        if self.http_error is not None:
            return web.json_response({"error": "injected"}, status=self.http_error)
        if self.raw_body is not None:
            return web.Response(body=self.raw_body, content_type="application/json")
        if self.status is None:
            return web.json_response({"error": "no status"}, status=503)
        return web.Response(body=self.status.model_dump_json(), content_type="application/json")

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def start(self) -> None:
        app = web.Application()
        app[NODE] = _StatusOf(self)  # type: ignore[assignment]
        app[WATCH_TICK] = 0.01
        setup_status_watch(app)
        app.router.add_get("/v1/status", self._status)
        app.router.add_get("/v1/status/watch", self._watch)
        # The same port again after a stop(): a node that comes back where it was.
        self._runner, _ = await serve_app(app, port=self.port)
        self.port = self._runner.addresses[0][1]

    async def stop(self) -> None:
        """Close the listener: polls now fail with connection refused."""
        self._hang.set()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        self._hang = asyncio.Event()


class _StatusOf:
    """The node as the watch handler sees it: its status."""

    def __init__(self, node: FakeNode) -> None:
        self._node = node

    def status(self) -> NodeStatus:
        return self._node.node_status()


class FakeNodes:
    """Several fake nodes, addressed by name."""

    def __init__(self, names: list[str], token: str) -> None:
        self.nodes = {n: FakeNode(n, token) for n in names}

    def __getitem__(self, name: str) -> FakeNode:
        return self.nodes[name]

    @property
    def urls(self) -> dict[str, str]:
        return {n: node.url for n, node in self.nodes.items()}

    def set(self, statuses: dict[str, NodeStatus]) -> None:
        """Serve these statuses from now on."""
        for name, status in statuses.items():
            self.nodes[name].status = status

    async def start(self) -> None:
        for node in self.nodes.values():
            await node.start()

    async def close(self) -> None:
        for node in self.nodes.values():
            await node.stop()
