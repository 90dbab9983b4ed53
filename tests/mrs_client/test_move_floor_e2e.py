"""End to end, over real node processes and the real guarantee API (issue 50): a move of a
mailbox whose source went through a lossy failover carries the source folders'
`modseq_floor`.  DB1 (mbx1 active, mbx2 its copy) loses a STORE with mbx1 (kill -9, mbx2
activated under BestAvailability): Inbox's floor rises to its new HIGHESTMODSEQ and the
source reports every message at it.  The mailbox then moves to DB2: on the target every
message is reported at the same modseq as on the source (never lower: RFC 7162 lets a
message's modseq only grow), so a CONDSTORE client that follows the mailbox sees no modseq
go backward, and one that has not asked since the failover still learns that its cached
flags may be wrong (CHANGEDSINCE its old HIGHESTMODSEQ answers every message)."""

from __future__ import annotations

import pytest

from tests.cluster_harness import THREE_NODES, LocalCluster
from tests.mrs_client.e2e import active_of, mover_in_process, outcome, shorten_guarantee_waits
from tests.mrs_client.test_move_e2e import databases
from tests.replication_node.e2e import converged

pytestmark = pytest.mark.slow

SOURCE = "/v1/databases/DB1/mailboxes/alice"
TARGET = "/v1/databases/DB2/mailboxes/alice"


@pytest.fixture
async def cluster(tmp_path):
    dbs = databases()
    dbs[0]["block_mode"] = False  # file mode: the open log is lost with its active
    c = LocalCluster(tmp_path, nodes=THREE_NODES, databases=dbs, defaults={"failover_after": None})
    shorten_guarantee_waits(c)
    await c.start()
    api = await c.start_guarantee_api()
    yield c
    api.terminate()
    api.wait(timeout=20)
    await c.close()


async def inbox(c: LocalCluster, node: str, box: str, since: int = 0) -> dict[str, int]:
    """Item id -> modseq of Inbox's messages changed after `since`, as `node` lists them."""
    listed = await c.ok("GET", node, f"{box}/folders/Inbox/uids?since_modseq={since}")
    return {m[1]: m[3] for m in listed["messages"]}


async def floor_of(c: LocalCluster, node: str, box: str) -> int:
    status = {f["folder"]: f for f in (await c.ok("GET", node, box))["folder_status"]}
    return status["Inbox"].get("modseq_floor", 0)


async def test_a_move_after_a_lossy_failover_carries_the_modseq_floor(cluster):
    c = cluster
    await c.ok("PUT", "mbx1", SOURCE, json={"display_name": "Alice"})
    items = [
        {"item_id": i, "folder": "Inbox", "subject": i, "body": f"body of {i}\n"}
        for i in ("a", "b", "c")
    ]
    await c.ok("POST", "mbx1", f"{SOURCE}/items", json={"items": items})
    await converged(c, "DB1", "mbx1", ["mbx2"])
    held = (await c.ok("GET", "mbx1", f"{SOURCE}/folders/Inbox/uids"))["highest_modseq"]

    # a STORE the copy never gets, lost with mbx1
    await c.ok("POST", "mbx2", "/v1/databases/DB1/copies/mbx2/suspend")
    flags = {"folder": "Inbox", "item_ids": ["b"], "add": ["\\Flagged"]}
    await c.ok("POST", "mbx1", f"{SOURCE}/items/flags", json=flags)
    activated = await c.lossy_failover("mbx1", to="mbx2")
    assert activated["lost_logs"] >= 1, activated
    before = await inbox(c, "mbx2", SOURCE)  # each message at Inbox's floor
    floor = before["a"]
    assert floor > held and before == {"a": floor, "b": floor, "c": floor}, before

    async with mover_in_process(c) as (start, _):
        run = await start()
        await outcome(c, run)

    target = await active_of(c, "DB2")
    moved = await inbox(c, target, TARGET)
    assert moved == before, "a message's modseq went backward with the move"
    assert await inbox(c, target, TARGET, since=held) == before
    assert await inbox(c, target, TARGET, since=floor) == {}
    assert await floor_of(c, "mbx2", SOURCE) == floor == await floor_of(c, target, TARGET)
