"""The active's disk fills under write load, over real node processes: the database is
dismounted at once with the reason, nothing acknowledged is lost, and it is mounted again
through crash recovery once space returns, or (on_active_failure: Failover) the best copy
takes over after copying every log the failed active still has, its open log included.
The active's data directory is a size-limited tmpfs the test mounts (skipped, with the
reason, where mounting is not allowed)."""

from __future__ import annotations

import pytest

from tests.cluster_harness import LocalCluster, size_limited_disk

pytestmark = pytest.mark.slow


@pytest.fixture
def small_disk(tmp_path):
    with size_limited_disk(tmp_path / "mbx1", "3m") as grow:
        yield grow


async def test_a_full_disk_dismounts_the_active_and_it_remounts_with_every_acknowledged_write(
    tmp_path, small_disk
):
    cluster = LocalCluster(
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
        # no automatic failover: this test is about the node's own re-mount
        defaults={"failover_after": None, "on_active_failure": "Remount"},
    )
    await cluster.start()
    try:
        db = "/v1/databases/DB1"
        await cluster.ok("PUT", "mbx1", f"{db}/mailboxes/alice")
        acknowledged: set[str] = set()
        refusal = None
        for n in range(2000):
            item = {"item_id": f"i{n}", "subject": f"s{n}", "body": "x" * 4000}
            status, body = await cluster.call(
                "POST", "mbx1", f"{db}/mailboxes/alice/items", json=item
            )
            if status == 201:
                acknowledged.add(item["item_id"])
                continue
            refusal = (status, body)
            break
        assert refusal is not None, "the 3 MiB disk never filled"
        status, body = refusal
        assert status == 503 and isinstance(body, dict), refusal
        assert "No space left on device" in body["error"], body
        assert len(acknowledged) > 50

        async def failed() -> bool:
            copy = (await cluster.status("mbx1"))["DB1"]
            return copy["status"] == "Failed" and "No space left" in (copy["error"] or "")

        await cluster.wait_for("the active to report Failed with the reason", failed, timeout=5)
        status, body = await cluster.call(
            "POST", "mbx1", f"{db}/mailboxes/alice/items", json={"subject": "more"}
        )
        assert status == 503 and "No space left on device" in body["error"]

        small_disk()  # space comes back
        await cluster.wait_status("mbx1", "DB1", "Mounted")
        held = await cluster.items("mbx1", "DB1", "alice")
        assert acknowledged <= set(held), "an acknowledged write was lost"
        after = await cluster.ok(
            "POST", "mbx1", f"{db}/mailboxes/alice/items", json={"item_id": "after"}
        )
        assert after["epoch"] >= 1
        assert "re-mounted through crash recovery" in cluster.log("mbx1")
        await cluster.ok("POST", "mbx1", f"{db}/roll-log")

        async def copied() -> bool:
            items = await cluster.items("mbx2", "DB1", "alice")
            return acknowledged | {"after"} <= set(items)

        await cluster.wait_for("the passive copy to hold every acknowledged item", copied)
    finally:
        await cluster.close()


async def test_with_on_active_failure_failover_the_best_copy_takes_over(tmp_path, small_disk):
    cluster = LocalCluster(
        tmp_path,
        nodes=[("mbx1", "redmond"), ("mbx2", "redmond"), ("mbx3", "dublin")],
        databases=[
            {
                "name": "DB1",
                "copies": [
                    {"node": "mbx1", "activation_preference": 1},
                    {"node": "mbx2", "activation_preference": 2},
                    {"node": "mbx3", "activation_preference": 3},
                ],
            }
        ],
        defaults={
            "failover_after": "2s",
            "auto_database_mount_dial": "BestAvailability",
            "on_active_failure": "Failover",
        },
    )
    await cluster.start()
    try:
        db = "/v1/databases/DB1"
        await cluster.ok("PUT", "mbx1", f"{db}/mailboxes/alice")
        for node in ("mbx2", "mbx3"):
            await cluster.wait_status(node, "DB1", "Healthy")
        acknowledged: set[str] = set()
        for n in range(2000):
            item = {"item_id": f"i{n}", "subject": f"s{n}", "body": "x" * 4000}
            status, _ = await cluster.call("POST", "mbx1", f"{db}/mailboxes/alice/items", json=item)
            if status != 201:
                break
            acknowledged.add(item["item_id"])
            if n % 20 == 19:  # some generations closed and shipped, the rest in E00.log
                status, _ = await cluster.call("POST", "mbx1", f"{db}/roll-log")
                if status != 200:
                    break
        assert status == 503, "the 3 MiB disk never filled"
        await cluster.wait_status("mbx1", "DB1", "Failed")

        async def mounted_elsewhere() -> bool:
            for node in ("mbx2", "mbx3"):
                copy = (await cluster.status(node))["DB1"]
                if copy["role"] == "Active" and copy["status"] == "Mounted":
                    return True
            return False

        await cluster.wait_for("automatic failover to the best copy", mounted_elsewhere)
        roles = {n: (await cluster.status(n))["DB1"]["role"] for n in ("mbx2", "mbx3")}
        new = next(n for n, role in roles.items() if role == "Active")
        held = set(await cluster.items(new, "DB1", "alice"))
        # Attempt Copy Last Logs: the node is alive, so the new active copied every log it
        # still had, the open one included, and lost nothing acknowledged
        assert acknowledged <= held, f"lost: {sorted(acknowledged - held)[:5]}"
        log = cluster.log("mbx2") + cluster.log("mbx3")
        assert "last logs copied from mbx1" in log and "0 log(s) lost" in log, log
        # One failover, not a second one over the new active while it was still mounting.
        assert log.count(": activated on ") == 1, log
        assert (await cluster.status(new))["DB1"]["epoch"] == 2
        assert "re-mounted" not in cluster.log("mbx1"), "Failover does not re-mount in place"
    finally:
        await cluster.close()
