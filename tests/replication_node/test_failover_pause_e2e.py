"""Automatic failover paused for maintenance and resumed, over real node processes: nothing is
activated automatically while paused (an operator's switchover still is), the failover
happens once resumed, and `db history` shows each epoch's cause and the logs it lost."""

from __future__ import annotations

import asyncio
import json

import pytest

from dag_common.config import load_config
from replication_node.cluster.failover import CHECK_INTERVAL
from tests.replication_node.e2e import converged, three_nodes, write

pytestmark = pytest.mark.slow


async def test_a_paused_cluster_fails_over_only_once_resumed(tmp_path):
    c = three_nodes(tmp_path, defaults={"failover_after": "1s", "lease_ttl": "2s"})
    config = load_config(c.config_path)

    async def cli(*args: str):
        return await asyncio.to_thread(c.node_cli, *args)

    await c.start()
    try:
        await c.ok("PUT", "mbx2", "/v1/databases/DB2/mailboxes/bob")
        await write(c, "mbx2", "DB2", "bob", 0, 50)
        await converged(c, "DB2", "mbx2", ["mbx3"])
        # a generation the copy on mbx3 will never get: the failover loses it
        await c.ok("POST", "mbx3", "/v1/databases/DB2/copies/mbx3/suspend")
        await write(c, "mbx2", "DB2", "bob", 50, 20)
        await c.ok("POST", "mbx2", "/v1/databases/DB2/roll-log")
        generated = (await c.status("mbx2"))["DB2"]["last_log_generated"]
        inspected = (await c.status("mbx3"))["DB2"]["last_log_inspected"]
        assert generated > inspected

        paused = await cli("cluster", "pause", "--reason", "patching mbx2")
        assert paused.returncode == 0, paused.stderr
        assert "automatic failover paused since" in paused.stdout
        assert paused.stdout.rstrip().endswith(": patching mbx2"), paused.stdout
        again = await cli("cluster", "pause", "--reason", "another")
        assert again.returncode == 1 and again.stderr.startswith("error: already paused: ")
        assert "patching mbx2" in again.stderr, "the first pause stands"

        c.kill("mbx2")
        await c.ok("POST", "mbx3", "/v1/databases/DB2/copies/mbx3/resume")

        # mbx3's failover pass decides, once its active's lease is gone, and says why not
        async def held_back() -> bool:
            return "no copy is activated automatically" in c.log("mbx3")

        await c.wait_for("mbx3's failover to be held back by the pause", held_back)
        assert "DB2: mbx2 is lost; automatic failover paused since" in c.log("mbx3")
        # and keeps deciding so, pass after pass, past every timing that would fail over
        after = config.defaults.failover_after.total_seconds()
        lease = config.defaults.lease_ttl.total_seconds()
        await asyncio.sleep(3 * max(CHECK_INTERVAL, after) + lease)
        copy = (await c.status("mbx3"))["DB2"]
        assert (copy["role"], copy["status"]) == ("Passive", "DisconnectedAndHealthy"), copy
        assert "mounted on mbx3" not in c.log("mbx3")

        # what status says: the pause above the table, in every row of --json, and in the
        # nodes' own /v1/status
        shown = await cli("status")
        lines = shown.stdout.splitlines()
        pause_line = next(i for i, x in enumerate(lines) if "automatic failover paused" in x)
        header = next(i for i, x in enumerate(lines) if x.startswith("Name"))
        assert pause_line < header, shown.stdout
        assert lines[pause_line].endswith(": patching mbx2") and " by " in lines[pause_line]
        assert any(x.startswith("DB2\\mbx3") and "DisconnectedAndHealthy" in x for x in lines)
        rows = json.loads((await cli("status", "--json")).stdout)
        assert {r["failover_paused"]["reason"] for r in rows} == {"patching mbx2"}
        node_says = await c.ok("GET", "mbx3", "/v1/status")
        assert node_says["failover_paused"]["reason"] == "patching mbx2"

        # an operator's switchover still moves a role while paused
        switched = await cli("db", "switchover", "DB1", "--to", "mbx3")
        assert switched.returncode == 0, switched.stderr
        assert "DB1: switched over to mbx3" in switched.stdout

        resumed = await cli("cluster", "resume")
        assert resumed.returncode == 0, resumed.stderr
        assert resumed.stdout.startswith("automatic failover resumed (paused since ")
        assert resumed.stdout.rstrip().endswith(": patching mbx2)"), resumed.stdout
        await c.wait_status("mbx3", "DB2", "Mounted")
        assert "automatic failover paused" not in (await cli("status")).stdout
        not_paused = await cli("cluster", "resume")
        assert not_paused.returncode == 1
        assert not_paused.stderr == "error: automatic failover is not paused\n"

        # the history: each epoch, its cause, and the logs the failover lost
        history = await cli("db", "history", "DB2")
        assert history.returncode == 0, history.stderr
        lines = history.stdout.splitlines()
        assert lines[0] == "DB2: 2 epoch(s); mbx3 active since epoch 2"
        first, failover = lines[2].split(), lines[3].split()
        assert first[:2] == ["1", "mbx2"] and "first mount" in lines[2] and first[-1] == "0"
        assert failover[:2] == ["2", "mbx3"], lines
        assert "automatic failover under BestAvailability" in lines[3]
        assert failover[-1] == str(generated - inspected), lines
        answer = json.loads((await cli("db", "history", "DB2", "--json")).stdout)
        assert [
            (e["epoch"], e["node"], e["cause"], e["mount_dial"], e["lost_logs"])
            for e in answer["epochs"]
        ] == [
            (1, "mbx2", "FirstMount", None, 0),
            (2, "mbx3", "AutomaticFailover", "BestAvailability", generated - inspected),
        ]
        assert answer["epochs"][1]["start_generation"] == inspected + 1
        assert answer["epochs"][0]["began"] < answer["epochs"][1]["began"]
        db1 = json.loads((await cli("db", "history", "DB1", "--json")).stdout)
        assert [(e["node"], e["cause"], e["lost_logs"]) for e in db1["epochs"]] == [
            ("mbx1", "FirstMount", 0),
            ("mbx3", "Switchover", 0),
        ]
        unknown = await cli("db", "history", "DB9")
        assert unknown.returncode == 2 and unknown.stderr.startswith("error: no database 'DB9'")
    finally:
        await c.close()
