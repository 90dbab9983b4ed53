"""Over real node processes: a copy whose activation is suspended (`db suspend
--activation-only`) replicates on, keeps the flag across its node's restart, is refused as
a switchover or activation target with the reason, and is passed over by the automatic
failover for the next best copy; `db reseed --wait` follows a reseed of several MB to its
end, and says in one line that a node which is down cannot reseed."""

from __future__ import annotations

import asyncio
import re

import pytest

from tests.cluster_harness import LocalCluster
from tests.replication_node.e2e import converged, mounted_on, three_nodes, two_nodes, write

pytestmark = pytest.mark.slow


@pytest.fixture
async def cluster(tmp_path):
    c = two_nodes(tmp_path)
    c.config["defaults"]["log_file_size"] = "1MiB"  # room for big transactions
    c.write_config()
    await c.start()
    await c.wait_status("mbx2", "DB1", "Healthy")
    yield c
    await c.close()


async def cli(cluster: LocalCluster, *args: str):
    return await asyncio.to_thread(cluster.node_cli, *args, timeout=120)


async def test_an_activation_suspended_copy_replicates_survives_a_restart_and_is_refused(
    cluster,
):
    barred = await cli(
        cluster, "db", "suspend", "DB1", "--node", "mbx2", "--activation-only",
        "--reason", "patching",
    )  # fmt: skip
    assert barred.returncode == 0, barred.stderr
    assert barred.stdout == "DB1\\mbx2: activation suspended; it replicates on; now Healthy\n"
    await cluster.ok("PUT", "mbx1", "/v1/databases/DB1/mailboxes/alice")
    await write(cluster, "mbx1", "DB1", "alice", 0, 100)
    await converged(cluster, "DB1", "mbx1", ["mbx2"])  # copied, inspected, replayed: Healthy
    assert await cluster.items("mbx2", "DB1", "alice") == await cluster.items(
        "mbx1", "DB1", "alice"
    )

    cluster.terminate("mbx2")
    cluster.start_node("mbx2")
    await cluster.wait_healthy("mbx2")
    await cluster.wait_status("mbx2", "DB1", "Healthy")
    copy = (await cluster.status("mbx2"))["DB1"]
    assert copy["activation_suspended"] is True
    assert copy["note"] == "activation suspended: patching"
    assert copy["seed_bytes_done"] is None and copy["seed_bytes_total"] is None
    table = await cli(cluster, "status")
    row = next(line for line in table.stdout.splitlines() if line.startswith("DB1\\mbx2"))
    assert " Healthy " in row and row.endswith("activation suspended: patching"), row

    why = (
        "the copy on mbx2 is activation-suspended: patching; resume it first "
        "(replication-node db resume DB1 --node mbx2 --activation-only)"
    )
    switch = await cli(cluster, "db", "switchover", "DB1", "--to", "mbx2")
    assert switch.returncode == 1 and switch.stdout == ""
    assert switch.stderr == f"error: cannot switch DB1 over to mbx2: {why}\n"
    activate = await cli(cluster, "db", "activate", "DB1", "--node", "mbx2")
    assert activate.returncode == 1
    assert activate.stderr == f"error: cannot activate DB1 on mbx2: {why}\n"
    assert (await cluster.status("mbx1"))["DB1"]["status"] == "Mounted"  # nothing changed

    code, body = await cluster.call(
        "POST", "mbx2", "/v1/databases/DB1/copies/mbx2/reseed", json={"activation_only": True}
    )
    assert code == 400 and "only suspend and resume" in body["error"], body
    assert (await cluster.status("mbx2"))["DB1"]["status"] == "Healthy"  # not reseeded

    resumed = await cli(cluster, "db", "resume", "DB1", "--node", "mbx2", "--activation-only")
    assert resumed.returncode == 0, resumed.stderr
    assert resumed.stdout == "DB1\\mbx2: activation resumed; now Healthy\n"
    copy = (await cluster.status("mbx2"))["DB1"]
    assert copy["activation_suspended"] is False and copy["note"] is None
    switch = await cli(cluster, "db", "switchover", "DB1", "--to", "mbx2")
    assert switch.returncode == 0, switch.stderr


