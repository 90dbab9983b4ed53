"""Every route of every service declares its role, the role each needs is the one the
design gives it, and the middleware lets exactly the credentials holding it through: 401
without a known credential, 403 naming the role otherwise, nothing of the call done."""

from __future__ import annotations

import re
from types import SimpleNamespace

import aiohttp
import pytest
from aiohttp import web

from dag_common.config import ClusterConfig, NodeConfig
from dag_common.credentials import Credential, Credentials, Role, digest
from dag_common.route_roles import PUBLIC, ROUTE_ROLES, add_route, role_middleware, unrolled
from guarantee_api.metrics import Metrics
from guarantee_api.server import http_app as guarantee_app
from replication_node.http.app import build_app as node_app
from replication_node.metrics import NodeMetrics
from tests.cluster_harness import serve_app
from transport.app import build_app as transport_app

R, OP, M, S, N = Role.REPLICATION, Role.OPERATOR, Role.MOVER, Role.STORE, Role.MONITOR
DB = "/v1/databases/{db}"
MBX = DB + "/mailboxes/{mailbox}"

NODE_ROLES = {
    ("GET", "/healthz"): PUBLIC,
    ("GET", "/metrics"): PUBLIC,
    ("GET", "/v1/status"): N,
    ("GET", "/v1/status/watch"): N,
    ("GET", DB + "/history"): N,
    ("GET", "/v1/audit"): N,
    ("GET", DB + "/backups"): N,
    # mail clients and the transport
    ("PUT", MBX): S,
    ("GET", DB + "/mailboxes"): S,
    ("GET", MBX): S,
    ("POST", MBX + "/folders"): S,
    ("POST", MBX + "/items"): S,
    ("GET", MBX + "/items"): S,
    ("DELETE", MBX + "/items/{item_id}"): S,
    ("GET", MBX + "/items/{item_id}/message"): S,
    ("PUT", MBX + "/items/{item_id}/message"): S,
    ("POST", MBX + "/items/message"): S,
    ("POST", MBX + "/items/messages"): S,
    # an IMAP front's (issue 50): folders, flags, UIDs and the change feed
    ("GET", MBX + "/changes"): S,
    ("GET", MBX + "/folders/{folder}/uids"): S,
    ("POST", MBX + "/folders/{folder}/rename"): S,
    ("DELETE", MBX + "/folders/{folder}"): S,
    ("POST", MBX + "/items/flags"): S,
    ("POST", MBX + "/items/move"): S,
    ("POST", MBX + "/items/copy"): S,
    ("POST", MBX + "/items/expunge"): S,
    ("GET", "/v1/mailboxes/{mailbox}"): S,
    # an operator's, for soft-deleted mailboxes (listed before `{action}`, which the stub
    # below serves without its choices and would take `purge` for one)
    ("GET", DB + "/soft-deleted-mailboxes"): OP,
    ("POST", MBX + "/purge"): OP,
    ("POST", MBX + "/restore"): OP,
    # a move's own
    ("DELETE", MBX): M,
    ("GET", MBX + "/digest"): M,
    ("POST", MBX + "/{action}"): M,
    ("POST", DB + "/roll-log"): M,
    ("GET", DB + "/log/position"): M,
    ("POST", MBX + "/folders/{folder}/counters"): M,  # a move's final sync lifts the counters
    # an operator's
    ("POST", DB + "/copies/{node}/{action}"): OP,
    ("POST", DB + "/activate"): OP,
    ("POST", DB + "/switchover"): OP,
    ("POST", DB + "/mount"): OP,
    ("POST", DB + "/dismount"): OP,
    ("POST", DB + "/backup"): OP,
    # node to node
    ("POST", DB + "/quiesce"): R,
    ("POST", DB + "/unquiesce"): R,
    ("POST", DB + "/hand-over"): R,
    ("POST", DB + "/copy-last-logs"): R,
    ("POST", DB + "/keep-block-buffer"): R,
    ("POST", "/v1/reconcile"): R,
    ("POST", DB + "/backups"): R,
    ("POST", DB + "/backups/{id}/renew"): R,
    ("POST", DB + "/backups/{id}/roll"): R,
    ("POST", DB + "/backups/{id}/end"): R,
    ("POST", DB + "/backups/{id}/abort"): R,
    ("GET", DB + "/logs"): R,
    ("GET", DB + "/logs/notifications"): R,
    ("GET", DB + "/logs/blocks"): R,
    ("GET", DB + "/logs/{name}"): R,
    ("GET", DB + "/seed"): R,
    ("GET", DB + "/open-log"): R,
    ("GET", DB + "/copy/logs/{name}"): R,
}

