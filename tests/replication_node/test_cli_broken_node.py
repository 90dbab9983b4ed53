"""The operator's CLI against a node that answers with an error page or cuts the answer:
one `error:` line and exit 1, never a traceback (a fake node on a real aiohttp server)."""

from __future__ import annotations

import asyncio
import sys

import pytest
from aiohttp import web

from replication_node.cli.admin import exit_code
from tests.cluster_harness import ROOT, TOKEN, cluster_config, serve_app, write_cluster_config


@pytest.fixture
async def broken_node(tmp_path):
    async def status(request: web.Request) -> web.Response:
        copy = {
            "database": "DB1", "node": "mbx1", "site": "s", "role": "Active",
            "status": "Mounted", "activation_preference": 1,
        }  # fmt: skip
        return web.json_response({"node": "mbx1", "site": "s", "copies": [copy]})

    async def html500(request: web.Request) -> web.Response:
        return web.Response(status=500, text="<html>Internal Server Error</html>",
                            content_type="text/html")  # fmt: skip

    app = web.Application()
    app.router.add_get("/v1/status", status)
    app.router.add_post("/v1/databases/DB1/roll-log", html500)
    runner, url = await serve_app(app)
    config = write_cluster_config(
        tmp_path / "cluster.yaml",
        cluster_config(
            [("mbx1", "s", url)],
            [{"name": "DB1", "copies": [{"node": "mbx1", "activation_preference": 1}]}],
        ),
    )
    yield config
    await runner.cleanup()


async def test_an_error_page_is_one_error_line_and_exit_1(broken_node):
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "replication_node.cli.main", "db", "roll-log", "DB1",
        "--config", str(broken_node),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, cwd=ROOT,
        env={"DG_AUTH_TOKEN": TOKEN, "PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
    )  # fmt: skip
    out, err = await asyncio.wait_for(proc.communicate(), timeout=60)
    text = (out + err).decode()
    assert proc.returncode == 1, text
    assert "Traceback" not in text
    assert "HTTP 500 with a body that is not JSON" in text


@pytest.mark.parametrize(
    ("status", "code"),
    [(200, 0), (201, 0), (400, 2), (401, 2), (404, 2), (409, 1), (500, 1), (503, 1), (599, 1)],
)
def test_an_admin_calls_status_is_its_exit_code(status, code):
    assert exit_code(status) == code
