"""The cluster token on every node call but /healthz and /metrics (aiohttp middleware)."""

from __future__ import annotations

from typing import Any

from aiohttp import web

from dag_common.auth import HEADER, token_matches

OPEN_PATHS = frozenset({"/healthz", "/metrics"})


def auth_middleware(token: str) -> Any:
    """A middleware answering 401 to any call without the cluster token."""

    @web.middleware
    async def middleware(request: web.Request, handler: Any) -> web.StreamResponse:
        if request.path not in OPEN_PATHS and not token_matches(request.headers.get(HEADER), token):
            return web.json_response(
                {"error": "missing or wrong cluster token"},
                status=401,
                headers={"WWW-Authenticate": "Bearer"},
            )
        return await handler(request)

    return middleware
