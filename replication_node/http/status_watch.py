"""`GET /v1/status/watch`: the node's status pushed as it changes (the wire format and the
coalescing rule are `dag_common.status_watch`'s).

The handler looks at the node's status every `WATCH_TICK` seconds (25 ms; the status is
built from memory, about a tenth of a millisecond) and sends the copies whose status changed,
as the coalescer lets them go; a heartbeat when nothing was sent for `heartbeat` seconds
(`?heartbeat=`, 1 s by default, 0.05-60).  Looking rather than being told keeps every
writer of a copy's state (copier, inspector, replayer, block receiver, the active's stream)
free of a hook it could forget.  The watch ends when the watcher goes away or the node's
HTTP side shuts down.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from aiohttp import web

from dag_common.credentials import Role
from dag_common.echo import quoted
from dag_common.route_roles import add_route
from dag_common.status_watch import CONTENT_TYPE, Changed, Coalescer, Heartbeat, Snapshot, encode
from replication_node.errors import BadRequest
from replication_node.http.context import node_of

logger = logging.getLogger(__name__)

WATCH_TICK = web.AppKey("watch_tick", float)
_STOP = web.AppKey("watch_stop", asyncio.Event)


def _heartbeat(request: web.Request) -> float:
    raw = request.query.get("heartbeat", "1")
    try:
        seconds = float(raw)
    except ValueError:
        raise BadRequest(f"heartbeat must be a number of seconds, not {quoted(raw)}") from None
    if not 0.05 <= seconds <= 60:
        raise BadRequest(f"heartbeat must be within 0.05..60 seconds, not {raw}")
    return seconds


async def status_watch(request: web.Request) -> web.StreamResponse:
    node = node_of(request)
    heartbeat = _heartbeat(request)
    tick = request.app.get(WATCH_TICK, 0.025)
    stop = request.app[_STOP]
    # The heartbeat runs on the event loop's clock, not the node's injected one: the watcher
    # takes silence for a dead node by a socket read timeout, which is real time, so a
    # heartbeat held back by a test's ManualClock would make a live node look dead.
    loop = asyncio.get_running_loop()
    response = web.StreamResponse(
        headers={"Content-Type": CONTENT_TYPE, "Cache-Control": "no-store"}
    )
    await response.prepare(request)
    coalescer = Coalescer()
    status = node.status()
    last = loop.time()
    coalescer.sent(status.copies, last)
    try:
        await response.write(encode(Snapshot(status)))
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), tick)
            now = loop.time()
            due = coalescer.due(node.status().copies, now)
            if due:
                await response.write(encode(Changed(tuple(due))))
                last = now
            elif now - last >= heartbeat:
                await response.write(encode(Heartbeat()))
                last = now
    except (ConnectionError, RuntimeError) as exc:  # the watcher went away
        logger.debug("status watch of %s ends: %s", request.remote, exc)
    return response


def setup_status_watch(app: web.Application) -> None:
    """What `status_watch` needs of its app: the watches end when the app shuts down."""
    app[_STOP] = asyncio.Event()

    async def stopping(app: web.Application) -> None:
        app[_STOP].set()

    app.on_shutdown.append(stopping)


def add_status_watch_route(app: web.Application) -> None:
    setup_status_watch(app)
    add_route(app, "GET", "/v1/status/watch", status_watch, Role.MONITOR)
