"""The requests a node is answering, so that a stopping node waits for them a bounded time
and names in its log the ones that would not end, with the line each waits on.

A node stopping (SIGTERM) stops listening, stops its databases, and shuts its app down: the
pushed streams end (their on_shutdown hooks), then, as the last hook, the requests still in
flight get `SHUTDOWN_GRACE` seconds: any still running after that is logged with its whole
await chain and cancelled by the runner.  A
request that never answers can then never keep a node from stopping (a supervisor, Helm's
rolling update or an operator's restart would otherwise wait on it for ever).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from aiohttp import web

from replication_node.taskdump import describe_tasks

logger = logging.getLogger(__name__)

IN_FLIGHT: web.AppKey[set[asyncio.Task[Any]]] = web.AppKey("in_flight")
# How long a stopping node waits for the requests it is answering before it cancels them
# (a peer that stopped reading a seed, a client gone silent): a node always stops.
SHUTDOWN_GRACE = 5.0


@web.middleware
async def track_in_flight(request: web.Request, handler: Any) -> web.StreamResponse:
    """Outermost middleware: the request's task is in the app's IN_FLIGHT while it runs."""
    task = asyncio.current_task()
    tasks = request.app[IN_FLIGHT]
    if task is not None:
        tasks.add(task)
    try:
        return await handler(request)
    finally:
        tasks.discard(task)


def setup_in_flight(app: web.Application, grace: float = SHUTDOWN_GRACE) -> None:
    """Track the app's requests (the outermost middleware) and wait for them at shutdown.
    Called once every other on_shutdown hook is added: the streams those end must not use
    up the grace."""
    app[IN_FLIGHT] = set()
    app.middlewares.insert(0, track_in_flight)

    async def in_flight_ended(app: web.Application) -> None:
        await wait_in_flight(app, grace)

    app.on_shutdown.append(in_flight_ended)


async def wait_in_flight(app: web.Application, grace: float) -> list[str]:
    """Wait up to `grace` seconds for the requests in flight to end; the await chain of each
    one still running (logged here, for the runner's cleanup to cancel)."""
    tasks = app[IN_FLIGHT]
    if tasks:
        await asyncio.wait(set(tasks), timeout=grace)
    stuck = [t for t in tasks if not t.done()]
    texts = describe_tasks(set(stuck))
    for text in texts:
        logger.warning("a request still running %gs into shutdown is cancelled: %s", grace, text)
    return texts
