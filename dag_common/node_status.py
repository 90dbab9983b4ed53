"""The clients of a node's API that every component shares: `GET /v1/status` (the guarantee
service's poller, activation and failover, the mover, the `replication-node status` table)
and the admin calls (the POSTs of activation, switchover, reconcile and the
`replication-node db` commands; the GET of `db history`).

`fetch_node_status` answers a checked `NodeStatus`, or raises `StatusUnavailable` with one
sentence of why: unreachable, no answer in time, an HTTP error (401 kept apart: the token is
wrong, which no retry mends), a body that is not a node's status, or a node answering under
another name.  Each caller decides what that means for it (a copy not counted, a failover
not taken, a row saying why); none has to know aiohttp's or pydantic's exceptions: what
kept a call from its answer is said once, in words (`client_failure`: "connection
refused", never `ClientConnectorError: Cannot connect to host … ssl:default […]`).

`admin_request` is the admin call that raises `NoAnswer` when it got none (the command
lines' calls, `dag_common.command_calls`); `post_admin` and `get_admin` answer it as a
status instead, never raising (the nodes' calls to each other).

What an answer means, and the words for a call that got none, are `dag_common.node_answer`'s,
shared with the command lines' blocking client (`dag_common.blocking_http`).
"""

from __future__ import annotations

import ssl

import aiohttp

from dag_common.auth import bearer
from dag_common.json_object import JsonObject
from dag_common.model import NodeStatus
from dag_common.node_answer import AUTH_FAILED as AUTH_FAILED
from dag_common.node_answer import (
    CLOSED_EARLY,
    CUT_SHORT,
    broken_words,
    connect_words,
    json_answer,
    node_status_of,
    not_a_url,
    timed_out,
    tls_failure,
)
from dag_common.node_answer import UNREACHABLE as UNREACHABLE
from dag_common.node_answer import NoAnswer as NoAnswer
from dag_common.node_answer import StatusUnavailable as StatusUnavailable


async def fetch_node_status(
    session: aiohttp.ClientSession,
    url: str,
    token: str,
    *,
    timeout: float = 5.0,
    expect_node: str | None = None,
) -> NodeStatus:
    """The status of the node at `url` (and named `expect_node`, when given)."""
    try:
        async with session.get(
            f"{url}/v1/status",
            headers=bearer(token),
            timeout=aiohttp.ClientTimeout(total=timeout),
        ) as resp:
            code, body = resp.status, await resp.read()
    except TimeoutError:
        raise StatusUnavailable(timed_out(timeout)) from None
    except (aiohttp.ClientError, OSError) as exc:
        raise StatusUnavailable(client_failure(exc)) from exc
    return node_status_of(url, code, body, expect_node=expect_node)


def connect_failure(exc: aiohttp.ClientConnectorError) -> str:
    """Why a connection could not be made, as a person says it ("connection refused")."""
    return connect_words(exc.os_error, exc.host)


def client_failure(exc: BaseException) -> str:
    """What kept an HTTP call from its answer, as a person says it ("connection refused",
    "it closed the connection before answering"), never the library's own text (the
    blocking client's words are the same: `dag_common.blocking_http`)."""
    if isinstance(exc, aiohttp.ClientConnectorCertificateError):
        return tls_failure(exc.certificate_error)
    if isinstance(exc, aiohttp.ClientConnectorSSLError):
        if isinstance(exc.os_error, ssl.SSLError):
            return tls_failure(exc.os_error)
        return f"the TLS handshake failed ({exc.strerror})"
    if isinstance(exc, aiohttp.ClientConnectorError):
        return connect_failure(exc)
    if isinstance(exc, TimeoutError):  # aiohttp's own timeouts are TimeoutErrors too
        return "no answer in time"
    if isinstance(exc, aiohttp.ServerDisconnectedError):
        return CLOSED_EARLY
    if isinstance(exc, aiohttp.ClientPayloadError):
        return CUT_SHORT
    if isinstance(exc, aiohttp.InvalidURL):
        return not_a_url(exc.url)
    if isinstance(exc, OSError):  # ClientOSError: a reset, a broken pipe
        return broken_words(exc)
    if isinstance(exc, aiohttp.ClientResponseError):
        return f"HTTP {exc.status} {exc.message}".rstrip()
    return str(exc) or "the call failed"


async def admin_request(
    session: aiohttp.ClientSession,
    method: str,
    url: str,
    token: str,
    body: JsonObject | None = None,
    *,
    timeout: float,
    headers: dict[str, str] | None = None,
    data: bytes | None = None,
) -> tuple[int, JsonObject]:
    """An admin call to a node: (HTTP status, JSON object answered), within `timeout`
    seconds.  An answer that is not a JSON object (an error page, a cut body) is at least
    500 with an `error` sentence; no answer at all is `NoAnswer`.  `data`: a body of bytes
    sent instead of `body`'s JSON (its Content-Type in `headers`)."""
    try:
        async with session.request(
            method,
            url,
            json=body if data is None else None,
            data=data,
            headers={**bearer(token), **(headers or {})},
            timeout=aiohttp.ClientTimeout(total=timeout),
        ) as resp:
            code, raw = resp.status, await resp.read()
    except TimeoutError:
        raise NoAnswer(timed_out(timeout), sent=True, timed_out=True) from None
    except (aiohttp.ClientError, OSError) as exc:
        sent = not isinstance(exc, aiohttp.ClientConnectorError)
        raise NoAnswer(client_failure(exc), sent=sent) from exc
    return json_answer(code, raw)


async def post_admin(
    session: aiohttp.ClientSession,
    url: str,
    token: str,
    body: JsonObject | None = None,
    *,
    timeout: float = 30.0,
) -> tuple[int, JsonObject]:
    """POST an admin call to a node: (HTTP status, JSON object answered).  A node that
    cannot be reached is UNREACHABLE (599), an answer that is not a JSON object (an error
    page, a cut body) is at least 500, each with an `error` sentence: never an exception."""
    return await _admin_call(session, "POST", url, token, body or {}, timeout)


async def get_admin(
    session: aiohttp.ClientSession, url: str, token: str, *, timeout: float = 30.0
) -> tuple[int, JsonObject]:
    """GET from a node's admin API, answered as `post_admin` answers."""
    return await _admin_call(session, "GET", url, token, None, timeout)


async def _admin_call(
    session: aiohttp.ClientSession,
    method: str,
    url: str,
    token: str,
    body: JsonObject | None,
    timeout: float,
) -> tuple[int, JsonObject]:
    try:
        return await admin_request(session, method, url, token, body, timeout=timeout)
    except NoAnswer as exc:
        if exc.timed_out:
            return UNREACHABLE, {"error": f"{url}: {exc}"}
        return UNREACHABLE, {"error": f"{url} cannot be reached: {exc}"}
