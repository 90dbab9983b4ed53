"""What an answer of a node's (or a transport's) API means, whichever HTTP client fetched
it: the services' aiohttp (`dag_common.node_status`) or the command lines' blocking client
(`dag_common.blocking_http`, which spares a status read aiohttp's import).  Pure: bytes and
status codes in, a checked value or one sentence of why out; and what kept a call from its
answer in the same words for both clients ("connection refused", never the library's text).

    StatusUnavailable   a node's status could not be had (`status`: the HTTP status if any)
    NoAnswer            an admin call got no answer (`sent`, `timed_out`)
"""

from __future__ import annotations

import errno
import json
import socket
import ssl

import orjson
from pydantic import ValidationError

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


class NoAnswer(Exception):
    """An admin call that got no answer: why, in words (`client_failure`).  `sent`: the
    request may have reached the node (a connection was made), so what it asks may be
    done; `timed_out`: it was the time given that ran out."""

    def __init__(self, reason: str, *, sent: bool, timed_out: bool = False) -> None:
        super().__init__(reason)
        self.sent = sent
        self.timed_out = timed_out


CLOSED_EARLY = "it closed the connection before answering"
"""What a call says whose connection the other end closed before any answer."""

CUT_SHORT = "its answer was cut short"
"""What a call says whose answer ended before the length it announced."""


def timed_out(timeout: float) -> str:
    """What a call that got no answer in `timeout` seconds says."""
    return f"no answer within {timeout:g}s"


def node_status_of(url: str, code: int, body: bytes, *, expect_node: str | None) -> NodeStatus:
    """The status the node at `url` answered (`code`, `body` of its `/v1/status`), checked:
    StatusUnavailable for an HTTP error (401 kept apart: the token is wrong), a body that is
    not a node's status, or a node answering under another name than `expect_node`."""
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


def json_answer(code: int, raw: bytes) -> tuple[int, JsonObject]:
    """An admin call's answer: (HTTP status, JSON object).  One that is not a JSON object
    (an error page, a cut body) is at least 500 with an `error` sentence."""
    try:
        answer = orjson.loads(raw)
    except ValueError:
        answer = None
    if not isinstance(answer, dict):
        text = raw[:200].decode("utf-8", "replace").strip() or "an empty body"
        return max(code, 500), {"error": f"HTTP {code} with a body that is not JSON: {text!r}"}
    return code, answer


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


def tls_failure(exc: ssl.SSLError) -> str:
    """Why a TLS handshake failed, as a person says it."""
    if isinstance(exc, ssl.SSLCertVerificationError):
        return f"its TLS certificate is not trusted ({exc.verify_message})"
    return f"the TLS handshake failed ({exc.reason or exc.strerror})"


def connect_words(os_error: OSError | None, host: str) -> str:
    """Why a connection to `host` could not be made ("connection refused")."""
    words = _CONNECT.get(os_error.errno or 0) if os_error is not None else None
    if words:
        return words
    if isinstance(os_error, socket.gaierror):
        return f"cannot resolve {host}"
    return (os_error.strerror if os_error is not None else None) or "the connection failed"


def broken_words(exc: OSError) -> str:
    """Why a connection made broke (a reset, a broken pipe)."""
    return _CONNECT.get(exc.errno or 0) or exc.strerror or "the connection failed"


def not_a_url(url: object) -> str:
    """What a call to something that is not a URL says."""
    return f"{url} is not a URL it can be called at"
