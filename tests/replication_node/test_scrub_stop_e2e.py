"""A node told to stop (SIGTERM) while its passive copy checks its database file before
replay stops at once and cleanly: the check is interrupted, not waited for.  Found in
bench/memory.py's 2 GB run: the check's thread read on, asyncio's shutdown waited for it,
and the node outlived its 30 s grace (under Kubernetes, a SIGKILL).

The passive's file is made large by writing rows into it while its node is down (behind the
content digest's back: were the check let run to its end, it would call the file damaged)."""

from __future__ import annotations

import asyncio
import json

import pytest

from replication_node.storage.scrub import scrub_file
from tests.cluster_harness import LocalCluster, wait_until
from tests.replication_node.helpers import add_item_rows

pytestmark = pytest.mark.slow

ROWS = 600_000  # a check of seconds: the stop comes while it runs


async def test_a_node_stopped_during_its_passives_start_check_stops_at_once(tmp_path):
    c = LocalCluster(
        tmp_path,
        nodes=[("mbx1", "redmond"), ("mbx2", "redmond")],
        databases=[
            {
                "name": "DB1",
                "copies": [
                    {"node": "mbx1", "activation_preference": 1},
                    {"node": "mbx2", "activation_preference": 2},
                ],
            }
        ],
        defaults={"failover_after": None},
    )
    await c.start()
    try:
        await c.wait_status("mbx1", "DB1", "Mounted")
        await c.ok("PUT", "mbx1", "/v1/databases/DB1/mailboxes/alice")
        await c.wait_status("mbx2", "DB1", "Healthy")
        c.terminate("mbx2")
        (database,) = (p for p in tmp_path.rglob("DB1.sqlite") if "mbx2" in str(p))
        await asyncio.to_thread(add_item_rows, database, ROWS)
        # The whole check, let run to its end, finds the file damaged (the rows behind the
        # digest's back): so a copy left without that verdict was not checked to its end.
        _, problem = await asyncio.to_thread(scrub_file, database)
        assert problem is not None

        before = len(c.log("mbx2"))
        c.start_node("mbx2")
        await wait_until(
            "mbx2's passive checking its file",
            lambda: "DB1: checking" in c.log("mbx2")[before:],
        )
        proc = c.procs["mbx2"]
        await asyncio.to_thread(c.terminate, "mbx2")  # SIGTERM; fails past 30 s
        log = c.log("mbx2")[before:]
        assert proc.returncode == 0, log[-3000:]
        assert "node mbx2 stopping" in log, log[-3000:]
        # The stop interrupted the check (before the fix it read the whole file first, and
        # then found it damaged): no timing is asserted, the node's own account is.
        assert "interrupted by a cancel: no verdict" in log, log[-3000:]
        state = database.parent / "copy-state.json"
        assert not state.exists() or not json.loads(state.read_text()).get("corrupt")
    finally:
        await c.close()
