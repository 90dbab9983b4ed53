"""The operator's CLI against a node that answers with an error page or cuts the answer:
one `error:` line and exit 1, never a traceback (a fake node on a real aiohttp server)."""

from __future__ import annotations

import asyncio
import sys

import pytest
import yaml
from aiohttp import web

from tests.cluster_harness import ROOT, TOKEN


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
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    config = tmp_path / "cluster.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "cluster": "t",
                "nodes": [
                    {
                        "name": "mbx1",
                        "site": "s",
                        "url": f"http://127.0.0.1:{port}",
                        "data_dir": "mbx1",
                    }
                ],
                "databases": [
                    {"name": "DB1", "copies": [{"node": "mbx1", "activation_preference": 1}]}
                ],
                "guarantee_api": {"listen": "127.0.0.1:1", "http_listen": "127.0.0.1:2"},
            }
        )
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
    from replication_node.cli.cluster import exit_code

    assert exit_code(status) == code
