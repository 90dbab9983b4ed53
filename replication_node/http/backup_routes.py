"""The backup routes of the node's HTTP API.

- On the node of the copy backed up: `POST /v1/databases/{db}/backup {from, to,
  incremental?}` takes the backup (`Node.backup`) and answers its manifest once complete.
- On the active: `POST /v1/databases/{db}/backups {node, kind}` begins one (a lease),
  `…/backups/{id}/renew` keeps it, `…/backups/{id}/roll` closes the open log (where the
  backup ends), `…/backups/{id}/end {generation, ended_at}` commits the stamp, and
  `…/backups/{id}/abort` ends it without one.  `GET /v1/databases/{db}/backups` says which
  backup runs.  All need the token, as every admin call.

Thin handlers: the work is in `backup/` (`backup.py` on the backing-up node,
`active/backup_leases.py`, through the active's seam).
"""

from __future__ import annotations

from pathlib import Path

from aiohttp import web

from dag_common.credentials import Role
from dag_common.route_roles import add_route
from replication_node.errors import NotFound
from replication_node.http.context import (
    active_for_write,
    active_here,
    json_body,
    mounted_copy,
    node_of,
)
from replication_node.http.models import BackupBeginIn, BackupEndIn, BackupIn, parse


async def take_backup(request: web.Request) -> web.Response:
    node, db = node_of(request), request.match_info["db"]
    body = parse(BackupIn, await json_body(request))
    if body.from_ != node.name:
        raise NotFound(f"the copy of {db} on {body.from_} is not on this node ({node.name})")
    answer = await node.backup(db, Path(body.to), incremental=body.incremental)
    return web.json_response(answer.as_dict())


async def begin(request: web.Request) -> web.Response:
    body = parse(BackupBeginIn, await json_body(request))
    # mounted, not being switched over
    answer = active_for_write(request).begin_backup(body.node, body.kind)
    return web.json_response(text=answer.model_dump_json())


async def renew(request: web.Request) -> web.Response:
    running = active_here(request).backups.renew(request.match_info["id"])
    return web.json_response({"backup_id": running.backup_id})


async def roll(request: web.Request) -> web.Response:
    instance = active_for_write(request)
    instance.backups.renew(request.match_info["id"])
    await instance.roll()
    last = mounted_copy(instance).stream.last_closed_generation
    return web.json_response({"last_generation": last})


async def end(request: web.Request) -> web.Response:
    body = parse(BackupEndIn, await json_body(request))
    answer = await active_for_write(request).stamp_backup(
        request.match_info["id"], generation=body.generation, ended=body.ended_at
    )
    return web.json_response(text=answer.model_dump_json())


async def abort(request: web.Request) -> web.Response:
    active_here(request).backups.finish(request.match_info["id"])
    return web.json_response({"aborted": request.match_info["id"]})


async def running(request: web.Request) -> web.Response:
    lease = active_here(request).backups.running()
    return web.json_response({"running": lease.describe() if lease else None})


def add_backup_routes(app: web.Application) -> None:
    """The backup call and the active's backup coordination."""
    prefix = "/v1/databases/{db}"
    add_route(app, "POST", prefix + "/backup", take_backup, Role.OPERATOR, audited=True)
    add_route(app, "POST", prefix + "/backups", begin, Role.REPLICATION, audited=True)
    add_route(app, "GET", prefix + "/backups", running, Role.MONITOR)
    add_route(app, "POST", prefix + "/backups/{id}/renew", renew, Role.REPLICATION)
    add_route(app, "POST", prefix + "/backups/{id}/roll", roll, Role.REPLICATION)
    add_route(app, "POST", prefix + "/backups/{id}/end", end, Role.REPLICATION, audited=True)
    add_route(app, "POST", prefix + "/backups/{id}/abort", abort, Role.REPLICATION, audited=True)
