"""The README's route tables are the routes the services serve: every route of the node's,
the transport's and the guarantee service's aiohttp route tables is in its table, and
nothing else is.  (A route added without its line, or a line left for a route removed,
fails here.)"""

from __future__ import annotations

import re
from pathlib import Path
from types import SimpleNamespace

from aiohttp import web

from dag_common.config import ClusterConfig, NodeConfig
from dag_common.credentials import Credentials
from guarantee_api.server import GuaranteeService
from replication_node.http.app import build_app
from replication_node.metrics import NodeMetrics
from tests.cluster_harness import ROOT

_CHOICES = re.compile(r"\(\?P<(\w+)>([\w|-]+)\)")  # a segment `{action:lock|unlock}`


CONFIG = ClusterConfig(
    cluster="c", nodes=[NodeConfig(name="mbx1", site="s", url="http://h:1", data_dir="d")]
)


def served(app: web.Application) -> set[tuple[str, str]]:
    """(method, path) of every route, a `{name:a|b}` segment written out once per choice."""
    out = set()
    for route in app.router.routes():
        if route.method == "HEAD":  # aiohttp's own beside each GET
            continue
        info = route.resource.get_info()  # type: ignore[union-attr]
        path = info.get("formatter") or info["path"]
        match = _CHOICES.search(info["pattern"].pattern) if "pattern" in info else None
        if match:
            for choice in match.group(2).split("|"):
                out.add((route.method, path.replace("{" + match.group(1) + "}", choice)))
        else:
            out.add((route.method, path))
    return out


def documented(heading: str) -> set[tuple[str, str]]:
    """(method, path) of every row of the table under `heading` in the README; a row
    `/a/b`, `/c` stands for `/a/b` and `/a/c`."""
    text = (ROOT / "README.md").read_text()
    section = text.split(heading, 1)[1].split("\n### ", 1)[0].split("\n## ", 1)[0]
    out = set()
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 4 or cells[0] not in ("GET", "PUT", "POST", "DELETE"):
            continue
        paths = re.findall(r"`([^`]+)`", cells[1])
        base = paths[0]
        out.add((cells[0], base))
        for other in paths[1:]:
            out.add((cells[0], other if other.count("/") > 1 else base.rsplit("/", 1)[0] + other))
    return {(m, re.sub(r"\{E0000000A\.log\}", "{name}", p)) for m, p in out}


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
    assert documented("### Node (`replication-node serve`") == served(app)


def test_the_guarantee_services_table_is_its_http_routes():
    source = Path(GuaranteeService.__module__.replace(".", "/") + ".py")
    routes = set(re.findall(r'add_get\("([^"]+)"', (ROOT / source).read_text()))
    assert documented("### Guarantee service (`guarantee-api serve`") == {
        ("GET", r) for r in routes
    }


def test_the_transports_table_is_its_routes():
    from transport.app import build_app as transport_app

    transport = SimpleNamespace(token="t", credentials=lambda: Credentials([]), config=CONFIG)
    app = transport_app(transport)  # type: ignore[arg-type]
    assert documented("### Transport (`transport serve`") == served(app)
