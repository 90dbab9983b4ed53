"""A copy proves it is whole, over real node processes: damage to a stopped passive's file
is found on start, damage under a running copy by the scrub within a cycle, a row changed
inside a valid page by adding the digest up again at the next roll, and a copy that went
its own way (a row and its digest changed together, as a replay bug would) by comparing
with the active's digest at the next roll.  None is counted for a flush; a reseed repairs
each."""

from __future__ import annotations

import sqlite3
from datetime import UTC, datetime

import pytest

from dag_common.model import Position
from replication_node.log.events import Transaction
from replication_node.log.operations import PutItem
from replication_node.storage.database import Database
from tests.cluster_harness import LocalCluster
from tests.replication_node.helpers import damage_middle_pages

pytestmark = pytest.mark.slow

DB = "/v1/databases/DB1"


async def started(tmp_path, **defaults):
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
        defaults={"failover_after": None, **defaults},
    )
    await c.start()
    await c.ok("PUT", "mbx1", f"{DB}/mailboxes/alice")
    await write(c, 0, 300)
    await replayed(c)
    return c


async def write(c, first, n):
    for start in range(first, first + n, 50):
        await c.ok(
            "POST",
            "mbx1",
            f"{DB}/mailboxes/alice/items",
            json={
                "items": [
                    {"item_id": f"i{i}", "subject": f"subject-{i:06d}", "body": "b" * 400}
                    for i in range(start, min(first + n, start + 50))
                ]
            },
        )


async def replayed(c):
    rolled = await c.ok("POST", "mbx1", f"{DB}/roll-log")

    async def done():
        copy = (await c.status("mbx2"))["DB1"]
        return (
            copy["status"] == "Healthy" and copy["last_log_replayed"] >= rolled["closed_generation"]
        )

    await c.wait_for("mbx2 to replay what was rolled", done)


async def failed(c, fragment):
    async def stopped():
        copy = (await c.status("mbx2"))["DB1"]
        return copy["status"] == "FailedAndSuspended" and fragment in (copy["error"] or "")

    await c.wait_for(f"mbx2 FailedAndSuspended with {fragment!r}", stopped)


async def repaired_by_reseed(c):
    await c.ok("POST", "mbx2", f"{DB}/copies/mbx2/reseed", json={})
    await replayed(c)
    assert await c.items("mbx2", "DB1", "alice") == await c.items("mbx1", "DB1", "alice")


def flip(path, needle: bytes, replacement: bytes):
    data = bytearray(path.read_bytes())
    at = data.index(needle)
    data[at : at + len(replacement)] = replacement
    path.write_bytes(bytes(data))


def checkpoint(path):
    """Every page out of the WAL into the file, where the damage is done (a page newer in
    the WAL would be read from there, and the damage never seen)."""
    conn = sqlite3.connect(path, timeout=30)
    busy, _, _ = conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
    conn.close()
    assert busy == 0, "the checkpoint could not finish"


def copy_file(c):
    return c.root / "mbx2" / "DB1" / "DB1.sqlite"


async def test_damaged_pages_of_a_stopped_copy_are_found_on_start(tmp_path):
    c = await started(tmp_path)
    try:
        c.terminate("mbx2")
        path = copy_file(c)
        damage_middle_pages(path)
        await c.start("mbx2")
        await failed(c, "corrupt")
        code, _ = await c.call("GET", "mbx2", f"{DB}/mailboxes/alice/items")
        assert code >= 400, "no reads from a corrupt copy"
        await repaired_by_reseed(c)
    finally:
        await c.close()


async def test_a_row_changed_inside_a_valid_page_is_found_at_the_next_roll(tmp_path):
    c = await started(tmp_path, content_check_every=1, scrub_interval=None)
    try:
        # while the copy runs, one subject changed behind the digest's back (the content
        # triggers made to do nothing on this connection): every page stays valid
        conn = sqlite3.connect(copy_file(c), timeout=30)
        for name, arity in (("dg_item", 6), ("dg_mailbox", 5), ("dg_folder", 3)):
            conn.create_function(name, arity, lambda *_: None)
        with conn:
            conn.execute("UPDATE items SET subject = 'S' WHERE item_id = 'i123'")
        assert conn.execute("PRAGMA quick_check").fetchone()[0] == "ok"
        conn.close()
        await write(c, 300, 50)
        await c.ok("POST", "mbx1", f"{DB}/roll-log")
        await failed(c, "rows no longer add up to its content digest")
        await repaired_by_reseed(c)
    finally:
        await c.close()


