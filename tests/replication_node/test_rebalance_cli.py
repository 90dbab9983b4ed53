"""`replication-node db rebalance` against fake nodes on real aiohttp servers: a failed
switchover is one `error:` line and exit 1 while the others are still tried, one at a time;
`--dry-run` asks for none.  (Over real nodes: test_admin_cli_e2e.py.)"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

import pytest
from aiohttp import web

from tests.cluster_harness import ROOT, TOKEN, cluster_config, serve_app, write_cluster_config


def copy(db: str, node: str, role: str, status: str) -> dict[str, object]:
    return {
        "database": db, "node": node, "site": "s", "role": role, "status": status,
        "activation_preference": 1,
    }  # fmt: skip


@pytest.fixture
async def nodes(tmp_path):
    """DB1 and DB2 active on mbx2, both preferring mbx1 (Healthy there); mbx1 refuses DB1's
    switchover (409) and takes DB2's.  Yields the config and the switchovers asked, in order."""
    asked: list[str] = []
    in_flight: list[int] = [0, 0]  # now, most at once

    def status_of(node: str, role: str, status: str):
        async def handler(request: web.Request) -> web.Response:
            copies = [copy(db, node, role, status) for db in ("DB1", "DB2")]
            return web.json_response({"node": node, "site": "s", "copies": copies})

        return handler

    async def switchover(request: web.Request) -> web.Response:
        db = request.match_info["db"]
        asked.append(db)
        in_flight[0] += 1
        in_flight[1] = max(in_flight)
        # A switchover takes a while: a second one asked meanwhile would be seen here.
        await asyncio.sleep(0.2)
        in_flight[0] -= 1
        if db == "DB1":
            return web.json_response({"error": "cannot switch DB1 over: busy"}, status=409)
        body = await request.json()
        return web.json_response(
            {"database": db, "node": body["target"], "epoch": 3, "previous_node": "mbx2",
             "last_log_generated": 41, "lost_logs": 0, "lost_open_log": False}
        )  # fmt: skip

    runners, urls = [], {}
    for node, role, status in (("mbx1", "Passive", "Healthy"), ("mbx2", "Active", "Mounted")):
        app = web.Application()
        app.router.add_get("/v1/status", status_of(node, role, status))
        app.router.add_post("/v1/databases/{db}/switchover", switchover)
        runner, urls[node] = await serve_app(app)
        runners.append(runner)
    both = [
        {"node": "mbx1", "activation_preference": 1},
        {"node": "mbx2", "activation_preference": 2},
    ]
    config = write_cluster_config(
        tmp_path / "cluster.yaml",
        cluster_config(
            [("mbx1", "s", urls["mbx1"]), ("mbx2", "s", urls["mbx2"])],
            [{"name": "DB1", "copies": both}, {"name": "DB2", "copies": both}],
        ),
    )
    yield config, asked, in_flight
    for runner in runners:
        await runner.cleanup()


async def rebalance(config: Path, *args: str) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "replication_node.cli.main", "db", "rebalance", *args,
        "--config", str(config),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, cwd=ROOT,
        env={"DG_AUTH_TOKEN": TOKEN, "PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
    )  # fmt: skip
    out, err = await asyncio.wait_for(proc.communicate(), timeout=60)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


async def test_a_failed_switchover_is_exit_1_and_the_others_are_still_tried(nodes):
    config, asked, in_flight = nodes
    code, out, err = await rebalance(config)
    assert code == 1, (out, err)
    assert asked == ["DB1", "DB2"] and in_flight[1] == 1  # one at a time
    assert err == "error: DB1: switchover from mbx2 to mbx1 failed: cannot switch DB1 over: busy\n"
    assert out.splitlines() == [
        "DB2: switched over from mbx2 to mbx1 at epoch 3; 0 log(s) lost",
        "1 switched over, 1 failed, 0 skipped",
    ]


async def test_dry_run_prints_the_plan_and_asks_nothing(nodes):
    config, asked, _ = nodes
    code, out, err = await rebalance(config, "--dry-run")
    assert (code, err, asked) == (0, "", [])
    assert out.splitlines() == [
        "DB1: would switch over from mbx2 to mbx1",
        "DB2: would switch over from mbx2 to mbx1",
        "2 switchover(s) planned, 0 skipped (dry run: nothing was done)",
    ]
    code, out, _ = await rebalance(config, "--dry-run", "--database", "DB2", "--json")
    assert code == 0 and asked == []
    assert json.loads(out) == [
        {"database": "DB2", "action": "switch", "from": "mbx2", "to": "mbx1", "reason": ""}
    ]


async def test_bad_input_is_exit_2(nodes):
    config, asked, _ = nodes
    code, out, err = await rebalance(config, "--database", "DB9")
    assert (code, out, asked) == (2, "", [])
    assert err == f"error: no database 'DB9' in {config}\n"
