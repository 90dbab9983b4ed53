"""The node's HTTP API (aiohttp): store, status and admin routes of DESIGN.md.

Thin handlers: parse and check the request, call the instance, turn domain errors into
status codes (here and nowhere else).  The log share routes live in `logshare.py`.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import re
from typing import TYPE_CHECKING, Any

from aiohttp import web

from dag_common.mailbox_digest import mailbox_digest
from replication_node.active.instance import ActiveInstance
from replication_node.errors import (
    BadRequest,
    Conflict,
    DatabaseError,
    LogStreamStopped,
    MountRefused,
    NotActive,
    NotFound,
    ReplicationError,
    StoreError,
    TransactionTooLarge,
)
from replication_node.http.models import (
    ActivateIn,
    FolderIn,
    HandOverIn,
    ItemIn,
    ItemsIn,
    MailboxIn,
    ReasonIn,
    TargetIn,
    parse,
)
from replication_node.storage.ops import NAME_PATTERN

if TYPE_CHECKING:
    from replication_node.node import Node

logger = logging.getLogger(__name__)
NODE: web.AppKey[Node] = web.AppKey("node")
_NAME = re.compile(NAME_PATTERN)

_STATUS = {
    NotFound: 404,
    Conflict: 409,
    NotActive: 409,
    BadRequest: 400,
    TransactionTooLarge: 413,
}


MAX_CHANGE_NUMBER = 2**63 - 1  # SQLite's INTEGER: a larger number overflowed into a 500


def json_error(status: int, message: str, **extra: Any) -> web.Response:
    return web.json_response({"error": message, **extra}, status=status)


@web.middleware
async def error_middleware(request: web.Request, handler: Any) -> web.StreamResponse:
    """Every error answer is JSON with its cause, whatever raised it: domain errors get their
    status, a failing disk 503 naming the OS error, aiohttp's own errors (404, 405, 413) their
    status, and anything else 500 logged as the bug it is.  Nothing leaks as plain text."""
    try:
        return await handler(request)
    except web.HTTPException as exc:
        if exc.status < 400 or exc.content_type == "application/json":
            raise
        kept = {k: v for k, v in exc.headers.items() if k.lower() in ("allow", "www-authenticate")}
        return web.json_response(
            {"error": f"{exc.status} {exc.reason}: {request.method} {request.path}"},
            status=exc.status,
            headers=kept,
        )
    except NotActive as exc:
        node = request.app[NODE]
        db = request.match_info.get("db", "")
        active = node.active_of(db)
        instance = node.instance(db)
        # A switchover under way: this node still names itself active until the role
        # moves; `switching_to` tells a client to ask again shortly rather than give up.
        switching = instance.switching_to if isinstance(instance, ActiveInstance) else None
        return json_error(
            409, str(exc), active_node=active[0], active_url=active[1], switching_to=switching
        )
    except MountRefused as exc:
        return json_error(409, str(exc), **exc.details)
    except StoreError as exc:
        status = next((code for kind, code in _STATUS.items() if isinstance(exc, kind)), 400)
        return json_error(status, str(exc))
    except (DatabaseError, ReplicationError) as exc:
        logger.error("%s %s failed: %s", request.method, request.path, exc)
        return json_error(503, str(exc))
    except OSError as exc:  # a full or failing disk: the node cannot serve this now
        logger.error("%s %s failed on storage: %s", request.method, request.path, exc)
        return json_error(503, f"storage error on node {request.app[NODE].name}: {exc}")
    except Exception as exc:
        request.app[NODE].unexpected_errors += 1
        logger.exception("%s %s: unexpected error (a bug)", request.method, request.path)
        return json_error(500, f"internal error ({type(exc).__name__}: {exc}); see the node's log")


async def _body(request: web.Request) -> dict[str, Any]:
    if not request.can_read_body:
        return {}
    try:
        data = await request.json()
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise BadRequest(f"request body is not JSON: {exc}") from exc
    except RecursionError as exc:
        raise BadRequest("request body is nested too deeply") from exc
    if not isinstance(data, dict):
        raise BadRequest("request body must be a JSON object")
    return data


def _flag(request: web.Request, name: str) -> bool:
    return request.query.get(name, "").lower() in ("1", "true", "yes")


def _active(request: web.Request) -> ActiveInstance:
    node = request.app[NODE]
    db = request.match_info["db"]
    instance = node.instance(db)
    if instance is None:
        raise NotFound(f"no copy of database {db!r} on node {node.name}")
    _not_dismounted(instance, db, node.name)
    if not isinstance(instance, ActiveInstance) or instance.store is None:
        raise NotActive(f"the copy of {db} on {node.name} is passive; write to the active copy")
    if instance.switching_to is not None:
        raise NotActive(f"{db} is being switched over to {instance.switching_to}; write there")
    return instance


def _not_dismounted(instance: Any, db: str, node: str) -> None:
    """An active copy that is dismounted (a failure, or an operator) answers 503 with why:
    it is still the active, nothing else serves this database here, and the call may work
    again after a re-mount or a failover."""
    if isinstance(instance, ActiveInstance) and instance.copy is None:
        if instance.dismounted_by_operator:
            why = "dismounted by an operator (replication-node db mount re-mounts it)"
        else:
            why = instance.error or "not mounted"
        raise LogStreamStopped(f"{db} on {node} is {why}")


def _reader(request: web.Request) -> Any:
    node = request.app[NODE]
    db = request.match_info["db"]
    _not_dismounted(node.instance(db), db, node.name)
    reader = node.reader(db)
    if reader is None:
        raise NotFound(f"no readable copy of database {db!r} on node {node.name}")
    return reader


def _epoch(request: web.Request) -> int:
    """The stream incarnation of the copy that answers a read (0: not known yet)."""
    return request.app[NODE].epoch_of(request.match_info["db"])


def _mailbox_name(request: web.Request) -> str:
    name = request.match_info["mailbox"]
    if not _NAME.match(name):
        raise BadRequest(f"invalid mailbox name {name!r}")
    return name


# ---- store ---------------------------------------------------------------------------


async def put_mailbox(request: web.Request) -> web.Response:
    body = parse(MailboxIn, await _body(request))
    mailbox = request.match_info["mailbox"]
    instance = _active(request)
    result = await instance.store.create_mailbox(  # type: ignore[union-attr]
        mailbox,
        display_name=body.display_name,
        folders=body.folders,
        locked=body.locked,
    )
    # A new mailbox enters the mailbox directory; a move's target copy does not (the
    # directory still names the source until the move's step 8).
    await request.app[NODE].cluster_store.set_mailbox_database(
        mailbox, instance.database, expected=None
    )
    return web.json_response(result.as_dict(), status=201)


async def list_mailboxes(request: web.Request) -> web.Response:
    return web.json_response({"mailboxes": _reader(request).mailboxes(), "epoch": _epoch(request)})


async def get_mailbox(request: web.Request) -> web.Response:
    name = _mailbox_name(request)
    reader = _reader(request)
    row = reader.mailbox(name)
    if row is None:
        raise NotFound(f"no mailbox {name!r}")
    return web.json_response({**row, "folders": reader.folders(name), "epoch": _epoch(request)})


async def mailbox_digest_route(request: web.Request) -> web.Response:
    """Item count and digest of a mailbox's live items, as this copy serves them."""
    name = _mailbox_name(request)
    reader = _reader(request)
    epoch = _epoch(request)
    if reader.mailbox(name) is None:
        raise NotFound(f"no mailbox {name!r}")
    # The items are read on the loop (the active merges its LLR overlay, which only the
    # loop touches); hashing that snapshot, the costly part, does not hold the loop.
    digest = await asyncio.to_thread(mailbox_digest, name, reader.items(name, 0))
    return web.json_response(
        {
            "mailbox": name,
            "item_count": digest.item_count,
            "digest": digest.digest,
            "last_change_number": digest.last_change_number,
            "epoch": epoch,
        }
    )