TRANSPORT_ROLES = {
    ("GET", "/healthz"): PUBLIC,
    ("GET", "/metrics"): PUBLIC,
    ("POST", "/v1/messages"): S,
    ("GET", "/v1/messages/{message_id}"): S,
    ("POST", "/v1/redeliver"): R,
    ("GET", "/v1/queue"): N,
    ("GET", "/v1/poison"): N,
}


GUARANTEE_ROLES = {
    ("GET", "/metrics"): PUBLIC,
    ("GET", "/healthz"): PUBLIC,
    ("GET", "/"): N,  # the status page: callers' ids and reasons
    ("GET", "/status"): N,
}


CONFIG = ClusterConfig(
    cluster="c", nodes=[NodeConfig(name="mbx1", site="s", url="http://h:1", data_dir="d")]
)


def the_node_app() -> web.Application:
    config = CONFIG
    node = SimpleNamespace(
        token="t", metrics=NodeMetrics("mbx1"), active_here=lambda db: None, config=config,
        credentials=lambda: Credentials([]), audit=None,
    )  # fmt: skip
    return node_app(node)  # type: ignore[arg-type]


def the_transport_app() -> web.Application:
    transport = SimpleNamespace(token="t", credentials=lambda: Credentials([]), config=CONFIG)
    return transport_app(transport)  # type: ignore[arg-type]


def the_guarantee_services_app() -> web.Application:
    return guarantee_app(SimpleNamespace(metrics=Metrics()), None)  # type: ignore[arg-type]


def declared(app: web.Application) -> dict[tuple[str, str], Role | None]:
    """(method, path with `{name:pattern}` written `{name}`) -> role, from the app's table."""
    out = {}
    for route, role in app[ROUTE_ROLES].items():
        path = route.resource.canonical  # type: ignore[union-attr]
        out[(route.method, re.sub(r"\{(\w+):[^}]+\}", r"{\1}", path))] = role.role
    return out


@pytest.mark.parametrize(
    ("build", "expected"),
    [
        (the_node_app, NODE_ROLES),
        (the_transport_app, TRANSPORT_ROLES),
        (the_guarantee_services_app, GUARANTEE_ROLES),
    ],
    ids=["node", "transport", "guarantee"],
)
def test_every_route_declares_the_role_the_design_gives_it(build, expected):
    app = build()
    assert unrolled(app) == [], "a route added without its role"
    assert declared(app) == expected


ROLE_SECRETS = {role: f"secret-of-the-{role}-role" for role in Role}
EVERY = [Credential(f"only-{r}", frozenset({r}), (digest(s),)) for r, s in ROLE_SECRETS.items()]


@pytest.fixture
async def stub():
    """The node's and the transport's role tables over stub handlers (200 'called'), behind
    the real middleware: what each credential may call, whatever the handlers would do."""
    calls: list[str] = []

    async def handler(request: web.Request) -> web.Response:
        calls.append(request.path)
        return web.json_response({"called": True})

    app = web.Application(middlewares=[role_middleware(lambda: Credentials(EVERY))])
    table = {**NODE_ROLES, **{(m, "/t" + p): r for (m, p), r in TRANSPORT_ROLES.items()}}
    for (method, path), role in table.items():
        add_route(app, method, path, handler, role)
    runner, url = await serve_app(app)
    async with aiohttp.ClientSession() as session:
        yield session, url, table, calls
    await runner.cleanup()


def concrete(path: str) -> str:
    return re.sub(r"\{\w+\}", "x", path)


async def test_each_route_lets_exactly_its_role_through(stub):
    session, url, table, calls = stub
    for (method, path), needed in table.items():
        target = url + concrete(path)
        for role, secret in ROLE_SECRETS.items():
            headers = {"Authorization": f"Bearer {secret}"}
            async with session.request(method, target, headers=headers) as resp:
                body = await resp.json()
                if needed is PUBLIC or role == needed:
                    assert resp.status == 200, (method, path, role, body)
                else:
                    assert resp.status == 403, (method, path, role, body)
                    assert body["role"] == needed
                    assert f"needs the {needed} role" in body["error"]
                    assert f"'only-{role}'" in body["error"]
        before = len(calls)
        for headers in ({}, {"Authorization": "Bearer unknown-secret-unknown"}, {"X": "y"}):
            async with session.request(method, target, headers=headers) as resp:
                assert resp.status == (200 if needed is PUBLIC else 401), (method, path)
        refused = 0 if needed is PUBLIC else 3
        assert len(calls) == before + 3 - refused, "a refused call never reaches its handler"


async def test_a_path_no_route_serves_needs_a_credential_before_it_is_told_404(stub):
    session, url, _, _ = stub
    async with session.get(url + "/v1/nothing") as resp:
        assert resp.status == 401
    headers = {"Authorization": f"Bearer {ROLE_SECRETS[Role.STORE]}"}
    async with session.get(url + "/v1/nothing", headers=headers) as resp:
        assert resp.status == 404
