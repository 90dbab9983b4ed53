"""A caller's deadline (issue 48): a server refuses a request read after it, before any
handler; a command line gives up at its --timeout in one line saying the change may still
be carried out and how to check, and says a clock skew for what it is.  Real aiohttp
servers on port 0, the real command line in a subprocess; the server's clock injected."""

from __future__ import annotations

import asyncio
import socket
import sys
import time

import aiohttp
import pytest
from aiohttp import web

from dag_common.deadline import HEADER, parse
from dag_common.deadline_middleware import deadline_middleware
from tests.cluster_harness import ROOT, TOKEN, cluster_config, serve_app, write_cluster_config

NOW = 1_800_000_000.0  # the server's clock, Unix time


@pytest.fixture
async def server():
    """An app behind the middleware, its clock at NOW; what its handler was asked."""
    done: list[str] = []

    async def suspend(request: web.Request) -> web.Response:
        done.append(request.path)
        return web.json_response({"status": "Suspended"})

    app = web.Application(middlewares=[deadline_middleware(lambda: NOW)])
    app.router.add_post("/suspend", suspend)
    runner, url = await serve_app(app)
    yield url, done
    await runner.cleanup()


@pytest.mark.parametrize(
    ("sent", "status", "handled"),
    [
        (None, 200, True),  # no deadline told: the nodes' own calls, a curl
        (f"{NOW + 5:.3f}", 200, True),  # read in time
        (f"{NOW:.3f}", 200, True),  # read at its deadline
        (f"{NOW - 0.5:.3f}", 408, False),  # read after it: its caller stopped waiting
        (f"{NOW - 600:.3f}", 408, False),  # a node stopped for ten minutes
        ("soon", 400, False),
        ("nan", 400, False),
        ("-1", 400, False),
    ],
)
async def test_a_request_read_after_its_deadline_is_refused_before_its_handler(
    server, sent, status, handled
):
    url, done = server
    headers = {} if sent is None else {HEADER: sent}
    async with (
        aiohttp.ClientSession() as session,
        session.post(f"{url}/suspend", headers=headers) as resp,
    ):
        answer = await resp.json()
    assert resp.status == status, answer
    assert done == (["/suspend"] if handled else [])
    if status == 408:
        assert answer["error"].startswith("POST /suspend was read ")
        assert answer["error"].endswith("its caller had stopped waiting, so nothing of it was done")
        assert (answer["deadline"], answer["server_time"]) == (parse(sent), NOW)


def _config(tmp_path, url: str):
    return write_cluster_config(
        tmp_path / "cluster.yaml",
        cluster_config(
            [("mbx1", "s", url)],
            [{"name": "DB1", "copies": [{"node": "mbx1", "activation_preference": 1}]}],
        ),
    )


async def _suspend(config, *extra: str) -> tuple[int, str, str, float]:
    """`replication-node db suspend DB1 --node mbx1` as an operator runs it."""
    started = time.monotonic()
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "replication_node.cli.main", "db", "suspend", "DB1",
        "--node", "mbx1", "--config", str(config), *extra,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, cwd=ROOT,
        env={"DG_AUTH_TOKEN": TOKEN, "PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
    )  # fmt: skip
    out, err = await asyncio.wait_for(proc.communicate(), timeout=120)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode(), time.monotonic() - started


async def test_a_node_that_never_answers_is_given_up_at_the_timeout_in_one_line(tmp_path):
    """A stopped process's kernel still accepts the connection: a socket that listens and
    never accepts is the same to the caller."""
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        url = f"http://127.0.0.1:{silent.getsockname()[1]}"
        code, out, err, took = await _suspend(_config(tmp_path, url), "--timeout", "500ms")
    assert (code, out) == (1, ""), err
    assert err == (
        "error: node mbx1 did not answer within 0.5s: the suspend of DB1\\mbx1 may still be "
        "carried out, if mbx1 read the call in time: `replication-node status --database DB1` "
        "shows whether it was\n"
    )
    assert took < 60, took


async def test_a_node_whose_clock_runs_ahead_is_said_to_be_skewed_not_late(tmp_path):
    """The node's clock an hour ahead: it refuses a call it read at once, and the command,
    which got the refusal in time, says the clocks disagree and by about how much."""
    handled: list[str] = []

    async def suspend(request: web.Request) -> web.Response:
        handled.append(request.path)
        return web.json_response({"node": "mbx1", "status": "Suspended"})

    app = web.Application(middlewares=[deadline_middleware(lambda: time.time() + 3600)])
    app.router.add_post("/v1/databases/DB1/copies/mbx1/suspend", suspend)
    runner, url = await serve_app(app)
    try:
        code, out, err, _ = await _suspend(_config(tmp_path, url))
    finally:
        await runner.cleanup()
    assert (code, out, handled) == (1, "", []), err
    prefix = "error: node mbx1 refused the call as read after its deadline, but answered in time:"
    assert err.startswith(prefix) and err.count("\n") == 1, err
    ahead = float(err.split("its clock is about ")[1].split("s ahead")[0])
    assert 3500 < ahead <= 3600, err
    assert err.endswith("set both by NTP (a longer --timeout gets past it meanwhile)\n")
