"""The transport's HTTP API (aiohttp, JSON, the cluster token on every call but /healthz and
/metrics).

    POST /v1/messages            {message_id, recipients, folder?, subject?, body?, format?}
                                 or a message as it is (Content-Type: message/rfc822,
                                 ?to=<mailbox>&to=…&folder=…): queued as the SMTP and
                                 LMTP listeners queue it (400 a line they would refuse)
                                 201 accepted (queued and fsync'd), 200 already accepted
                                 (the same message id: nothing queued twice), 400 malformed
                                 or an unknown recipient, 413 over a recipient database's
                                 max_item_size, 503 the directory cannot be read (not
                                 accepted: submit again)
    GET  /v1/messages/{id}       each recipient's delivery: state, tries, last error, database
    POST /v1/redeliver           {database, start, end} (RFC 3339): a new active's request
                                 after a lossy failover; 200 {"status": "Success", messages}
                                 once the window's messages are queued again
    GET  /v1/queue               deliveries by state, what waits, each database's dumpster
    GET  /v1/poison              the poison queue, each with why
    GET  /healthz, GET /metrics
"""

from __future__ import annotations

import logging
import math
from datetime import datetime
from typing import Any

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from pydantic import BaseModel, ConfigDict, ValidationError

from dag_common.config import ClusterConfig
from dag_common.credentials import Role
from dag_common.deadline_middleware import deadline_middleware
from dag_common.echo import clipped, quoted
from dag_common.errors import BadRequest, BodyIncomplete, RequestTooLarge
from dag_common.http_body import (
    BodyLimit,
    body_share,
    body_text,
    items_body_size,
    parse_json,
    read_body,
)
from dag_common.memory import Overloaded
from dag_common.route_roles import PUBLIC, Call, add_route, role_middleware
from transport.json_message import json_message
from transport.messages import MessageIn
from transport.service import Transport

logger = logging.getLogger(__name__)

TRANSPORT: web.AppKey[Transport] = web.AppKey("transport")


