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
"""

from __future__ import annotations

import errno
import json
import socket

import aiohttp
import orjson
from pydantic import ValidationError

from dag_common.auth import bearer
from dag_common.json_object import JsonObject
from dag_common.model import NodeStatus

UNREACHABLE = 599
"""The status `post_admin` answers when the node cannot be reached or does not answer."""

AUTH_FAILED = "authentication failed (check the token)"
"""What every command says when the nodes refuse its token (exit 2)."""


class StatusUnavailable(Exception):
    """A node's status could not be had; `status` is the HTTP status when there was one."""

    def __init__(self, reason: str, *, status: int | None = None) -> None:
        super().__init__(reason)
        self.status = status


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
        raise StatusUnavailable(f"no answer within {timeout:g}s") from None
    except (aiohttp.ClientError, OSError) as exc:
        raise StatusUnavailable(client_failure(exc)) from exc
    if code != 200:
        if code == 401:
            why = "the credential is refused (check the token or --credential-file)"
        elif code == 403:  # the node's sentence: the role needed, the credential's roles
            why = _error_of(body)
        else:
            why = body[:120].decode(errors="replace")
        raise StatusUnavailable(f"HTTP {code} from {url}/v1/status: {why}", status=code)
    try:
        status = NodeStatus.model_validate_json(body)
    except ValidationError as exc:
        raise StatusUnavailable(
            f"malformed status: {exc.error_count()} invalid field(s)", status=code
        ) from exc
    if expect_node is not None and status.node != expect_node:
        raise StatusUnavailable(f"{url} answers as node {status.node!r}", status=code)
    return status


def _error_of(body: bytes) -> str:
    """The `error` sentence of a JSON answer, else its first bytes."""
    try:
        said = json.loads(body).get("error")
    except (ValueError, AttributeError):
        said = None
    return str(said) if said else body[:200].decode(errors="replace")


_CONNECT = {
    errno.ECONNREFUSED: "connection refused",
    errno.EHOSTUNREACH: "no route to host",
    errno.ENETUNREACH: "network unreachable",
    errno.ETIMEDOUT: "connection timed out",
    errno.ECONNRESET: "connection reset",
}


def connect_failure(exc: aiohttp.ClientConnectorError) -> str:
    """Why a connection could not be made, as a person says it ("connection refused")."""
    os_error = exc.os_error
    words = _CONNECT.get(os_error.errno or 0) if os_error is not None else None
    if words:
        return words
    if isinstance(os_error, socket.gaierror):
        return f"cannot resolve {exc.host}"
    return (os_error.strerror if os_error is not None else None) or "the connection failed"


def client_failure(exc: BaseException) -> str:
    """What kept an HTTP call from its answer, as a person says it ("connection refused",
    "it closed the connection before answering"), never the library's own text."""
    if isinstance(exc, aiohttp.ClientConnectorCertificateError):
        return f"its TLS certificate is not trusted ({exc.certificate_error.verify_message})"
    if isinstance(exc, aiohttp.ClientConnectorSSLError):
        return f"the TLS handshake failed ({getattr(exc.os_error, 'reason', None) or exc.strerror})"
    if isinstance(exc, aiohttp.ClientConnectorError):
        return connect_failure(exc)
    if isinstance(exc, TimeoutError):  # aiohttp's own timeouts are TimeoutErrors too
        return "no answer in time"
    if isinstance(exc, aiohttp.ServerDisconnectedError):
        return "it closed the connection before answering"
    if isinstance(exc, aiohttp.ClientPayloadError):
        return "its answer was cut short"
    if isinstance(exc, aiohttp.InvalidURL):
        return f"{exc.url} is not a URL it can be called at"
    if isinstance(exc, OSError):  # ClientOSError: a reset, a broken pipe
        words = _CONNECT.get(exc.errno or 0)
        return words or exc.strerror or "the connection failed"
    if isinstance(exc, aiohttp.ClientResponseError):
        return f"HTTP {exc.status} {exc.message}".rstrip()
    return str(exc) or "the call failed"


class NoAnswer(Exception):
    """An admin call that got no answer: why, in words (`client_failure`).  `sent`: the
    request may have reached the node (a connection was made), so what it asks may be
    done; `timed_out`: it was the time given that ran out."""

    def __init__(self, reason: str, *, sent: bool, timed_out: bool = False) -> None:
        super().__init__(reason)
        self.sent = sent
        self.timed_out = timed_out


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
        raise NoAnswer(f"no answer within {timeout:g}s", sent=True, timed_out=True) from None
    except (aiohttp.ClientError, OSError) as exc:
        sent = not isinstance(exc, aiohttp.ClientConnectorError)
        raise NoAnswer(client_failure(exc), sent=sent) from exc
    try:
        answer = orjson.loads(raw)
    except ValueError:
        answer = None
    if not isinstance(answer, dict):
        text = raw[:200].decode("utf-8", "replace").strip() or "an empty body"
        return max(code, 500), {"error": f"HTTP {code} with a body that is not JSON: {text!r}"}
    return code, answer


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
