"""The log share over HTTP: the active's read-only routes.

Routes (GET only; every one needs the cluster token, checked by the node's middleware):

    /v1/databases/{db}/logs                     LogShareInfo of the stream (JSON)
    /v1/databases/{db}/logs/notifications?after=N
                                                NDJSON: one LogShareInfo line at once, then
                                                each time a generation closes past N or the
                                                open log is announced to hold commits, within
                                                `refresh` seconds of a change of its count of
                                                commits, and a heartbeat line every
                                                `heartbeat` seconds
    /v1/databases/{db}/logs/{E0000000A.log}     the bytes of one closed generation
    /v1/databases/{db}/seed                     a consistent copy of the database file
                                                (X-Seed-Log-Sizes: the closed generations
                                                above its waypoint, for the copy's progress)
    /v1/databases/{db}/open-log                 the bytes of the open log E00.log, only while
                                                it is held for the copy taking over (409
                                                otherwise): Attempt Copy Last Logs

A name that is not a closed generation's name is refused (400) before any file is touched,
so no path can leave the log directory; the open log is served only by `open-log`, never
while it is being written.  Only the active copy shares (mounted, or not mounted and holding
its last logs for the copy taking over); any other answer is 404.

The passive side, `HttpLogSource`, is in `logshare_client.py`.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import crc32c
import orjson
from aiohttp import web

from dag_common.credentials import Role
from dag_common.route_roles import add_route
from replication_node.log.logfile import closed_log_name, parse_closed_log_name
from replication_node.shipping.blocks import serve_blocks
from replication_node.shipping.interfaces import (
    LogShareInfo,
    LogShareSource,
)

logger = logging.getLogger(__name__)

Lookup = Callable[[str], LogShareSource | None]
_LOOKUP: web.AppKey[Lookup] = web.AppKey("log_share_lookup")
_HEARTBEAT: web.AppKey[float] = web.AppKey("log_share_heartbeat")
_REFRESH: web.AppKey[float] = web.AppKey("log_share_refresh")
_STREAMS: web.AppKey[set[asyncio.Task[Any]]] = web.AppKey("log_share_streams")
CHUNK = 1024 * 1024
SEED_HEADERS = {
    "database_signature": "X-Database-Signature",
    "log_signature": "X-Log-Signature",
    "waypoint": "X-Waypoint",
}
CRC_HEADER = "X-Content-CRC32C"
# The sizes of the closed generations above the seed's waypoint, comma-separated, waypoint+1
# first: the logs the seeded copy needs next (its progress counts them).  At most
# _MAX_SEED_LOGS of them, to keep the header short; the copy catches up on any more anyway.
LOG_SIZES_HEADER = "X-Seed-Log-Sizes"
_MAX_SEED_LOGS = 512

# A line goes down every notification stream at least every HEARTBEAT seconds; a copy that
# hears nothing for NOTIFY_SILENCE takes its active as unreachable.  That is how a hung active
# (a stopped process, a hung disk: its port still accepts, nothing answers) is noticed in
# seconds: a stream read waiting for a general 30 s timeout made failover take 45 s.
HEARTBEAT = 1.0
NOTIFY_SILENCE = 3 * HEARTBEAT


def add_log_share_routes(
    app: web.Application, *, lookup: Lookup, heartbeat: float = HEARTBEAT, refresh: float = 1.0
) -> None:
    """Serve the log share of every database `lookup` finds active on this node."""
    app[_LOOKUP] = lookup
    app[_HEARTBEAT] = heartbeat
    app[_REFRESH] = refresh
    app[_STREAMS] = set()
    app.on_shutdown.append(_end_streams)
    prefix = "/v1/databases/{db}"
    add_route(app, "GET", prefix + "/logs", _info, Role.REPLICATION)
    add_route(app, "GET", prefix + "/logs/notifications", _notifications, Role.REPLICATION)
    add_route(app, "GET", prefix + "/logs/blocks", _blocks, Role.REPLICATION)
    add_route(app, "GET", prefix + "/logs/{name}", _generation, Role.REPLICATION)
    add_route(app, "GET", prefix + "/seed", _seed, Role.REPLICATION)
    add_route(app, "GET", prefix + "/open-log", _open_log, Role.REPLICATION)


def _source(request: web.Request) -> LogShareSource:
    db = request.match_info["db"]
    source = request.app[_LOOKUP](db)
    if source is None:
        raise web.HTTPNotFound(
            text=orjson.dumps({"error": f"no active copy of {db!r} on this node"}).decode(),
            content_type="application/json",
        )
    return source


def _info_json(info: LogShareInfo) -> bytes:
    return orjson.dumps(dataclasses.asdict(info))


async def _info(request: web.Request) -> web.Response:
    return web.Response(
        body=_info_json(_source(request).share_info()), content_type="application/json"
    )


async def _generation(request: web.Request) -> web.StreamResponse:
    name = request.match_info["name"]
    generation = parse_closed_log_name(name)
    if generation is None:
        raise web.HTTPBadRequest(
            text=orjson.dumps({"error": f"{name!r} is not a closed generation's name"}).decode(),
            content_type="application/json",
        )
    source = _source(request)
    path = source.log_dir / closed_log_name(generation)
    if not path.is_file():
        raise web.HTTPNotFound(
            text=orjson.dumps(
                {
                    "error": f"generation {generation} is not in the log share",
                    "generation": generation,
                }
            ).decode(),
            content_type="application/json",
        )
    # Closed generations never change; a truncation that unlinks the file while it is
    # being sent does not cut the transfer (the open descriptor keeps the data).
    return web.FileResponse(path, headers={"Content-Type": "application/octet-stream"})


async def _blocks(request: web.Request) -> web.StreamResponse:
    return await serve_blocks(request, _source(request), request.app[_HEARTBEAT])


async def _open_log(request: web.Request) -> web.StreamResponse:
    path = _source(request).open_log_path()
    if path is None:
        raise web.HTTPConflict(
            text=orjson.dumps(
                {
                    "error": "the open log is served only while the active is not mounted and "
                    "holds it for the copy taking over (POST .../hand-over)"
                }
            ).decode(),
            content_type="application/json",
        )
    if not path.is_file():
        raise web.HTTPNotFound(
            text=orjson.dumps({"error": "there is no open log E00.log on this node"}).decode(),
            content_type="application/json",
        )
    # Nothing writes it while it is held: the bytes sent are the file's.
    return web.FileResponse(path, headers={"Content-Type": "application/octet-stream"})


async def _end_streams(app: web.Application) -> None:
    """Notification streams never end by themselves: end them so shutdown does not wait."""
    for task in list(app[_STREAMS]):
        task.cancel()


async def _notifications(request: web.Request) -> web.StreamResponse:
    try:
        after = int(request.query.get("after", "0"))
    except ValueError:
        raise web.HTTPBadRequest(text="after must be an integer") from None
    db = request.match_info["db"]
    source = _source(request)
    heartbeat = request.app[_HEARTBEAT]
    resp = web.StreamResponse(headers={"Content-Type": "application/x-ndjson"})
    await resp.prepare(request)
    task = asyncio.current_task()
    assert task is not None
    request.app[_STREAMS].add(task)
    try:
        # Ends when this copy stops being the active one (the passive then asks again).
        # A line goes out at once (a copy knows the open log on connecting), when a
        # generation closes past `after`, when the open log is announced to hold commits (a
        # copy counts it in its copy queue at once), within `refresh` seconds when only the
        # open log's count of commits changed (what a copy reports as lost if the active
        # dies), and as a heartbeat.
        # Heartbeats on the event loop's clock, as the copy's silence detection (a socket
        # read timeout) is real time: see NOTIFY_SILENCE.
        loop = asyncio.get_running_loop()
        refresh = min(request.app[_REFRESH], heartbeat)
        at_risk, sent, sent_at = -1, None, 0.0
        while request.app[_LOOKUP](db) is source:
            last = await source.wait_for_generation(after, refresh, at_risk_after=at_risk)
            info = source.share_info()
            if info != sent or loop.time() - sent_at >= heartbeat:
                await resp.write(_info_json(info) + b"\n")
                sent, sent_at = info, loop.time()
            after = max(after, last)
            at_risk = max(at_risk, info.generated_at_risk)
    except ConnectionResetError:  # the copy went away (it stopped, or re-asks): nothing to
        logger.debug("notification stream for %s: the copy went away", db)  # say to it
    except Exception:  # the instance went away under us: end the stream, the peer re-asks
        logger.debug("notification stream for %s ended", db, exc_info=True)
    finally:
        request.app[_STREAMS].discard(task)
    return resp


async def _seed(request: web.Request) -> web.StreamResponse:
    source = _source(request)
    tmp = source.log_dir.parent / f".seed-{uuid.uuid4().hex}.tmp"
    try:
        info = await source.seed_to(tmp)
        crc = await asyncio.to_thread(_file_crc, tmp)
        headers = {header: str(getattr(info, field)) for field, header in SEED_HEADERS.items()}
        headers[CRC_HEADER] = str(crc)
        sizes = await asyncio.to_thread(_log_sizes, source.log_dir, info.waypoint)
        headers[LOG_SIZES_HEADER] = ",".join(map(str, sizes))
        headers["Content-Type"] = "application/octet-stream"
        headers["Content-Length"] = str(tmp.stat().st_size)
        resp = web.StreamResponse(headers=headers)
        await resp.prepare(request)
        with open(tmp, "rb") as f:
            while chunk := await asyncio.to_thread(f.read, CHUNK):
                await resp.write(chunk)
        await resp.write_eof()
        return resp
    finally:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()


def _log_sizes(log_dir: Path, waypoint: int) -> list[int]:
    """The sizes of the closed generations waypoint+1, waypoint+2, … in `log_dir`, up to the
    first one missing (the active never truncates above its checkpoint)."""
    sizes = []
    for generation in range(waypoint + 1, waypoint + 1 + _MAX_SEED_LOGS):
        try:
            sizes.append((log_dir / closed_log_name(generation)).stat().st_size)
        except FileNotFoundError:
            break
    return sizes


def _file_crc(path: Path) -> int:
    crc = 0
    with open(path, "rb") as f:
        while chunk := f.read(CHUNK):
            crc = crc32c.crc32c(chunk, crc)
    return crc