async def test_reseed_wait_follows_the_seed_to_a_healthy_copy(cluster):
    await cluster.ok("PUT", "mbx1", "/v1/databases/DB1/mailboxes/alice")
    await write(cluster, "mbx1", "DB1", "alice", 0, 750, body=8000)  # about 6 MB
    await converged(cluster, "DB1", "mbx1", ["mbx2"])
    await write(cluster, "mbx1", "DB1", "alice", 750, 100, body=8000)  # logs above the seed

    done = await cli(cluster, "db", "reseed", "DB1", "--node", "mbx2", "--wait")
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stderr == ""
    lines = done.stdout.splitlines()
    assert lines[-1] == "DB1\\mbx2: reseeded; now Healthy", lines
    assert all(line.startswith("DB1\\mbx2: ") for line in lines), lines
    totals = [float(m.group(1)) for line in lines if (m := re.search(r" of ([\d.,]+) MB \(", line))]
    assert totals and max(totals) >= 5.0, lines  # the database file and its logs, in MB
    assert any(line.startswith("DB1\\mbx2: Seeding") for line in lines), lines
    copy = (await cluster.status("mbx2"))["DB1"]
    assert copy["status"] == "Healthy" and copy["seed_bytes_done"] is None
    await converged(cluster, "DB1", "mbx1", ["mbx2"])
    assert await cluster.items("mbx2", "DB1", "alice") == await cluster.items(
        "mbx1", "DB1", "alice"
    )

    cluster.kill("mbx2")
    down = await cli(cluster, "db", "reseed", "DB1", "--node", "mbx2", "--wait")
    assert down.returncode == 1 and down.stdout == ""
    assert down.stderr.startswith("error: ") and down.stderr.count("\n") == 1, down.stderr
    assert "cannot be reached" in down.stderr


async def test_failover_passes_over_the_activation_suspended_copy(tmp_path):
    c = three_nodes(tmp_path, defaults={"failover_after": "1s"})
    await c.start()
    try:
        await c.wait_status("mbx2", "DB1", "Healthy")
        await c.wait_status("mbx3", "DB1", "Healthy")
        # mbx2 is the preferred passive copy (preference 2): barred, it is never chosen
        await c.ok(
            "POST", "mbx2", "/v1/databases/DB1/copies/mbx2/suspend",
            json={"activation_only": True, "reason": "patching"},
        )  # fmt: skip
        await c.ok("PUT", "mbx1", "/v1/databases/DB1/mailboxes/alice")
        await write(c, "mbx1", "DB1", "alice", 0, 100)
        await converged(c, "DB1", "mbx1", ["mbx2", "mbx3"])
        before = await c.items("mbx1", "DB1", "alice")
        c.kill("mbx1")

        assert await mounted_on(c, "DB1", ["mbx2", "mbx3"]) == "mbx3"
        assert await c.items("mbx3", "DB1", "alice") == before

        # mbx2 asked too (it lost its active) and said why it is not its copy to mount
        passed_over = re.compile(
            r"failover: DB1: mbx1 is lost; mbx3 has inspected through generation \d+ "
            r"\(activation preference 3\) of mbx3 \(mbx2: activation suspended\): not this "
            r"node's to mount"
        )

        async def said() -> bool:
            return passed_over.search(c.log("mbx2")) is not None

        await c.wait_for("mbx2's failover decision in its log", said)
        copy = (await c.status("mbx2"))["DB1"]
        assert copy["role"] == "Passive" and copy["activation_suspended"] is True
        # it follows the new active, and still replicates
        await write(c, "mbx3", "DB1", "alice", 100, 20)
        await converged(c, "DB1", "mbx3", ["mbx2"])
    finally:
        await c.close()