async def test_a_row_changed_in_a_stopped_copy_is_found_on_start(tmp_path):
    c = await started(tmp_path, scrub_interval=None)
    try:
        c.terminate("mbx2")
        flip(copy_file(c), b"subject-000123", b"S")  # in place: the page stays valid
        await c.start("mbx2")
        await failed(c, "do not add up to the content digest")
        await repaired_by_reseed(c)
    finally:
        await c.close()


async def test_a_copy_that_went_its_own_way_is_found_by_the_actives_digest(tmp_path):
    c = await started(tmp_path, content_check_every=None, scrub_interval=None)
    try:
        c.terminate("mbx2")
        # a row and the digest changed together, as a replay bug would write them: the copy's
        # file is consistent with itself, and every check of its own passes
        db = Database.open(copy_file(c))
        wrong = PutItem("alice", 1, "i7", "Inbox", "not what the active has", "")
        waypoint = db.header.waypoint
        db.apply(
            [Transaction(Position(waypoint, 512), datetime.now(UTC), (wrong,))],
            waypoint=waypoint,
            committed=waypoint,
            last_log_time=None,
        )
        db.close()
        await c.start("mbx2")
        await c.wait_status("mbx2", "DB1", "Healthy")
        for first in (300, 350, 400):  # rolls: the active's digest reaches the copy
            await write(c, first, 50)
            await c.ok("POST", "mbx1", f"{DB}/roll-log")
        await failed(c, "diverged: as of generation")
        await repaired_by_reseed(c)
    finally:
        await c.close()


async def test_a_running_copys_damaged_pages_are_found_by_the_scrub(tmp_path):
    c = await started(tmp_path, scrub_interval="1s")
    try:

        async def scrubbed():
            return ((await c.status("mbx2"))["DB1"]["last_scrub_result"] or "").startswith("ok")

        await c.wait_for("a first scrub pass", scrubbed)
        sample = b'replication_last_scrub_ok{database="DB1",node="mbx2"}'
        assert sample + b" 1.0" in (await c.call("GET", "mbx2", "/metrics"))[1]
        checkpoint(copy_file(c))
        damage_middle_pages(copy_file(c))
        await failed(c, "background scrub found")
        assert sample + b" 0.0" in (await c.call("GET", "mbx2", "/metrics"))[1]
        await repaired_by_reseed(c)
    finally:
        await c.close()


async def test_the_actives_damaged_file_is_found_by_its_scrub_and_a_copy_takes_over(tmp_path):
    c = await started(tmp_path, scrub_interval="1s", failover_after="2s")
    try:
        for first in range(300, 1100, 200):  # rolls: LLR writes the first ones into the file
            await write(c, first, 200)
            await c.ok("POST", "mbx1", f"{DB}/roll-log")
        await write(c, 1100, 20)  # acknowledged, in the open log only
        written = {f"i{i}" for i in range(1120)}
        path = c.root / "mbx1" / "DB1" / "DB1.sqlite"
        checkpoint(path)

        async def scrubbed():
            return ((await c.status("mbx1"))["DB1"]["last_scrub_result"] or "").startswith("ok")

        await c.wait_for("a first scrub pass of the active", scrubbed)
        damage_middle_pages(path)

        async def dismounted():
            copy = (await c.status("mbx1"))["DB1"]
            return copy["status"] == "Failed" and "background scrub found" in (copy["error"] or "")

        await c.wait_for("the active dismounted by its scrub", dismounted)
        await c.wait_status("mbx2", "DB1", "Mounted")
        assert set(await c.items("mbx2", "DB1", "alice")) == written, "nothing acknowledged lost"
        assert "last logs copied from mbx1" in c.log("mbx2")
    finally:
        await c.close()
