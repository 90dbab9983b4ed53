"""No UID shown to a client is ever given to another message (issue 50, step 2), over real
node processes: a switchover loses nothing and bumps nothing; a kill -9 failover under
BestAvailability that loses logs holding puts and flag changes reserves every UID and
modseq they may have shown (`ReserveLost`), and the new active's puts take UIDs above them."""

from __future__ import annotations

import asyncio
import json

import pytest

from tests.replication_node.e2e import converged, two_nodes, write

pytestmark = pytest.mark.slow

BOX = "/v1/databases/DB1/mailboxes/alice"
INBOX = f"{BOX}/folders/Inbox/uids"
RESERVED = "so no UID the lost logs may have shown is given again"


@pytest.fixture
async def cluster(tmp_path):
    c = two_nodes(tmp_path)
    await c.start()
    yield c
    await c.close()


async def test_a_switchover_bumps_nothing_and_a_lossy_failover_reuses_no_uid_shown(cluster):
    c = cluster
    await c.ok("PUT", "mbx1", BOX)
    await write(c, "mbx1", "DB1", "alice", 0, 30, body=50)
    await converged(c, "DB1", "mbx1", ["mbx2"])
    before = await c.ok("GET", "mbx1", INBOX)
    mailboxes = "/v1/databases/DB1/mailboxes"
    (row,) = (await c.ok("GET", "mbx1", mailboxes))["mailboxes"]

    # a switchover: the counters move with the rows, untouched
    switched = await asyncio.to_thread(
        c.node_cli, "db", "switchover", "DB1", "--to", "mbx2", "--json"
    )
    assert switched.returncode == 0, switched.stdout + switched.stderr
    assert json.loads(switched.stdout)["lost_logs"] == 0

    async def roles_moved() -> bool:
        new, old = (await c.status("mbx2"))["DB1"], (await c.status("mbx1"))["DB1"]
        return new["status"] == "Mounted" and old["role"] == "Passive"

    await c.wait_for("the roles to move", roles_moved)
    after = await c.ok("GET", "mbx2", INBOX)
    for counter in ("uidvalidity", "uid_next", "highest_modseq"):
        assert after[counter] == before[counter], counter
    await write(c, "mbx2", "DB1", "alice", 30, 1, body=50)
    numbered = {m[1]: m[0] for m in (await c.ok("GET", "mbx2", INBOX))["messages"]}
    assert numbered["i30"] == before["uid_next"], "the next UID, as if nothing happened"
    assert RESERVED not in c.log("mbx2")

    # the copy on mbx1 stops copying; the active writes three generations it never gets:
    # two closed, and the open one (E00.log), with puts and flag changes in each
    await converged(c, "DB1", "mbx2", ["mbx1"])
    await c.ok("POST", "mbx1", "/v1/databases/DB1/copies/mbx1/suspend")
    for g in range(3):
        await write(c, "mbx2", "DB1", "alice", 100 + 10 * g, 10, body=50)
        await c.ok(
            "POST", "mbx2", f"{BOX}/items/flags",
            json={"folder": "Inbox", "item_ids": [f"i{100 + 10 * g}", "i0"], "add": ["\\Seen"]},
        )  # fmt: skip
        if g < 2:
            await c.ok("POST", "mbx2", "/v1/databases/DB1/roll-log")
    # what a client was shown before the active died: every UID, and the counters
    shown = await c.ok("GET", "mbx2", INBOX)
    shown_uids = {m[0]: m[1] for m in shown["messages"]}
    assert {f"i{i}" for i in range(100, 130)} <= set(shown_uids.values())
    activated = await c.lossy_failover("mbx2", to="mbx1")
    assert activated["lost_logs"] == 3 and activated["lost_open_log"] is True
    assert RESERVED in c.log("mbx1")

    now = await c.ok("GET", "mbx1", INBOX)
    assert now["uidvalidity"] == shown["uidvalidity"], "a bump, not a new UIDVALIDITY"
    assert now["uid_next"] >= shown["uid_next"], "no UID shown is above UIDNEXT's reach"
    assert now["highest_modseq"] >= shown["highest_modseq"]
    kept = {m[1] for m in now["messages"]}
    assert not {f"i{i}" for i in range(100, 130)} & kept, "the lost tail is lost"
    # the new active's puts (a dumpster's redelivery among them) take new UIDs
    await write(c, "mbx1", "DB1", "alice", 200, 20, body=50)
    await write(c, "mbx1", "DB1", "alice", 110, 5, body=50)  # a lost item delivered again
    listed = {m[0]: m[1] for m in (await c.ok("GET", "mbx1", INBOX))["messages"]}
    for uid, item_id in listed.items():
        assert shown_uids.get(uid, item_id) == item_id, f"UID {uid} shown as another message"
    new = {uid for uid, item_id in listed.items() if item_id not in kept}
    assert len(new) == 25 and min(new) >= now["uid_next"] >= shown["uid_next"]
    # every folder's counters moved alike, and the mailbox's next UIDVALIDITY
    by = now["uid_next"] - (before["uid_next"] + 1)  # what it held: i0..i30
    status = {f["folder"]: f for f in (await c.ok("GET", "mbx1", BOX))["folder_status"]}
    assert status["Sent Items"]["uid_next"] == 1 + by
    (bumped,) = (await c.ok("GET", "mbx1", mailboxes))["mailboxes"]
    assert bumped["uidvalidity_next"] == row["uidvalidity_next"] + by
