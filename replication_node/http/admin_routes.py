"""The status and admin routes of the node's HTTP API: health, status, log roll, copy
actions, activation and switchover, a database's role changes (history), and the active's
own admin calls (quiesce, mount, dismount, the hand-over of its last logs).

Thin handlers: the operations themselves live in the node (`NodeApi`), the active instance,
`cluster/activation.py` and `cluster/switchover.py`, whose frozen results are the answers'
models (`dag_common/admin_api.py`), written here as they are.
"""

from __future__ import annotations

import dataclasses
import json

from aiohttp import web

from dag_common.credentials import Role
from dag_common.echo import quoted
from dag_common.route_roles import PUBLIC, add_route
from dag_common.store_api import LogPosition, Rolled
from replication_node.admin_api import (
    AuditAnswer,
    CopyAction,
    CopyOrder,
    EpochEntry,
    History,
    QuiesceAnswer,
    RedeliveryEntry,
)
from replication_node.audit import AuditLog
from replication_node.errors import BadRequest, NotFound
from replication_node.http.context import (
    active_for_write,
    active_here,
    json_body,
    mounted_copy,
    node_of,
)
from replication_node.http.models import ActivateIn, HandOverIn, ReasonIn, TargetIn, parse
from replication_node.log.logfile import HEADER_SIZE


async def healthz(request: web.Request) -> web.Response:
    return web.json_response({"ok": True, "node": node_of(request).name})


async def status(request: web.Request) -> web.Response:
    return web.json_response(
        node_of(request).status().model_dump(mode="json"),
    )


async def roll_log(request: web.Request) -> web.Response:
    instance = active_for_write(request)
    generation = await instance.roll()  # published before the answer
    answer = Rolled(database=instance.database, generation=generation, epoch=instance.epoch)
    return web.json_response(answer.wire())


async def log_position(request: web.Request) -> web.Response:
    """Where the active's log stands: its open generation and how much of it is durable
    (every commit answered so far lies below), and the copies following it in block mode.
    The mover flushes through this point without a roll when every copy follows."""
    instance = active_for_write(request)
    feed = mounted_copy(instance).stream.feed
    db = instance.database
    node = node_of(request)
    answer = LogPosition(
        database=db,
        open_generation=feed.generation,
        durable=feed.durable,
        # Only the header (512 bytes): every record is in a closed generation.
        open_records=feed.durable > HEADER_SIZE,
        block_followers=tuple(sorted(feed.followers)),
        passive_copies=tuple(
            sorted(c.node for c in node.config.database(db).copies if c.node != node.name)
        ),
        epoch=instance.epoch,
    )
    return web.json_response(answer.wire())


async def copy_action(request: web.Request) -> web.Response:
    node = node_of(request)
    db, target, action = (request.match_info[k] for k in ("db", "node", "action"))
    if target != node.name:
        raise NotFound(f"the copy of {db} on {target} is not on this node ({node.name})")
    body = parse(ReasonIn, await json_body(request))
    order = CopyOrder(CopyAction(action), body.reason, body.activation_only)
    result = await node.copy_action(db, order)
    return web.json_response(text=result.model_dump_json())


async def reconcile(request: web.Request) -> web.Response:
    """Re-read who is active now (after an activation) instead of at the next refresh."""
    node = node_of(request)
    await node.reconcile()
    return web.json_response(node.status().model_dump(mode="json"))


async def activate(request: web.Request) -> web.Response:
    body = parse(ActivateIn, await json_body(request))
    result = await node_of(request).activate(
        request.match_info["db"], body.node, body.mount_dial_override
    )
    return web.json_response(text=result.model_dump_json())


async def audit(request: web.Request) -> web.Response:
    """This node's audit lines, oldest first: `?database=` only that database's, `?limit=`
    the newest that many (100; at most 10,000)."""
    node = node_of(request)
    try:
        limit = int(request.query.get("limit", "100"))
    except ValueError:
        raise BadRequest("limit must be an integer") from None
    if not 1 <= limit <= 10_000:
        raise BadRequest("limit must be within 1..10000")
    log = node.audit if isinstance(node.audit, AuditLog) else None
    lines = log.read(database=request.query.get("database"), limit=limit) if log else []
    return web.json_response(text=AuditAnswer(node=node.name, lines=lines).model_dump_json())


async def history(request: web.Request) -> web.Response:
    """The role changes of a database, oldest first, as the cluster store recorded them:
    one entry per epoch (any node answers: they share the store)."""
    node, name = node_of(request), request.match_info["db"]
    try:
        node.config.database(name)
    except KeyError:
        raise NotFound(f"no database {quoted(name)}") from None
    records = await node.cluster_store.history(name)
    redelivery = await node.cluster_store.redelivery(name)
    answer = History(
        database=name,
        # the transport dumpster's redelivery after a lossy activation: the last one
        redelivery=RedeliveryEntry(
            **json.loads(redelivery.to_json()),
            required=redelivery.required,
            summary=redelivery.describe(),
        )
        if redelivery
        else None,
        epochs=[EpochEntry.of(r) for r in records],
    )
    return web.json_response(text=answer.model_dump_json())


