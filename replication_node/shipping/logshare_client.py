"""A passive copy's client of its active's log share (`logshare.py` has the routes).

`HttpLogSource` translates every transport failure into `LogShareError` (`GenerationGone`
for a generation the active no longer has), and checks what it received: the length the
server announced and, for a seed, its CRC32C.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import crc32c
import orjson

from dag_common.auth import bearer
from dag_common.durable import fsync_dir
from dag_common.model import Position
from replication_node.errors import GenerationGone, LogShareError
from replication_node.log.logfile import closed_log_name
from replication_node.shipping.blocks import HttpBlockChannel, connect_blocks
from replication_node.shipping.interfaces import (
    LogShareInfo,
    SeedInfo,
    SeedListener,
)
from replication_node.shipping.logshare import (
    CHUNK,
    CRC_HEADER,
    LOG_SIZES_HEADER,
    NOTIFY_SILENCE,
    SEED_HEADERS,
)

logger = logging.getLogger(__name__)


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

    async def open_blocks(self, start: Position, node: str) -> HttpBlockChannel:
        """Follow the open log from `start` in block mode (`shipping/blocks.py`)."""
        return await connect_blocks(
            self._session,
            self._base + "/logs/blocks",
            self._headers,
            start,
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
                sizes = resp.headers.get(LOG_SIZES_HEADER, "")
                info = SeedInfo(
                    database_signature=resp.headers[SEED_HEADERS["database_signature"]],
                    log_signature=resp.headers[SEED_HEADERS["log_signature"]],
                    waypoint=int(resp.headers[SEED_HEADERS["waypoint"]]),
                    log_sizes=tuple(int(s) for s in sizes.split(",") if s),
                )
                expected_crc = int(resp.headers[CRC_HEADER])
            except (KeyError, ValueError) as exc:
                raise LogShareError(f"seed from {self._base} lacks its headers: {exc!r}") from exc
            crc, size = 0, 0
            if listener is not None:
                listener.announced(info)
                listener.received(0, resp.content_length)
            try:
                with open(dest, "wb") as f:
                    async for chunk in resp.content.iter_chunked(CHUNK):
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
