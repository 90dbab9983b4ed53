"""Every HTTP route declares the role it needs, and a middleware holds every call to it.

A route is added with `add_route(app, method, path, handler, role)`: `role` is the `Role` a
credential must hold to call it, or `PUBLIC` (no credential: `/healthz`, `/metrics`).  The
role lives in the app's route table (`ROUTE_ROLES`), so a test can read every route's role
and find one that has none (`unrolled`).

The middleware (`role_middleware`) answers before the handler runs:
- 401 for no credential or one the service does not know (`WWW-Authenticate: Bearer`);
- 403 naming the role the call needs and the credential's roles, for a known credential
  without it; nothing of the call is done.
A path no route serves still needs a known credential before it is told 404 (no route map
for strangers).  A handler whose role depends on the request (a write with
`override_lock`) asks for the stronger role itself (`require`: a JSON 403 the error
middleware lets through).

Every refusal and every call by a credential to a route marked `audited` is told to the
`on_call` hook (the audit log).
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from aiohttp import web
from aiohttp.web_urldispatcher import AbstractRoute

from dag_common.auth import HEADER
from dag_common.credentials import Credential, Credentials, Role, from_header
from dag_common.echo import clipped

PUBLIC = None  # a route anyone may call


@dataclass(frozen=True)
class RouteRole:
    role: Role | None
    audited: bool = False  # an operator's or a mover's action: every call is audited


ROUTE_ROLES: web.AppKey[dict[AbstractRoute, RouteRole]] = web.AppKey("route_roles")
CREDENTIAL: web.RequestKey[Credential] = web.RequestKey("credential")  # the caller


@dataclass(frozen=True)
class Call:
    """One call as the audit sees it: who (the credential's name; None: no known one), the
    role the call needed, the route, its target (the route's parameters) and its status."""

    method: str
    path: str
    credential: str | None
    role: Role | None
    status: int
    target: dict[str, str]

    @property
    def database(self) -> str | None:
        return self.target.get("db")


OnCall = Callable[[Call], None]


def add_route(
    app: web.Application,
    method: str,
    path: str,
    handler: Callable[[web.Request], Awaitable[web.StreamResponse]],
    role: Role | None,
    *,
    audited: bool = False,
    **kwargs: Any,
) -> AbstractRoute:
    """Add a route with the role it needs (PUBLIC: none)."""
    if ROUTE_ROLES not in app:
        app[ROUTE_ROLES] = {}
    route = app.router.add_route(method, path, handler, **kwargs)
    app[ROUTE_ROLES][route] = RouteRole(role, audited)
    return route


def unrolled(app: web.Application) -> list[str]:
    """Routes of `app` added without a role (a test fails on any)."""
    known = app.get(ROUTE_ROLES, {})
    return [
        f"{r.method} {r.resource.canonical if r.resource else '?'}"
        for r in app.router.routes()
        if r not in known and r.method != "HEAD"
    ]


def role_of(request: web.Request) -> RouteRole | None:
    return request.app.get(ROUTE_ROLES, {}).get(request.match_info.route)


def refusal(needed: Role, credential: Credential, what: str) -> str:
    """The sentence of a 403 (or PERMISSION_DENIED): the call (cut short: its path is the
    caller's), the role it needs, the credential's roles."""
    return (
        f"{clipped(what, 160)} needs the {needed} role; credential {credential.describe()} "
        "does not hold it"
    )


def require(request: web.Request, role: Role, what: str) -> None:
    """403 (an HTTPForbidden with the JSON answer) unless the caller holds `role`: a
    handler's own, stronger check."""
    credential = request.get(CREDENTIAL)
    if credential is not None and not credential.holds(role):
        body = {"error": refusal(role, credential, what), "role": str(role)}
        raise web.HTTPForbidden(text=json.dumps(body), content_type="application/json")


def _target(request: web.Request) -> dict[str, str]:
    return dict(request.match_info)


def peer_names(request: web.Request) -> set[str]:
    """The names a verified client certificate gives its holder: its CN and DNS names
    (none without a certificate)."""
    transport = request.transport
    cert = transport.get_extra_info("peercert") if transport is not None else None
    if not cert:
        return set()
    names = {v for rdn in cert.get("subject", ()) for k, v in rdn if k == "commonName"}
    return names | {v for k, v in cert.get("subjectAltName", ()) if k == "DNS"}


def role_middleware(
    credentials: Callable[[], Credentials],
    on_call: OnCall | None = None,
    *,
    nodes: Callable[[], set[str]] | None = None,
) -> Any:
    """The middleware holding every route to its role (`credentials()`: as last loaded).
    `nodes`: under node identity (mutual TLS), the names a client certificate must give
    for the `replication` role (the config's nodes)."""

    def tell(request: web.Request, who: Credential | None, role: Role | None, status: int) -> None:
        if on_call is not None:
            on_call(Call(request.method, request.path, who.name if who else None, role, status,
                         _target(request)))  # fmt: skip

    @web.middleware
    async def middleware(request: web.Request, handler: Any) -> web.StreamResponse:
        declared = role_of(request)
        if declared is not None and declared.role is PUBLIC:
            return await handler(request)
        who = credentials().identify(from_header(request.headers.get(HEADER)))
        needed = declared.role if declared else None
        if who is None:
            tell(request, None, needed, 401)
            return web.json_response(
                {"error": "missing or unknown credential"},
                status=401,
                headers={"WWW-Authenticate": "Bearer"},
            )
        if needed is not None and not who.holds(needed):
            tell(request, who, needed, 403)
            what = f"{request.method} {request.path}"
            return web.json_response(
                {"error": refusal(needed, who, what), "role": str(needed)}, status=403
            )
        if needed is Role.REPLICATION and nodes is not None and not peer_names(request) & nodes():
            tell(request, who, needed, 403)
            return web.json_response(
                {"error": f"{request.method} {clipped(request.path, 160)} needs the "
                          "replication role, which is a node's: its client certificate, issued "
                          "by the nodes' CA and naming a node of the config (mutual TLS)",
                 "role": str(needed)},
                status=403,
            )  # fmt: skip
        request[CREDENTIAL] = who
        try:
            response = await handler(request)
        except web.HTTPException as exc:
            if exc.status == 403 or (declared is not None and declared.audited):
                tell(request, who, needed, exc.status)
            raise
        if declared is not None and declared.audited:
            tell(request, who, needed, response.status)
        return response

    return middleware
