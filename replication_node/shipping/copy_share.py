"""The copies' log share: a passive copy serves the closed generations it has inspected, for
another copy that could not get one whole from the active (a bit flipped on the active's
disk, say), and for the active itself, whose own copy of a generation in its LLR window was
damaged on its disk after its commits were acknowledged (`active/log_mend.py`: checked
there as a passive's inspection checks one, and against the active's own records).
Read-only, behind the cluster token like every node route:

    /v1/databases/{db}/copy/logs/{E0000000A.log}?epoch=N
                      the bytes of one closed generation this node's passive copy holds,
                      inspected while it followed the stream of epoch N (409 if it follows
                      another epoch, or has not inspected that far; 404 if truncated or
                      no passive copy of {db} is here)

Why a copy may trust it: the asking copy inspects what it gets exactly as it inspects the
active's (signatures, every record's checksum, the creation-time chain to its own previous
generation), and asks only a copy on the same epoch, whose inspected generations were each
fetched from that epoch's active (or from a copy on it) and chained to the ones before.  A
generation from a fork of another epoch is refused by the epoch; one damaged on the serving
copy's disk is refused by the asking copy's inspection.

`HttpCopyLogs` is the asking side, one per other copy of the database (the active asks with
its own epoch: a copy following it has inspected its stream's generations on it).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Protocol

import aiohttp
from aiohttp import web

from dag_common.auth import bearer
from dag_common.credentials import Role
from dag_common.route_roles import add_route
from replication_node.errors import BadRequest, LogShareError, NotFound
from replication_node.log.logfile import closed_log_name, parse_closed_log_name


class InspectedLogs(Protocol):
    """A passive copy as the copy share sees it (implemented by PassiveCopy)."""

    def inspected_log(self, generation: int, epoch: int) -> Path:
        """The generation's file, if this copy inspected it on `epoch`'s stream; NotFound
        or Conflict naming why not."""
        ...


CopyLookup = Callable[[str], InspectedLogs | None]
_LOOKUP: web.AppKey[CopyLookup] = web.AppKey("copy_share_lookup")


def add_copy_share_routes(app: web.Application, *, lookup: CopyLookup) -> None:
    """Serve the inspected generations of every passive copy `lookup` finds on this node."""
    app[_LOOKUP] = lookup
    add_route(
        app, "GET", "/v1/databases/{db}/copy/logs/{name}", _inspected_generation, Role.REPLICATION
    )


async def _inspected_generation(request: web.Request) -> web.StreamResponse:
    name = request.match_info["name"]
    generation = parse_closed_log_name(name)
    if generation is None:
        raise BadRequest(f"{name!r} is not a closed generation's name")
    raw = request.query.get("epoch", "")
    try:
        epoch = int(raw)
    except ValueError:
        raise BadRequest(
            f"epoch must be the asking copy's epoch, an integer, not {raw!r}"
        ) from None
    if epoch < 1:
        raise BadRequest(f"epoch must be at least 1, not {epoch}")
    db = request.match_info["db"]
    copy = request.app[_LOOKUP](db)
    if copy is None:
        raise NotFound(f"no passive copy of {db!r} on this node")
    path = copy.inspected_log(generation, epoch)
    # Closed generations never change; a truncation that unlinks the file while it is being
    # sent does not cut the transfer (the open descriptor keeps the data).
    return web.FileResponse(path, headers={"Content-Type": "application/octet-stream"})


class HttpCopyLogs:
    """Another copy's inspected generations, over HTTP: asked by a copy that could not get a
    generation whole from the active."""

    def __init__(
        self,
        node: str,
        base_url: str,
        database: str,
        *,
        session: aiohttp.ClientSession,
        token: str,
        timeout: float = 30.0,
    ) -> None:
        self.node = node
        self._base = f"{base_url.rstrip('/')}/v1/databases/{database}/copy/logs"
        self._session = session
        self._headers = bearer(token)
        self._timeout = aiohttp.ClientTimeout(total=None, connect=5, sock_read=timeout)

    def __repr__(self) -> str:
        return f"HttpCopyLogs({self.node}: {self._base})"

    async def fetch(self, generation: int, epoch: int) -> bytes:
        """The generation as the copy on `node` inspected it on `epoch`'s stream;
        LogShareError naming why not (unreachable, refused, cut short)."""
        url = f"{self._base}/{closed_log_name(generation)}"
        try:
            async with self._session.get(
                url, headers=self._headers, params={"epoch": str(epoch)}, timeout=self._timeout
            ) as resp:
                if resp.status != 200:
                    body = (await resp.text())[:300]
                    raise LogShareError(f"{self.node}: HTTP {resp.status} {body}")
                data = await resp.read()
                length = resp.content_length
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:
            raise LogShareError(f"{self.node}: unreachable: {exc!r}") from exc
        if length is not None and len(data) != length:
            raise LogShareError(f"{self.node}: transfer cut: {len(data)} of {length} bytes")
        return data
