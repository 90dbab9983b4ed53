"""A move whose target's disk fills, over real node processes and the real guarantee API:
the target's active dismounts with the reason, the move stalls on the 503s (no traceback,
nothing half-recorded), and once space returns the database re-mounts through crash
recovery and the move completes with the target holding exactly the source's items."""

from __future__ import annotations

import asyncio

import pytest

from mrs_client.policy import MoveState
from tests.cluster_harness import THREE_NODES, LocalCluster, size_limited_disk
from tests.mrs_client.e2e import mover_in_process, outcome, seed, shorten_guarantee_waits

pytestmark = pytest.mark.slow


async def test_the_targets_disk_fills_mid_move_the_move_stalls_then_completes(tmp_path):
    with size_limited_disk(tmp_path / "mbx2", "2m") as grow:
        c = LocalCluster(
            tmp_path,
            nodes=THREE_NODES,
            databases=[
                {
                    "name": "DB1",
                    "copies": [
                        {"node": "mbx1", "activation_preference": 1},
                        {"node": "mbx3", "activation_preference": 2},
                    ],
                },
                {
                    "name": "DB2",
                    "copies": [
                        {"node": "mbx2", "activation_preference": 1},
                        {"node": "mbx3", "activation_preference": 2},
                    ],
                },
            ],
            defaults={"failover_after": None, "on_active_failure": "Remount"},
        )
        shorten_guarantee_waits(c)
        await c.start()
        api = await c.start_guarantee_api()
        try:
            for node, db in (("mbx3", "DB1"), ("mbx3", "DB2")):
                await c.wait_status(node, db, "Healthy")
            await seed(c, n=2000)  # about 2.4 MB of items: more than DB2's disk holds
            async with mover_in_process(c) as (start, requests):
                run = await start()

                async def stalled_on_the_disk() -> bool:
                    record = requests.get(run.move_id)
                    assert record is not None and not run.task.done(), run.lines
                    return record.state is MoveState.STALLED and "No space left on device" in (
                        record.stall_reason or ""
                    )

                await c.wait_for("the move to stall on the full disk", stalled_on_the_disk, 240)
                copy = (await c.status("mbx2"))["DB2"]
                assert copy["status"] == "Failed" and "No space left" in copy["error"]
                grow()
                record, source = await outcome(c, run)
            assert len(source) > 1900
            assert record.state is MoveState.COMPLETED
            assert "re-mounted through crash recovery" in c.log("mbx2")
            await asyncio.sleep(0)
        finally:
            api.terminate()
            api.wait(timeout=20)
            await c.close()