async def create_folder(request: web.Request) -> web.Response:
    body = parse(FolderIn, await _body(request))
    result = await _active(request).store.create_folder(  # type: ignore[union-attr]
        request.match_info["mailbox"], body.folder, override_lock=_flag(request, "override_lock")
    )
    return web.json_response(result.as_dict(), status=201)


async def post_items(request: web.Request) -> web.Response:
    raw = await _body(request)
    # Several items ({"items": [...]}, one transaction) or one item as the body itself.
    items = parse(ItemsIn, raw).items if "items" in raw else [parse(ItemIn, raw)]
    result = await _active(request).store.put_items(  # type: ignore[union-attr]
        request.match_info["mailbox"],
        [item.model_dump(exclude_none=True) for item in items],
        override_lock=_flag(request, "override_lock"),
    )
    return web.json_response(result.as_dict(), status=201)


async def get_items(request: web.Request) -> web.Response:
    name = _mailbox_name(request)
    reader = _reader(request)
    try:
        since = int(request.query.get("since_change", "0"))
    except ValueError as exc:
        raise BadRequest("since_change must be an integer") from exc
    if not 0 <= since <= MAX_CHANGE_NUMBER:
        raise BadRequest(f"since_change must be within 0..{MAX_CHANGE_NUMBER}")
    if reader.mailbox(name) is None:
        raise NotFound(f"no mailbox {name!r}")
    items = reader.items(name, since)
    return web.json_response(
        {
            "mailbox": name,
            "since_change": since,
            "items": items,
            "last_change_number": max((i["change_number"] for i in items), default=since),
            "epoch": _epoch(request),
        }
    )