async def switchover(request: web.Request) -> web.Response:
    body = parse(TargetIn, await json_body(request))
    result = await node_of(request).switchover(request.match_info["db"], body.target)
    return web.json_response(text=result.model_dump_json())


async def quiesce(request: web.Request) -> web.Response:
    """Switchover, on the active's node: stop writes and close the open log."""
    body = parse(TargetIn, await json_body(request))
    generation = await active_for_write(request).quiesce(body.target)
    return web.json_response(text=QuiesceAnswer(last_log_generated=generation).model_dump_json())


async def mount(request: web.Request) -> web.Response:
    """Re-mount a dismounted active copy now, through crash recovery (`db mount`)."""
    instance = active_here(request)
    mounted = await instance.mount_again()
    return web.json_response(
        {"database": instance.database, "mounted": True, "was_mounted": not mounted}
    )


async def dismount(request: web.Request) -> web.Response:
    """Dismount the active copy cleanly; it stays dismounted until `db mount` (`db dismount`)."""
    instance = active_here(request)
    done = await instance.dismount()
    return web.json_response({"database": instance.database, "mounted": False, "was_mounted": done})


async def hand_over(request: web.Request) -> web.Response:
    """Attempt Copy Last Logs, on the old active's node: hold the last logs for the copy
    taking over and say what is on disk (the log share's info)."""
    body = parse(HandOverIn, await json_body(request))
    node, name = node_of(request), request.match_info["db"]
    try:
        others = {c.node for c in node.config.database(name).copies} - {node.name}
    except KeyError:
        raise NotFound(f"no database {quoted(name)}") from None
    if body.to not in others:
        raise BadRequest(f"to: {quoted(body.to)} holds no other copy of {name}")
    info = await active_here(request).share.hand_over(body.to)
    return web.json_response(dataclasses.asdict(info))


async def copy_last_logs(request: web.Request) -> web.Response:
    """Attempt Copy Last Logs, on the node of the copy taking over: copy every closed
    generation and the open log from its active, which is not mounted."""
    answer = await node_of(request).copy_last_logs(request.match_info["db"])
    return web.json_response(text=answer.model_dump_json(by_alias=True))


async def keep_block_buffer(request: web.Request) -> web.Response:
    """On the node of the copy taking over: keep its block-mode buffer of the open log."""
    answer = await node_of(request).keep_block_buffer(request.match_info["db"])
    return web.json_response(text=answer.model_dump_json())


async def unquiesce(request: web.Request) -> web.Response:
    active_here(request).unquiesce()
    return web.json_response({"ok": True})


def add_admin_routes(app: web.Application) -> None:
    """Health, status and the admin calls."""
    prefix = "/v1/databases/{db}"
    add_route(app, "GET", "/healthz", healthz, PUBLIC)
    add_route(app, "GET", "/v1/status", status, Role.MONITOR)
    add_route(app, "POST", prefix + "/roll-log", roll_log, Role.MOVER, audited=True)
    add_route(app, "GET", prefix + "/log/position", log_position, Role.MOVER)
    add_route(
        app,
        "POST",
        prefix + "/copies/{node}/{action:suspend|resume|reseed}",
        copy_action,
        Role.OPERATOR,
        audited=True,
    )
    add_route(app, "POST", prefix + "/activate", activate, Role.OPERATOR, audited=True)
    add_route(app, "POST", prefix + "/switchover", switchover, Role.OPERATOR, audited=True)
    add_route(app, "GET", prefix + "/history", history, Role.MONITOR)
    add_route(app, "GET", "/v1/audit", audit, Role.MONITOR)
    add_route(app, "POST", prefix + "/quiesce", quiesce, Role.REPLICATION, audited=True)
    add_route(app, "POST", prefix + "/unquiesce", unquiesce, Role.REPLICATION, audited=True)
    add_route(app, "POST", prefix + "/mount", mount, Role.OPERATOR, audited=True)
    add_route(app, "POST", prefix + "/dismount", dismount, Role.OPERATOR, audited=True)
    add_route(app, "POST", prefix + "/hand-over", hand_over, Role.REPLICATION, audited=True)
    add_route(
        app, "POST", prefix + "/copy-last-logs", copy_last_logs, Role.REPLICATION, audited=True
    )
    add_route(
        app,
        "POST",
        prefix + "/keep-block-buffer",
        keep_block_buffer,
        Role.REPLICATION,
        audited=True,
    )
    add_route(app, "POST", "/v1/reconcile", reconcile, Role.REPLICATION)
