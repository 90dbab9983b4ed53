"""End to end: large items over real node processes, the real guarantee API and the real
`mrs` command.  DB2, the target, takes items of at most 64 KiB (its own max_item_size in
the cluster config): a mailbox holding two items of 100 KiB moves with `--large-item-limit
2`, the two skipped and listed; with `--large-item-limit 1` the move fails before step 8,
naming them, and the source stays as it was.  The mover decides from the config, not by
trying the write: the items are well within what the node's log takes."""

from __future__ import annotations

import asyncio
import json

import pytest

from dag_common.cluster_store.embedded import EmbeddedClusterStore
from tests.cluster_harness import THREE_NODES, LocalCluster
from tests.mrs_client.e2e import live, shorten_guarantee_waits
from tests.mrs_client.test_move_e2e import FAST, databases, mrs

pytestmark = pytest.mark.slow

LARGE = 100 * 1024  # over DB2's 64 KiB


@pytest.fixture
async def cluster(tmp_path):
    dbs = databases()
    dbs[1]["max_item_size"] = "64KiB"
    c = LocalCluster(tmp_path, nodes=THREE_NODES, databases=dbs)
    shorten_guarantee_waits(c)
    await c.start()
    api = await c.start_guarantee_api()
    yield c
    api.terminate()
    api.wait(timeout=20)
    await c.close()


async def seed(c: LocalCluster, mailbox: str) -> dict:
    """`mailbox` in DB1: 40 small items, and big1 and big2 of 100 KiB among them."""
    box = f"/v1/databases/DB1/mailboxes/{mailbox}"
    await c.ok("PUT", "mbx1", box, json={"display_name": mailbox.title()})
    small = [{"item_id": f"m{i}", "subject": f"s{i}", "body": f"body {i} " * 40} for i in range(40)]
    await c.ok("POST", "mbx1", f"{box}/items", json={"items": small[:20]})
    await c.ok("POST", "mbx1", f"{box}/items", json={"item_id": "big1", "body": "x" * LARGE})
    await c.ok("POST", "mbx1", f"{box}/items", json={"items": small[20:]})
    await c.ok("POST", "mbx1", f"{box}/items", json={"item_id": "big2", "body": "y" * LARGE})
    return live(await c.items("mbx1", "DB1", mailbox))


def move_id(stdout: str) -> str:
    """The id in `mrs move`'s last line: `move ID: State…`."""
    last = stdout.strip().splitlines()[-1]
    assert last.startswith("move "), stdout
    return last.split()[1].rstrip(":")


async def test_large_items_are_skipped_up_to_the_limit_and_fail_the_move_past_it(cluster):
    c = cluster
    alice = await seed(c, "alice")
    bob = await seed(c, "bob")

    # within the limit: the move completes without the two, and says so
    done = await asyncio.to_thread(
        mrs, c, "move", "--mailbox", "alice", "--to", "DB2", "--large-item-limit", "2", *FAST
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "skipping large item alice/big1" in done.stdout, done.stdout
    assert "less 2 skipped items" in done.stdout
    stats = json.loads(mrs(c, "stats", move_id(done.stdout), "--json").stdout)
    assert stats["state"] == "Completed" and stats["large_skipped"] == 2
    assert [(s["item_id"], s["reason"], s["size"], s["limit"]) for s in stats["skipped_items"]] == [
        ("big1", "large", LARGE, 64 * 1024),
        ("big2", "large", LARGE, 64 * 1024),
    ]
    shown = mrs(c, "stats", move_id(done.stdout))
    assert "big1" in shown.stdout and "102,400" in shown.stdout, shown.stdout
    moved = live(await c.items("mbx2", "DB2", "alice"))
    assert moved == {k: v for k, v in alice.items() if k not in ("big1", "big2")}
    source = await c.ok("GET", "mbx1", "/v1/databases/DB1/mailboxes/alice")
    assert source["soft_deleted"] is True

    # past the limit: the move fails before step 8, naming both, the source as it was
    failed = await asyncio.to_thread(
        mrs, c, "move", "--mailbox", "bob", "--to", "DB2", "--large-item-limit", "1", *FAST
    )
    assert failed.returncode == 1, failed.stdout + failed.stderr
    last = failed.stdout.strip().splitlines()[-1]
    for words in (
        "Failed: 2 large items, more than --large-item-limit 1",
        "bob/big1",
        "bob/big2",
        "102,400 bytes, over the target's max_item_size of 65,536",
    ):
        assert words in last, last
    record = json.loads(mrs(c, "show", move_id(failed.stdout), "--json").stdout)
    assert record["state"] == "Failed" and record["steps_done"] < 8, record
    assert len(record["skipped"]) == 2
    assert live(await c.items("mbx1", "DB1", "bob")) == bob
    row = await c.ok("GET", "mbx1", "/v1/databases/DB1/mailboxes/bob")
    assert not row["soft_deleted"] and not row["locked"]
    store = EmbeddedClusterStore(c.root / "cluster.db")
    assert await store.mailbox_database("bob") == "DB1"
    store.close()
