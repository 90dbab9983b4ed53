"""The command lines' blocking HTTP client: a GET of a node's or a transport's API with the
standard library's `http.client`, for the status reads (`replication-node status`,
`transport status`), which would otherwise spend a third of their start importing aiohttp
and asyncio for one call per node (issue 48, item 15; bench/README.md, cli_start).

It speaks as the services' aiohttp client does: TLS with the context the cluster's `tls:`
section builds (`dag_common.http_client.client_ssl`, the same for both), the token as the
bearer header, everything within `timeout` seconds; and what an answer means and what kept
a call from one are `dag_common.node_answer`'s, so a sentence reads the same whichever
client fetched it ("connection refused", "no answer within 5s", "its TLS certificate is
not trusted (…)").  One call per thread: `fetch_node_status` is safe to run in several at
once (the caller's pool)."""

from __future__ import annotations

import http.client
import ssl
import time
from urllib.parse import urlsplit

from dag_common.auth import bearer
from dag_common.json_object import JsonObject
from dag_common.model import NodeStatus
from dag_common.node_answer import (
    CLOSED_EARLY,
    CUT_SHORT,
    NoAnswer,
    StatusUnavailable,
    broken_words,
    connect_words,
    json_answer,
    node_status_of,
    not_a_url,
    timed_out,
    tls_failure,
)

_CHUNK = 64 * 1024


def get(
    url: str,
    *,
    headers: dict[str, str],
    timeout: float,
    ssl_context: ssl.SSLContext | None,
) -> tuple[int, bytes]:
    """GET `url`: (HTTP status, body), the whole within `timeout` seconds; NoAnswer with
    why in words if none (`sent`: a connection was made, as `admin_request` says it)."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise NoAnswer(not_a_url(url), sent=False)
    deadline = time.monotonic() + timeout
    host = parts.hostname
    try:
        port = parts.port
    except ValueError:  # a port that is not a number, or out of range
        raise NoAnswer(not_a_url(url), sent=False) from None
    conn: http.client.HTTPConnection
    if parts.scheme == "https":
        conn = http.client.HTTPSConnection(host, port, timeout=timeout, context=ssl_context)
    else:
        conn = http.client.HTTPConnection(host, port, timeout=timeout)
    try:
        try:
            conn.connect()
        except TimeoutError:
            raise NoAnswer(timed_out(timeout), sent=True, timed_out=True) from None
        except ssl.SSLError as exc:
            raise NoAnswer(tls_failure(exc), sent=False) from exc
        except OSError as exc:
            raise NoAnswer(connect_words(exc, host), sent=False) from exc
        target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        try:
            _within(conn, deadline)
            conn.request("GET", target, headers=headers)
            _within(conn, deadline)
            resp = conn.getresponse()
            chunks = []
            while True:
                _within(conn, deadline)
                chunk = resp.read(_CHUNK)
                if not chunk:
                    break
                chunks.append(chunk)
            if resp.length:  # the connection closed short of its Content-Length
                raise http.client.IncompleteRead(b"".join(chunks), resp.length)
        except TimeoutError:
            raise NoAnswer(timed_out(timeout), sent=True, timed_out=True) from None
        except http.client.RemoteDisconnected as exc:
            raise NoAnswer(CLOSED_EARLY, sent=True) from exc
        except http.client.IncompleteRead as exc:
            raise NoAnswer(CUT_SHORT, sent=True) from exc
        except http.client.HTTPException as exc:
            raise NoAnswer("its answer is not HTTP", sent=True) from exc
        except OSError as exc:  # a reset, a broken pipe
            raise NoAnswer(broken_words(exc), sent=True) from exc
        return resp.status, b"".join(chunks)
    finally:
        conn.close()


def _within(conn: http.client.HTTPConnection, deadline: float) -> None:
    """Give the next read or write what is left of the time (TimeoutError if nothing)."""
    left = deadline - time.monotonic()
    if left <= 0:
        raise TimeoutError
    if conn.sock is not None:
        conn.sock.settimeout(left)


def get_json(
    url: str,
    token: str,
    *,
    timeout: float,
    ssl_context: ssl.SSLContext | None,
    headers: dict[str, str] | None = None,
) -> tuple[int, JsonObject]:
    """An admin GET, answered as `node_status.admin_request` answers it: (HTTP status, JSON
    object), at least 500 with an `error` sentence for a body that is not one; NoAnswer."""
    code, raw = get(
        url, headers={**bearer(token), **(headers or {})}, timeout=timeout,
        ssl_context=ssl_context,
    )  # fmt: skip
    return json_answer(code, raw)


def fetch_node_status(
    url: str,
    token: str,
    *,
    timeout: float,
    ssl_context: ssl.SSLContext | None,
    expect_node: str | None = None,
) -> NodeStatus:
    """The status of the node at `url` (named `expect_node`, when given), as
    `node_status.fetch_node_status` answers it; StatusUnavailable with why."""
    try:
        code, body = get(
            f"{url}/v1/status", headers=bearer(token), timeout=timeout, ssl_context=ssl_context
        )
    except NoAnswer as exc:
        raise StatusUnavailable(str(exc)) from exc
    return node_status_of(url, code, body, expect_node=expect_node)