async def delete_item(request: web.Request) -> web.Response:
    result = await _active(request).store.delete_item(  # type: ignore[union-attr]
        request.match_info["mailbox"],
        request.match_info["item_id"],
        override_lock=_flag(request, "override_lock"),
    )
    return web.json_response(result.as_dict())


async def mailbox_action(request: web.Request) -> web.Response:
    action = request.match_info["action"]
    changes = {
        "lock": {"locked": True},
        "unlock": {"locked": False},
        "soft-delete": {"soft_deleted": True},
    }[action]
    result = await _active(request).store.set_mailbox(  # type: ignore[union-attr]
        request.match_info["mailbox"], **changes
    )
    return web.json_response(result.as_dict())


# ---- status and admin ------------------------------------------------------------------


async def healthz(request: web.Request) -> web.Response:
    return web.json_response({"ok": True, "node": request.app[NODE].name})


async def status(request: web.Request) -> web.Response:
    return web.json_response(
        request.app[NODE].status().model_dump(mode="json"),
    )


async def roll_log(request: web.Request) -> web.Response:
    instance = _active(request)
    generation = await instance.copy.roll(force=True)  # type: ignore[union-attr]
    # Published before the answer: an activation counts lost logs from it.
    await instance.publish()
    return web.json_response(
        {"database": instance.database, "closed_generation": generation, "epoch": instance.epoch}
    )


async def copy_action(request: web.Request) -> web.Response:
    node = request.app[NODE]
    db, target, action = (request.match_info[k] for k in ("db", "node", "action"))
    if target != node.name:
        raise NotFound(f"the copy of {db} on {target} is not on this node ({node.name})")
    body = parse(ReasonIn, await _body(request))
    result = await node.copy_action(db, action, reason=body.reason)
    return web.json_response(result)


async def reconcile(request: web.Request) -> web.Response:
    """Re-read who is active now (after an activation) instead of at the next refresh."""
    node = request.app[NODE]
    await node.reconcile()
    return web.json_response(node.status().model_dump(mode="json"))


async def activate(request: web.Request) -> web.Response:
    body = parse(ActivateIn, await _body(request))
    result = await request.app[NODE].activate(
        request.match_info["db"], body.node, body.mount_dial_override
    )
    return web.json_response(result)


async def switchover(request: web.Request) -> web.Response:
    body = parse(TargetIn, await _body(request))
    return web.json_response(
        await request.app[NODE].switchover(request.match_info["db"], body.target)
    )


