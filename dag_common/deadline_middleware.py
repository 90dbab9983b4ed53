"""The servers' side of a caller's deadline (`dag_common.deadline` says why): a request read
after the deadline its caller told is refused, 408, before any handler acts on it."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from aiohttp import web

from dag_common.deadline import HEADER, LATE, late_sentence, parse

logger = logging.getLogger(__name__)


def deadline_middleware(now: Callable[[], float]) -> Any:
    """Refuse (408, nothing done) a request read after the deadline its caller told;
    `now`: the server's wall clock, Unix time.  Placed after the credential check (a
    refusal of a known caller is audited like any other) and before every handler."""

    @web.middleware
    async def middleware(request: web.Request, handler: Any) -> web.StreamResponse:
        value = request.headers.get(HEADER)
        if value is None:
            return await handler(request)
        try:
            deadline = parse(value)
        except ValueError:
            return web.json_response(
                {"error": f"{HEADER}: {value[:40]!r} is not a time (Unix time, seconds)"},
                status=400,
            )
        read_at = now()
        if read_at <= deadline:
            return await handler(request)
        said = late_sentence(request.method, request.path, read_at - deadline)
        logger.warning("refused: %s", said)
        return web.json_response(
            {"error": said, "deadline": deadline, "server_time": read_at}, status=LATE
        )

    return middleware
