"""The HTTP reference's route tables are the routes the services serve: every route of the
node's, the transport's and the guarantee service's aiohttp route tables is in its table of
the generated page (`docs/reference/http.md`, made by docs/gen_reference.py at each docs
build) with the role it declares, and nothing else is.  The generator refuses a route
without its line in docs/reference/http_routes.yaml; this reads the page it made, against
the route tables read here on their own.  (A route added without its line, a line left for
a route removed, or a role changed on one side only, fails here.)"""

from __future__ import annotations

import functools
import importlib.util
import re
import sys
from types import SimpleNamespace

from aiohttp import web

from dag_common.config import ClusterConfig, NodeConfig
from dag_common.credentials import Credentials
from dag_common.route_roles import ROUTE_ROLES
from guarantee_api.metrics import Metrics
from guarantee_api.server import http_app
from replication_node.http.app import build_app
from replication_node.metrics import NodeMetrics
from tests.cluster_harness import ROOT

_CHOICES = re.compile(r"\(\?P<(\w+)>([\w|-]+)\)")  # a segment `{action:lock|unlock}`


CONFIG = ClusterConfig(
    cluster="c", nodes=[NodeConfig(name="mbx1", site="s", url="http://h:1", data_dir="d")]
)


def served_roles(app: web.Application) -> dict[tuple[str, str], str]:
    """(method, path) -> the role word of every route ("none": public; "?": no role
    declared), a `{name:a|b}` segment written out once per choice."""
    roles = app.get(ROUTE_ROLES, {})
    out = {}
    for route in app.router.routes():
        if route.method == "HEAD":  # aiohttp's own beside each GET
            continue
        declared = roles.get(route)
        word = "?" if declared is None else (declared.role or "none")
        info = route.resource.get_info()  # type: ignore[union-attr]
        path = info.get("formatter") or info["path"]
        match = _CHOICES.search(info["pattern"].pattern) if "pattern" in info else None
        if match:
            for choice in match.group(2).split("|"):
                out[(route.method, path.replace("{" + match.group(1) + "}", choice))] = word
        else:
            out[(route.method, path)] = word
    return out


def served(app: web.Application) -> set[tuple[str, str]]:
    """(method, path) of every route, a `{name:a|b}` segment written out once per choice."""
    return set(served_roles(app))


@functools.cache
def http_page() -> str:
    """The generated HTTP reference page."""
    spec = importlib.util.spec_from_file_location("gen_reference", ROOT / "docs/gen_reference.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module.http_page()


def documented_roles(heading: str) -> dict[tuple[str, str], str]:
    """(method, path) -> the Role cell of every row of the table under `heading` in the
    HTTP reference; a row `/a/b`, `/c` stands for `/a/b` and `/a/c`."""
    text = http_page()
    section = text.split(heading, 1)[1].split("\n### ", 1)[0].split("\n## ", 1)[0]
    out = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 4 or cells[0] not in ("GET", "PUT", "POST", "DELETE"):
            continue
        paths = re.findall(r"`([^`]+)`", cells[1])
        base = paths[0]
        out[(cells[0], base)] = cells[3]
        for other in paths[1:]:
            path = other if other.count("/") > 1 else base.rsplit("/", 1)[0] + other
            out[(cells[0], path)] = cells[3]
    return {(m, re.sub(r"\{E0000000A\.log\}", "{name}", p)): r for (m, p), r in out.items()}


def documented(heading: str) -> set[tuple[str, str]]:
    """(method, path) of every row of the table under `heading` in the HTTP reference."""
    return set(documented_roles(heading))


def test_the_nodes_table_is_its_routes():
    # The node's own application, so that a route module added to it is checked too.
    config = CONFIG
    node = SimpleNamespace(
        token="t",
        metrics=NodeMetrics("mbx1"),
        active_here=lambda db: None,
        config=config,
        credentials=lambda: Credentials([]),
        audit=None,
    )
    app = build_app(node)  # type: ignore[arg-type]
    assert documented_roles("## Node (`replication-node serve`") == served_roles(app)


def test_the_guarantee_services_table_is_its_http_routes():
    app = http_app(SimpleNamespace(metrics=Metrics()), None)  # type: ignore[arg-type]
    assert documented_roles("## Guarantee service (`guarantee-api serve`") == served_roles(app)


def test_the_transports_table_is_its_routes():
    from transport.app import build_app as transport_app

    transport = SimpleNamespace(token="t", credentials=lambda: Credentials([]), config=CONFIG)
    app = transport_app(transport)  # type: ignore[arg-type]
    assert documented_roles("## Transport (`transport serve`") == served_roles(app)