async def quiesce(request: web.Request) -> web.Response:
    """Switchover, on the active's node: stop writes and close the open log."""
    body = parse(TargetIn, await _body(request))
    generation = await _active(request).quiesce(body.target)
    return web.json_response({"last_log_generated": generation})


def _active_here(request: web.Request) -> ActiveInstance:
    node = request.app[NODE]
    db = request.match_info["db"]
    instance = node.instance(db)
    if not isinstance(instance, ActiveInstance):
        raise NotFound(f"the active copy of {db} is not on {node.name}")
    return instance


async def mount(request: web.Request) -> web.Response:
    """Re-mount a dismounted active copy now, through crash recovery (`db mount`)."""
    instance = _active_here(request)
    mounted = await instance.mount_again()
    return web.json_response(
        {"database": instance.database, "mounted": True, "was_mounted": not mounted}
    )


async def dismount(request: web.Request) -> web.Response:
    """Dismount the active copy cleanly; it stays dismounted until `db mount` (`db dismount`)."""
    instance = _active_here(request)
    done = await instance.dismount()
    return web.json_response({"database": instance.database, "mounted": False, "was_mounted": done})


async def hand_over(request: web.Request) -> web.Response:
    """Attempt Copy Last Logs, on the old active's node: hold the last logs for the copy
    taking over and say what is on disk (the log share's info)."""
    body = parse(HandOverIn, await _body(request))
    node, name = request.app[NODE], request.match_info["db"]
    try:
        others = {c.node for c in node.config.database(name).copies} - {node.name}
    except KeyError:
        raise NotFound(f"no database {name!r}") from None
    if body.to not in others:
        raise BadRequest(f"to: {body.to!r} holds no other copy of {name}")
    info = await _active_here(request).hand_over(body.to)
    return web.json_response(dataclasses.asdict(info))


async def copy_last_logs(request: web.Request) -> web.Response:
    """Attempt Copy Last Logs, on the node of the copy taking over: copy every closed
    generation and the open log from its active, which is not mounted."""
    return web.json_response(await request.app[NODE].copy_last_logs(request.match_info["db"]))


async def unquiesce(request: web.Request) -> web.Response:
    node = request.app[NODE]
    instance = node.instance(request.match_info["db"])
    if not isinstance(instance, ActiveInstance):
        raise NotFound(f"no active copy of {request.match_info['db']} on {node.name}")
    instance.unquiesce()
    return web.json_response({"ok": True})


def add_routes(app: web.Application) -> None:
    prefix = "/v1/databases/{db}"
    mbx = prefix + "/mailboxes/{mailbox}"
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/v1/status", status)
    app.router.add_put(mbx, put_mailbox)
    app.router.add_get(prefix + "/mailboxes", list_mailboxes)
    app.router.add_get(mbx, get_mailbox)
    app.router.add_get(mbx + "/digest", mailbox_digest_route)
    app.router.add_post(mbx + "/folders", create_folder)
    app.router.add_post(mbx + "/items", post_items)
    app.router.add_get(mbx + "/items", get_items)
    app.router.add_delete(mbx + "/items/{item_id}", delete_item)
    app.router.add_post(mbx + "/{action:lock|unlock|soft-delete}", mailbox_action)
    app.router.add_post(prefix + "/roll-log", roll_log)
    app.router.add_post(prefix + "/copies/{node}/{action:suspend|resume|reseed}", copy_action)
    app.router.add_post(prefix + "/activate", activate)
    app.router.add_post(prefix + "/switchover", switchover)
    app.router.add_post(prefix + "/quiesce", quiesce)
    app.router.add_post(prefix + "/unquiesce", unquiesce)
    app.router.add_post(prefix + "/mount", mount)
    app.router.add_post(prefix + "/dismount", dismount)
    app.router.add_post(prefix + "/hand-over", hand_over)
    app.router.add_post(prefix + "/copy-last-logs", copy_last_logs)
    app.router.add_post("/v1/reconcile", reconcile)
