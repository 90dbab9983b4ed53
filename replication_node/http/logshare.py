"""The log share over HTTP: the active's read-only routes, and a passive copy's client.

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

`HttpLogSource` is the passive side.  It translates every transport failure into
`LogShareError` (`GenerationGone` for a generation the active no longer has), and checks
what it received: the length the server announced and, for a seed, its CRC32C.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import os
import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import aiohttp
import crc32c
import orjson
from aiohttp import web

from dag_common.auth import bearer
from dag_common.credentials import Role
from dag_common.durable import fsync_dir
from dag_common.route_roles import add_route
from replication_node.errors import GenerationGone, LogShareError
from replication_node.http.blocks import HttpBlockChannel, connect_blocks, serve_blocks
from replication_node.interfaces import LogShareInfo, LogShareSource, SeedInfo, SeedListener
from replication_node.log.logfile import closed_log_name, parse_closed_log_name

logger = logging.getLogger(__name__)

Lookup = Callable[[str], LogShareSource | None]
_LOOKUP: web.AppKey[Lookup] = web.AppKey("log_share_lookup")
_HEARTBEAT: web.AppKey[float] = web.AppKey("log_share_heartbeat")
_REFRESH: web.AppKey[float] = web.AppKey("log_share_refresh")
_STREAMS: web.AppKey[set[asyncio.Task[Any]]] = web.AppKey("log_share_streams")
_CHUNK = 1024 * 1024
_SEED_HEADERS = {
    "database_signature": "X-Database-Signature",
    "log_signature": "X-Log-Signature",
    "waypoint": "X-Waypoint",
}
_CRC_HEADER = "X-Content-CRC32C"
# The sizes of the closed generations above the seed's waypoint, comma-separated, waypoint+1
# first: the logs the seeded copy needs next (its progress counts them).  At most
# _MAX_SEED_LOGS of them, to keep the header short; the copy catches up on any more anyway.
_LOG_SIZES_HEADER = "X-Seed-Log-Sizes"
_MAX_SEED_LOGS = 512

# A line goes down every notification stream at least every HEARTBEAT seconds; a copy that
# hears nothing for NOTIFY_SILENCE takes its active as unreachable.  That is how a hung active
# (a stopped process, a hung disk: its port still accepts, nothing answers) is noticed in
# seconds: a stream read waiting for a general 30 s timeout made failover take 45 s.
HEARTBEAT = 1.0
NOTIFY_SILENCE = 3 * HEARTBEAT


# ---- the active's side -------------------------------------------------------------------


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
        headers = {header: str(getattr(info, field)) for field, header in _SEED_HEADERS.items()}
        headers[_CRC_HEADER] = str(crc)
        sizes = await asyncio.to_thread(_log_sizes, source.log_dir, info.waypoint)
        headers[_LOG_SIZES_HEADER] = ",".join(map(str, sizes))
        headers["Content-Type"] = "application/octet-stream"
        headers["Content-Length"] = str(tmp.stat().st_size)
        resp = web.StreamResponse(headers=headers)
        await resp.prepare(request)
        with open(tmp, "rb") as f:
            while chunk := await asyncio.to_thread(f.read, _CHUNK):
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
        while chunk := f.read(_CHUNK):
            crc = crc32c.crc32c(chunk, crc)
    return crc


# ---- the passive's side ------------------------------------------------------------------


class HttpLogSource:
    """A passive copy's view of its active's log share, over HTTP (implements LogSource)."""

    def __init__(
        self,
        base_url: str,
        database: str,
        *,
        session: aiohttp.ClientSession,
        token: str,
        timeout: float = 30.0,
        notify_silence: float = NOTIFY_SILENCE,
    ) -> None:
        self._base = f"{base_url.rstrip('/')}/v1/databases/{database}"
        self.database = database
        self._session = session
        self._headers = bearer(token)
        self._timeout = aiohttp.ClientTimeout(total=None, connect=5, sock_read=timeout)
        self._notify_timeout = aiohttp.ClientTimeout(
            total=None, connect=notify_silence, sock_read=notify_silence
        )

    def __repr__(self) -> str:
        return f"HttpLogSource({self._base})"

    async def _get(
        self, path: str, *, timeout: aiohttp.ClientTimeout | None = None, **params: Any
    ) -> aiohttp.ClientResponse:
        try:
            resp = await self._session.get(
                self._base + path,
                headers=self._headers,
                params=params,
                timeout=timeout or self._timeout,
            )
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:
            raise LogShareError(f"log share {self._base} unreachable: {exc!r}") from exc
        if resp.status != 200:
            body = (await resp.text())[:300]
            resp.release()
            if resp.status == 404 and path.startswith("/logs/E") and _names_generation(body):
                raise GenerationGone(f"{path[6:]} is no longer on the active: {body}")
            raise LogShareError(f"GET {self._base}{path}: HTTP {resp.status} {body}")
        return resp

    async def info(self) -> LogShareInfo:
        resp = await self._get("/logs", timeout=self._notify_timeout)  # small: answered at once
        async with resp:
            try:
                return LogShareInfo(**orjson.loads(await resp.read()))
            except (aiohttp.ClientError, TimeoutError, ValueError, TypeError) as exc:
                raise LogShareError(f"bad log share info from {self._base}: {exc!r}") from exc

    async def fetch(self, generation: int) -> bytes:
        resp = await self._get(f"/logs/{closed_log_name(generation)}")
        async with resp:
            try:
                data = await resp.read()
            except (aiohttp.ClientError, TimeoutError) as exc:
                raise LogShareError(f"transfer of generation {generation} cut: {exc!r}") from exc
        if resp.content_length is not None and len(data) != resp.content_length:
            raise LogShareError(
                f"transfer of generation {generation} truncated: "
                f"{len(data)} of {resp.content_length} bytes"
            )
        return data

    async def hand_over(self, to: str) -> LogShareInfo:
        """Ask the active, which is not mounted, to hold its last logs for the copy on `to`:
        what it has on disk (Attempt Copy Last Logs)."""
        try:
            async with self._session.post(
                self._base + "/hand-over",
                headers=self._headers,
                json={"to": to},
                timeout=self._timeout,
            ) as resp:
                body = await resp.read()
                if resp.status != 200:
                    raise LogShareError(
                        f"POST {self._base}/hand-over: HTTP {resp.status} "
                        f"{body[:300].decode(errors='replace')}"
                    )
                return LogShareInfo(**orjson.loads(body))
        except (aiohttp.ClientError, TimeoutError, OSError, ValueError, TypeError) as exc:
            raise LogShareError(f"hand-over from {self._base} failed: {exc!r}") from exc

    async def fetch_open_log(self) -> bytes:
        """The bytes of the open log E00.log of an active holding it for this copy."""
        resp = await self._get("/open-log")
        async with resp:
            try:
                data = await resp.read()
            except (aiohttp.ClientError, TimeoutError) as exc:
                raise LogShareError(f"transfer of the open log cut: {exc!r}") from exc
        if resp.content_length is None or len(data) != resp.content_length:
            raise LogShareError(
                f"transfer of the open log truncated: {len(data)} of {resp.content_length} bytes"
            )
        return data

    async def open_blocks(self, generation: int, offset: int, node: str) -> HttpBlockChannel:
        """Follow the open log `generation` from `offset` in block mode (`http/blocks.py`)."""
        return await connect_blocks(
            self._session,
            self._base + "/logs/blocks",
            self._headers,
            generation,
            offset,
            node,
            silence=self._notify_timeout.sock_read or NOTIFY_SILENCE,
        )

    async def notifications(self, after: int) -> AsyncIterator[LogShareInfo]:
        resp = await self._get("/logs/notifications", timeout=self._notify_timeout, after=after)
        async with resp:
            try:
                async for line in resp.content:
                    if line.strip():
                        yield LogShareInfo(**orjson.loads(line))
            except (aiohttp.ClientError, TimeoutError, ValueError, TypeError) as exc:
                raise LogShareError(
                    f"notification stream from {self._base} broke: {exc!r}"
                ) from exc

    async def seed(self, dest: Path, listener: SeedListener | None = None) -> SeedInfo:
        resp = await self._get("/seed")
        async with resp:
            try:
                sizes = resp.headers.get(_LOG_SIZES_HEADER, "")
                info = SeedInfo(
                    database_signature=resp.headers[_SEED_HEADERS["database_signature"]],
                    log_signature=resp.headers[_SEED_HEADERS["log_signature"]],
                    waypoint=int(resp.headers[_SEED_HEADERS["waypoint"]]),
                    log_sizes=tuple(int(s) for s in sizes.split(",") if s),
                )
                expected_crc = int(resp.headers[_CRC_HEADER])
            except (KeyError, ValueError) as exc:
                raise LogShareError(f"seed from {self._base} lacks its headers: {exc!r}") from exc
            crc, size = 0, 0
            if listener is not None:
                listener.announced(info)
                listener.received(0, resp.content_length)
            try:
                with open(dest, "wb") as f:
                    async for chunk in resp.content.iter_chunked(_CHUNK):
                        crc = crc32c.crc32c(chunk, crc)
                        size += len(chunk)
                        await asyncio.to_thread(f.write, chunk)
                        if listener is not None:
                            listener.received(size, resp.content_length)
                    f.flush()
                    await asyncio.to_thread(os.fsync, f.fileno())
            except (aiohttp.ClientError, TimeoutError) as exc:
                raise LogShareError(f"seed transfer from {self._base} cut: {exc!r}") from exc
        if resp.content_length is not None and size != resp.content_length:
            raise LogShareError(f"seed truncated: {size} of {resp.content_length} bytes")
        if crc != expected_crc:
            raise LogShareError("seed checksum mismatch: the transfer was damaged")
        fsync_dir(dest.parent)
        return info


def _names_generation(body: str) -> bool:
    """Whether a 404 says the generation is not in the share (it is gone: a reseed is needed),
    as opposed to there being no active copy here right now (dismounted after a failure,
    moved, restarting): the copy then waits and asks again, it does not give up."""
    try:
        detail = orjson.loads(body)
    except ValueError:
        return False
    return isinstance(detail, dict) and "generation" in detail
