"""The one error answer of the node's HTTP API: every failure becomes JSON with its cause.

Domain errors get their status here and nowhere else: a store error its 4xx, NotActive 409
naming the active (and `switching_to` during a switchover), a refused mount 409 with the
loss, a body or an item over its limit 413 naming the limit (the connection closed when the
body was not read), a failing database or disk 503 naming the error, a write the memory
budget has no room for 503 with Retry-After, aiohttp's own errors
(404, 405, 413) their status, and anything else 500, counted and logged as the bug it is.
A caller that went away before its answer (its connection closed, so writing the answer
raised a `ConnectionError`, an `OSError` like a failing disk's) is none of these: logged at
INFO, answered 499 for the access log (nginx's "client closed request"), counted nowhere.
"""

from __future__ import annotations

import logging
import math
from typing import Any

from aiohttp import web

from dag_common.echo import clipped
from dag_common.errors import ClusterStoreError, RequestError, StoreConflict
from dag_common.memory import Overloaded
from replication_node.errors import (
    BadRequest,
    BodyChanged,
    Conflict,
    DatabaseError,
    MountRefused,
    NotActive,
    NotFound,
    ReplicationError,
    RequestTooLarge,
    StoreError,
    TransactionTooLarge,
)
from replication_node.http.context import node_of

logger = logging.getLogger(__name__)

_STATUS = {
    NotFound: 404,
    Conflict: 409,
    NotActive: 409,
    BadRequest: 400,
    TransactionTooLarge: 413,
    BodyChanged: 409,  # replaced while read, before the answer began: ask again
}


def json_error(status: int, message: str, **extra: Any) -> web.Response:
    """An error answer: {"error": message, ...extra}."""
    return web.json_response({"error": message, **extra}, status=status)


def _caller_went_away(request: web.Request, exc: OSError) -> bool:
    """`exc` is the request's own connection closed under its handler (aiohttp's
    `ClientConnectionResetError("Cannot write to closing transport")`, a reset, a broken
    pipe), not a disk's or a peer's failure."""
    transport = request.transport
    return isinstance(exc, ConnectionError) and (transport is None or transport.is_closing())


def _closing_if_body_unread(request: web.Request, answer: web.Response) -> web.Response:
    """`answer`, closing the connection after it when the request's body was not read whole
    (refused over its limit, cut short, or not decodable): the rest is never read (aiohttp
    still drains what the client sends for a few seconds, so that it reads the answer
    instead of a reset)."""
    if not request.content.is_eof() or request.content.exception() is not None:
        answer.force_close()
    return answer


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
            {"error": f"{exc.status} {exc.reason}: {request.method} {clipped(request.path, 160)}"},
            status=exc.status,
            headers=kept,
        )
    except NotActive as exc:
        node = node_of(request)
        db = request.match_info.get("db", "")
        active = node.active_of(db)
        here = node.active_here(db)
        # A switchover under way: this node still names itself active until the role
        # moves; `switching_to` tells a client to ask again shortly rather than give up.
        switching = here.switching_to if here is not None else None
        return json_error(
            409, str(exc), active_node=active[0], active_url=active[1], switching_to=switching
        )
    except Overloaded as exc:  # the memory budget had no room in time: come back shortly
        answer = json_error(503, str(exc), retry_after=exc.retry_after)
        answer.headers["Retry-After"] = str(math.ceil(exc.retry_after))
        return _closing_if_body_unread(request, answer)
    except MountRefused as exc:
        return json_error(409, str(exc), **exc.details)
    except RequestTooLarge as exc:
        return _closing_if_body_unread(request, json_error(413, str(exc), **exc.details))
    except StoreConflict as exc:  # the cluster store's refusal (a lease held, a pause)
        return _closing_if_body_unread(request, json_error(409, str(exc)))
    except (StoreError, RequestError) as exc:
        status = next((code for kind, code in _STATUS.items() if isinstance(exc, kind)), 400)
        return _closing_if_body_unread(request, json_error(status, str(exc)))
    except (DatabaseError, ReplicationError, ClusterStoreError) as exc:
        logger.error("%s %s failed: %s", request.method, request.path, exc)
        return json_error(503, str(exc))
    except OSError as exc:  # a full or failing disk: the node cannot serve this now
        if _caller_went_away(request, exc):
            # A watcher that gave up on a node stopped a while (SIGSTOP, a long pause)
            # leaves its request queued in the kernel; the node finds it closed on resuming.
            logger.info(
                "%s %s: the caller went away before its answer (%s)",
                request.method,
                request.path,
                exc,
            )
            return web.Response(status=499, reason="Client Closed Request")
        logger.error("%s %s failed on storage: %s", request.method, request.path, exc)
        return json_error(503, f"storage error on node {node_of(request).name}: {exc}")
    except Exception as exc:
        node_of(request).unexpected_errors += 1
        logger.exception("%s %s: unexpected error (a bug)", request.method, request.path)
        return json_error(500, f"internal error ({type(exc).__name__}: {exc}); see the node's log")


def cut_short(request: web.Request, exc: Exception, what: str) -> None:
    """A streamed answer (`what`: the listing, the message) failed after its status was
    sent.  The client gone is said and nothing more; otherwise the connection is closed
    mid-answer, so that the client cannot take a cut answer for a whole one.  The node's
    own errors (a row replaced, a log file damaged) say what failed; anything else is a
    bug, logged with its trace."""
    where = f"{request.method} {request.path}"
    if isinstance(exc, ConnectionError):
        logger.info("%s: the client left before the %s's end", where, what)
        return
    if isinstance(exc, ReplicationError):
        logger.error("%s: the %s failed after it began: %s", where, what, exc)
    else:
        logger.error("%s: the %s failed after it began", where, what, exc_info=exc)
    if request.transport is not None:
        request.transport.close()
