"""The command lines' blocking client (`dag_common.blocking_http`) says what the services'
aiohttp client (`dag_common.node_status`) says, word for word, of each answer and of each
way a call gets none: both ask the same real servers on port 0 (a raw HTTP server that
answers, hangs, hangs up or cuts its answer short as the path asks; a TLS one with a
certificate the client does or does not trust; a port nobody listens on)."""

from __future__ import annotations

import asyncio
import json
import ssl

import aiohttp
import pytest

from dag_common import blocking_http
from dag_common.node_answer import NoAnswer, StatusUnavailable
from dag_common.node_status import admin_request, fetch_node_status
from tests.pki import issue, make_ca
from tests.tls_cluster import NODE_CERT
from tools.ports import free_port

TIMEOUT = 0.5  # seconds: the hanging server's answer never comes; nothing else waits on it
COPY = {"database": "DB1", "node": "mbx1", "site": "s", "role": "Active", "status": "Mounted",
        "activation_preference": 1}  # fmt: skip
BODIES = {  # path -> (HTTP status, body)
    "ok": (200, json.dumps({"node": "mbx1", "site": "s", "copies": [COPY]})),
    "other": (200, json.dumps({"node": "mbx9", "site": "s", "copies": []})),
    "unknown": (401, json.dumps({"error": "unauthorized"})),
    "forbidden": (403, json.dumps({"error": "needs the monitor role; 'mail' does not hold it"})),
    "page": (500, "<html>Internal Server Error</html>"),
    "malformed": (200, json.dumps({"node": 1, "copies": "none"})),
}


async def _serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except (asyncio.IncompleteReadError, ConnectionError):
        writer.close()
        return
    case = head.split(b" ", 2)[1].decode().split("/")[1]
    if case == "hang":
        await reader.read()  # until the client gives up and closes
    elif case == "cut":
        writer.write(b'HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n{"node":')
    elif case in BODIES:
        code, body = BODIES[case]
        writer.write(f"HTTP/1.1 {code} X\r\nContent-Length: {len(body)}\r\n"
                     f"Content-Type: application/json\r\nConnection: close\r\n\r\n{body}"
                     .encode())  # fmt: skip
    await writer.drain()
    writer.close()  # "close": hung up before answering


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    d = tmp_path_factory.mktemp("pki")
    ca = make_ca(d, "ca")
    stranger = make_ca(d, "stranger")
    cert = issue(d, "mbx1", ca, NODE_CERT.format(name="mbx1"))
    return ca[0], stranger[0], cert


@pytest.fixture
async def servers(pki):
    ca, stranger, cert = pki
    plain = await asyncio.start_server(_serve, "127.0.0.1", 0)
    tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    tls.load_cert_chain(*cert)
    secure = await asyncio.start_server(_serve, "127.0.0.1", 0, ssl=tls)
    urls = {
        "plain": f"http://127.0.0.1:{plain.sockets[0].getsockname()[1]}",
        "tls": f"https://127.0.0.1:{secure.sockets[0].getsockname()[1]}",
        "nobody": f"http://127.0.0.1:{free_port()}",
    }
    yield urls, {"trusted": ssl.create_default_context(cafile=str(ca)),
                 "stranger": ssl.create_default_context(cafile=str(stranger))}  # fmt: skip
    for server in (plain, secure):
        server.close()


async def _both(url: str, context: ssl.SSLContext | None, *, status: bool) -> tuple[str, str]:
    """What each client says of `url`: the node's name, or the sentence of why not
    (`status`: a status fetch, else an admin GET, answered as its status and JSON)."""

    def said(outcome: object) -> str:
        if isinstance(outcome, StatusUnavailable):
            return f"{outcome} [{outcome.status}]"
        if isinstance(outcome, NoAnswer):
            return f"{outcome} [sent={outcome.sent} timed_out={outcome.timed_out}]"
        return outcome.node if status else str(outcome)  # type: ignore[attr-defined]

    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=context)) as s:
        try:
            if status:
                theirs = await fetch_node_status(s, url, "t", timeout=TIMEOUT, expect_node="mbx1")
            else:
                theirs = await admin_request(s, "GET", url, "t", timeout=TIMEOUT)
        except (StatusUnavailable, NoAnswer) as exc:
            theirs = exc
    try:
        if status:
            ours = await asyncio.to_thread(blocking_http.fetch_node_status, url, "t",
                                           timeout=TIMEOUT, ssl_context=context,
                                           expect_node="mbx1")  # fmt: skip
        else:
            ours = await asyncio.to_thread(blocking_http.get_json, url, "t", timeout=TIMEOUT,
                                           ssl_context=context)  # fmt: skip
    except (StatusUnavailable, NoAnswer) as exc:
        ours = exc
    return said(theirs), said(ours)


@pytest.mark.parametrize(
    ("server", "path", "context", "words"),
    [
        ("plain", "ok", None, "mbx1"),
        ("plain", "other", None, "{url} answers as node 'mbx9' [200]"),
        ("plain", "unknown", None,
         "HTTP 401 from {url}/v1/status: the credential is refused (check the token or "
         "--credential-file) [401]"),
        ("plain", "forbidden", None,
         "HTTP 403 from {url}/v1/status: needs the monitor role; 'mail' does not hold it [403]"),
        ("plain", "page", None,
         "HTTP 500 from {url}/v1/status: <html>Internal Server Error</html> [500]"),
        ("plain", "malformed", None, "malformed status: 3 invalid field(s) [200]"),
        ("plain", "hang", None, "no answer within 0.5s [None]"),
        ("plain", "close", None, "it closed the connection before answering [None]"),
        ("plain", "cut", None, "its answer was cut short [None]"),
        ("nobody", "ok", None, "connection refused [None]"),
        ("tls", "ok", "trusted", "mbx1"),
        ("tls", "ok", "stranger",
         "its TLS certificate is not trusted (unable to get local issuer certificate) [None]"),
    ],
)  # fmt: skip
async def test_a_status_is_said_alike_by_both_clients(servers, server, path, context, words):
    urls, contexts = servers
    url = f"{urls[server]}/{path}"
    theirs, ours = await _both(url, contexts.get(context), status=True)
    assert theirs == words.format(url=url), "the services' client says it so"
    assert ours == theirs


@pytest.mark.parametrize(
    ("server", "path", "words"),
    [
        ("plain", "unknown", "(401, {'error': 'unauthorized'})"),
        ("plain", "page", "(500, {'error': \"HTTP 500 with a body that is not JSON: "
                          "'<html>Internal Server Error</html>'\"})"),
        ("plain", "hang", "no answer within 0.5s [sent=True timed_out=True]"),
        ("plain", "close", "it closed the connection before answering [sent=True timed_out=False]"),
        ("nobody", "ok", "connection refused [sent=False timed_out=False]"),
    ],
)  # fmt: skip
async def test_an_admin_get_is_answered_alike_by_both_clients(servers, server, path, words):
    urls, _ = servers
    theirs, ours = await _both(f"{urls[server]}/{path}", None, status=False)
    assert theirs == words
    assert ours == theirs
