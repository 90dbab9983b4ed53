"""End to end, as an operator: a mailbox moved DB1 -> DB2, written to there, and moved back
with the real `mrs move` (which replaces the soft-deleted copy the first move left in DB1,
and says so); the soft-deleted copy the second move leaves in DB2 listed, refused a restore,
and purged with the real `replication-node mailbox` commands and their exit codes; and the
purge replayed by DB2's passive copy, which holds it after the active is killed and the
passive activated."""

from __future__ import annotations

import asyncio

import pytest

from dag_common.cluster_store.embedded import EmbeddedClusterStore
from tests.cluster_harness import THREE_NODES, LocalCluster
from tests.mrs_client.e2e import live, shorten_guarantee_waits
from tests.mrs_client.test_move_e2e import FAST, databases, mrs, seed_mailbox
from tests.replication_node.e2e import converged

pytestmark = pytest.mark.slow


@pytest.fixture
async def env(tmp_path):
    cluster = LocalCluster(
        tmp_path,
        nodes=THREE_NODES,
        databases=databases(),
        defaults={"failover_after": None},  # the test activates after its kill
    )
    shorten_guarantee_waits(cluster)
    await cluster.start()
    api = await cluster.start_guarantee_api()
    yield cluster
    api.terminate()
    api.wait(timeout=20)
    await cluster.close()


async def move(cluster: LocalCluster, to: str):
    return await asyncio.to_thread(mrs, cluster, "move", "--mailbox", "alice", "--to", to, *FAST)


async def mailbox_cli(cluster: LocalCluster, *args: str):
    return await asyncio.to_thread(cluster.node_cli, "mailbox", *args, timeout=60)


async def test_a_mailbox_moved_back_replaces_its_soft_deleted_copy_which_the_tools_then_purge(env):
    cluster = env
    await seed_mailbox(cluster, n=120)
    there = await move(cluster, "DB2")
    assert there.returncode == 0, there.stdout + there.stderr
    # written to in DB2: the move back must carry this, not what DB1 kept soft-deleted
    written = {"items": [{"item_id": f"d{i}", "folder": "Inbox", "body": f"in DB2 {i}"}
                         for i in range(30)]}  # fmt: skip
    await cluster.ok("POST", "mbx2", "/v1/databases/DB2/mailboxes/alice/items", json=written)
    await cluster.ok("DELETE", "mbx2", "/v1/databases/DB2/mailboxes/alice/items/m1")
    in_db2 = live(await cluster.items("mbx2", "DB2", "alice"))

    listed = await mailbox_cli(cluster, "soft-deleted", "--database", "DB1")
    assert listed.returncode == 0, listed.stderr
    header, row, closing = listed.stdout.splitlines()
    assert header.split()[:3] == ["Mailbox", "Display", "name"]
    assert (row.split()[:2], row.split()[-1]) == (["alice", "A"], "DB2"), row
    assert closing.startswith("1 soft-deleted mailbox(es) in DB1 (epoch "), closing
    refused = await mailbox_cli(cluster, "restore", "alice", "--database", "DB1")
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert "places 'alice' in DB2" in refused.stderr and "mrs move" in refused.stderr

    back = await move(cluster, "DB1")
    assert back.returncode == 0, back.stdout + back.stderr
    assert "DB1 holds a soft-deleted copy of alice (an earlier move's source)" in back.stdout
    assert "replaced the soft-deleted copy of alice in DB1" in back.stdout
    assert back.stdout.splitlines()[-1].endswith(": Completed"), back.stdout
    assert live(await cluster.items("mbx1", "DB1", "alice")) == in_db2
    # the replacement (the old copy removed, the target created: one transaction) replayed
    await converged(cluster, "DB1", "mbx1", ["mbx2"])
    assert live(await cluster.items("mbx2", "DB1", "alice")) == in_db2
    store = EmbeddedClusterStore(cluster.root / "cluster.db")
    assert await store.mailbox_database("alice") == "DB1"
    store.close()

    # DB2 now holds the soft-deleted copy: not restorable over the live DB1, purged
    listed = await mailbox_cli(cluster, "soft-deleted", "--database", "DB2")
    assert listed.returncode == 0 and "DB1" in listed.stdout.splitlines()[1], listed.stdout
    over_live = await mailbox_cli(
        cluster, "restore", "alice", "--database", "DB2", "--replace", "DB1"
    )
    assert over_live.returncode == 2 and "DB1 holds alice live" in over_live.stderr, over_live
    live_purge = await mailbox_cli(cluster, "purge", "alice", "--database", "DB1")
    assert live_purge.returncode == 2 and "live, not soft-deleted" in live_purge.stderr
    purged = await mailbox_cli(cluster, "purge", "alice", "--database", "DB2")
    assert purged.returncode == 0, purged.stderr
    assert purged.stdout.startswith("DB2\\alice: purged (the soft-deleted copy removed with its")
    again = await mailbox_cli(cluster, "purge", "alice", "--database", "DB2")
    assert again.returncode == 2 and "no mailbox 'alice'" in again.stderr, again
    none = await mailbox_cli(cluster, "soft-deleted", "--database", "DB2")
    assert none.stdout.startswith("no soft-deleted mailbox in DB2"), none.stdout

    # the purge is a log write: DB2's passive copy replays it, and keeps it as the active
    await converged(cluster, "DB2", "mbx2", ["mbx3"])
    assert (await cluster.call("GET", "mbx3", "/v1/databases/DB2/mailboxes/alice"))[0] == 404
    cluster.kill("mbx2")
    activated = await asyncio.to_thread(cluster.node_cli, "db", "activate", "DB2", "--node", "mbx3")
    assert activated.returncode == 0, activated.stdout + activated.stderr
    after = await mailbox_cli(cluster, "soft-deleted", "--database", "DB2")
    assert after.returncode == 0, after.stderr
    assert after.stdout.startswith("no soft-deleted mailbox in DB2"), after.stdout
    assert (await cluster.call("GET", "mbx3", "/v1/databases/DB2/mailboxes/alice"))[0] == 404
