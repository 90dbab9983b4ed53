"""A suspended copy's copy queue, over real processes: it counts against the active's
LastLogGenerated, whatever the copy's state, as Exchange shows it (it reported 0 while the
active moved on: LastLogGenerated 26 on the copy against 37 on the active)."""

from __future__ import annotations

import pytest

from tests.prometheus import value
from tests.replication_node.e2e import two_nodes

pytestmark = pytest.mark.slow
DB = "/v1/databases/DB1"


async def test_a_suspended_copy_reports_the_queue_the_active_makes(tmp_path):
    cluster = two_nodes(tmp_path)
    try:
        await cluster.start()
        await cluster.ok("PUT", "mbx1", f"{DB}/mailboxes/alice")
        await cluster.wait_status("mbx2", "DB1", "Healthy")
        await cluster.ok("POST", "mbx2", f"{DB}/copies/mbx2/suspend", json={"reason": "test"})
        before = (await cluster.status("mbx2"))["DB1"]
        for i in range(5):
            await cluster.ok(
                "POST", "mbx1", f"{DB}/mailboxes/alice/items", json={"subject": f"{i}"}
            )
            await cluster.ok("POST", "mbx1", f"{DB}/roll-log")
        active = (await cluster.status("mbx1"))["DB1"]["last_log_generated"]

        async def queue_counts_the_active() -> bool:
            copy = (await cluster.status("mbx2"))["DB1"]
            return copy["last_log_generated"] >= active

        await cluster.wait_for("the suspended copy to hear the active", queue_counts_the_active)
        copy = (await cluster.status("mbx2"))["DB1"]
        assert copy["status"] == "Suspended"
        assert copy["last_log_inspected"] == before["last_log_inspected"], "nothing copied"
        assert copy["copy_queue_length"] >= active - before["last_log_inspected"] >= 5
        _, metrics = await cluster.call("GET", "mbx2", "/metrics")
        queue = value(
            metrics.decode(), "replication_copy_queue_length", database="DB1", node="mbx2"
        )
        assert queue == copy["copy_queue_length"]
        # Resumed, it catches up and the queue drains.
        await cluster.ok("POST", "mbx2", f"{DB}/copies/mbx2/resume")

        async def drained() -> bool:
            return (await cluster.status("mbx2"))["DB1"]["copy_queue_length"] == 0

        await cluster.wait_for("the queue to drain", drained)
    finally:
        await cluster.close()