class RedeliverIn(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    database: str
    start: datetime
    end: datetime


def _error(status: int, message: str, **extra: Any) -> web.Response:
    return web.json_response({"error": message, **extra}, status=status)


@web.middleware
async def _errors(request: web.Request, handler: Any) -> web.StreamResponse:
    try:
        return await handler(request)
    except RequestTooLarge as exc:
        return _error(413, str(exc), **exc.details)
    except Overloaded as exc:  # the memory budget had no room in time: come back shortly
        answer = _error(503, str(exc), retry_after=exc.retry_after)
        answer.headers["Retry-After"] = str(math.ceil(exc.retry_after))
        return answer
    except BadRequest as exc:
        return _error(400, str(exc))


def _parse(model: type[BaseModel], data: Any) -> Any:
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        errors = exc.errors()
        # A field's name is the caller's (an unknown key): cut short, and three errors said.
        where = "; ".join(
            f"{clipped('.'.join(str(p) for p in e['loc']) or 'body')}: {e['msg']}"
            for e in errors[:3]
        )
        more = f" (and {len(errors) - 3} more)" if len(errors) > 3 else ""
        raise BadRequest(f"bad request: {where}{more}") from None


async def _json(request: web.Request, limit: BodyLimit) -> Any:
    return parse_json(body_text(await read_body(request, limit)))


async def read_message(request: web.Request, limit: BodyLimit) -> bytearray:
    """A message/rfc822 body, held once: one with a Content-Length (and no Content-Encoding,
    so that what arrives is what was declared) is read into a buffer of that size, where a
    buffer grown as it is read is copied as it grows and leaves the allocator's heap in
    pieces (`read_body`, which reads the others and refuses a length over `limit`)."""
    size = request.content_length
    if size is None or size > limit.size or "Content-Encoding" in request.headers:
        return await read_body(request, limit)
    body = bytearray(size)
    at = 0
    with memoryview(body) as view:
        try:
            while at < size and (chunk := await request.content.readany()):
                end = min(at + len(chunk), size)  # aiohttp gives no more than declared
                view[at:end] = chunk[: end - at]
                at = end
        except ConnectionResetError as exc:  # the client closed mid-upload
            raise BodyIncomplete(
                f"request body ended after {at} of {size} bytes ({exc}); nothing queued"
            ) from None
    if at < size:
        raise BodyIncomplete(f"request body ended after {at} of {size} bytes; nothing queued")
    return body


def message_limit(config: ClusterConfig) -> BodyLimit:
    """What a submission may carry: as a node's write of items to the database with the
    largest max_item_size (twice it, for JSON's escapes, and 1 MiB: `http_body.py`)."""
    largest = config.largest_max_item_size()
    return BodyLimit(items_body_size(largest), "for a message", largest)


async def post_message(request: web.Request) -> web.Response:
    transport = request.app[TRANSPORT]
    limit = message_limit(transport.config)
    # The body's share of the transport's memory budget, before a byte of it is read.
    size = body_share(request, limit)
    async with transport.memory.share(size, "a message"):
        if request.content_type == "message/rfc822":
            raw = await read_message(request, limit)
            recipients = request.query.getall("to", [])
            if not recipients:
                raise BadRequest("a message/rfc822 submission names its recipients: ?to=…")
            folder = request.query.get("folder", "Inbox")
            outcome = await transport.submit_message(
                raw, recipients, folder, peer=request.remote or "", secure=request.secure
            )
        else:
            # A large body held once, as the request's bytes (`json_message.py`).
            message = await json_message(request, limit, lambda data: _parse(MessageIn, data))
            outcome = await transport.submit(message)
    return web.json_response(outcome.body, status=outcome.status)


async def get_message(request: web.Request) -> web.Response:
    message_id = request.match_info["message_id"]
    deliveries = await request.app[TRANSPORT].store.message(message_id)
    if not deliveries:
        return _error(404, f"no message {quoted(message_id)} in the queue or the dumpster")
    rows = [d._asdict() for d in deliveries]
    return web.json_response({"message_id": message_id, "deliveries": rows})


async def redeliver(request: web.Request) -> web.Response:
    body = _parse(RedeliverIn, await _json(request, BodyLimit(64 * 1024, "for a request")))
    if body.start.tzinfo is None or body.end.tzinfo is None:
        raise BadRequest("start and end must name their time zone (RFC 3339)")
    if body.end < body.start:
        raise BadRequest("end is before start")
    count = await request.app[TRANSPORT].redeliver(body.database, body.start, body.end)
    return web.json_response({"status": "Success", "database": body.database, "messages": count})


async def queue_state(request: web.Request) -> web.Response:
    state = await request.app[TRANSPORT].queue_state()
    return web.json_response(text=state.model_dump_json())


async def poison(request: web.Request) -> web.Response:
    poisoned = await request.app[TRANSPORT].store.poisoned()
    return web.json_response({"poison": [p._asdict() for p in poisoned]})


async def healthz(request: web.Request) -> web.Response:
    return web.json_response({"status": "ok", "transport": request.app[TRANSPORT].name})


async def metrics(request: web.Request) -> web.Response:
    transport = request.app[TRANSPORT]
    await transport.refresh_gauges()
    return web.Response(
        body=generate_latest(transport.metrics.registry),
        headers={"Content-Type": CONTENT_TYPE_LATEST},
    )


def build_app(transport: Transport) -> web.Application:
    """The API, each route held to its role: senders hold `store`, the nodes asking for
    redelivery `replication`, dashboards `monitor`."""
    tls = transport.config.tls
    nodes = None
    if tls is not None and tls.client_ca_file is not None:  # redelivery: a node's certificate
        nodes = lambda: {n.name for n in transport.config.nodes}  # noqa: E731

    def refused(call: Call) -> None:  # the middleware tells every refusal
        if call.status in (401, 403):
            transport.metrics.calls_refused.labels(call.role or "none", str(call.status)).inc()

    app = web.Application(
        middlewares=[
            role_middleware(transport.credentials, refused, nodes=nodes),
            deadline_middleware(lambda: transport.clock.now().timestamp()),
            _errors,
        ]
    )
    app[TRANSPORT] = transport
    add_route(app, "POST", "/v1/messages", post_message, Role.STORE)
    add_route(app, "GET", "/v1/messages/{message_id}", get_message, Role.STORE)
    add_route(app, "POST", "/v1/redeliver", redeliver, Role.REPLICATION)
    add_route(app, "GET", "/v1/queue", queue_state, Role.MONITOR)
    add_route(app, "GET", "/v1/poison", poison, Role.MONITOR)
    add_route(app, "GET", "/healthz", healthz, PUBLIC)
    add_route(app, "GET", "/metrics", metrics, PUBLIC)
    return app
