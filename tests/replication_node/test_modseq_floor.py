"""The lossy failover's `modseq_floor` (issue 50, docs/concepts/imap.md *No UID shown…*):
after `ReserveLost` every item of a folder is reported changed at the folder's new
HIGHESTMODSEQ, so a CONDSTORE client whose cached flags came from the lost tail learns they
may be wrong; on the active (the overlay holding it), on a passive that replayed it, in the
listing built off the loop, in a conditional STORE, and in a file from before the column."""

from __future__ import annotations

import sqlite3
import uuid

import orjson

from dag_common.store_api import ItemIn
from replication_node.active.mailbox_store import MailboxStore
from replication_node.http.folder_listing import folder_listing, message_rows
from replication_node.storage.database import Database
from replication_node.storage.paths import CopyPaths
from tests.replication_node.helpers import mount

SEEN = "\\Seen"


def listed(reader, since: int) -> list[tuple[str, int]]:
    return [(r.item_id, r.modseq) for r in reader.folder_items("m", "Inbox", since)]


async def off_loop(reader, since: int) -> list[tuple[str, int]]:
    body = await folder_listing(
        reader, "m", "Inbox", since, lambda items: orjson.dumps(message_rows(items))
    )
    return [(row[1], row[3]) for row in orjson.loads(body)]


async def test_after_a_reservation_every_item_counts_as_changed_since_any_modseq_held(tmp_path):
    copy = await mount(tmp_path / "active")
    store = MailboxStore(copy)
    await store.create_mailbox("m", folders=["Inbox", "Work"])
    await store.put_items("m", [ItemIn(item_id=i, body=i) for i in "abc"])
    await store.set_flags("m", "Inbox", uids=[2], add=[SEEN])
    held = {f.folder: f for f in copy.folder_rows("m")}["Inbox"].highest_modseq  # 4
    assert listed(copy, held) == []

    await store.reserve_lost(100)
    inbox = {f.folder: f for f in copy.folder_rows("m")}["Inbox"]
    floor = held + 100
    assert (inbox.highest_modseq, inbox.modseq_floor) == (floor, floor)
    every = [("a", floor), ("b", floor), ("c", floor)]
    # since any modseq the lost tail may have shown (at most the new HIGHESTMODSEQ, less one)
    for since in (0, 1, held, floor - 1):
        assert listed(copy, since) == every, since
        assert await off_loop(copy, since) == every, since
    assert listed(copy, floor) == [] and await off_loop(copy, floor) == []

    # a conditional STORE compares the reported modseq: below the floor, none passes
    written, _, modified = await store.set_flags_unchanged_since(
        "m", "Inbox", held, uids=[1, 2, 3], add=["x"]
    )
    assert written is None and [r.item_id for r in modified] == ["a", "b", "c"]
    written, op, modified = await store.set_flags_unchanged_since(
        "m", "Inbox", floor, uids=[1], add=["x"]
    )
    assert written is not None and op.modseq == floor + 1 and modified == []
    assert listed(copy, floor) == [("a", floor + 1)]
    assert listed(copy, 0) == [("a", floor + 1), ("b", floor), ("c", floor)]

    # a passive replays the same log: the same floor, the same listings, in the file
    passive = Database.create(
        tmp_path / "passive.sqlite", database_signature=uuid.uuid4(), log_signature=uuid.uuid4()
    )
    try:
        txns = copy.overlay.transactions_through(10**6)
        passive.apply(txns, waypoint=2, committed=2, last_log_time=None)
        assert passive.folder_rows("m") == copy.folder_rows("m")
        for since in (0, held, floor):
            assert listed(passive, since) == listed(copy, since), since
            assert await off_loop(passive, since) == listed(copy, since), since
    finally:
        passive.close()
    # written into the active's file (the overlay then holds none of it): the same
    before = {since: listed(copy, since) for since in (0, held, floor)}
    await copy.dismount()
    copy = await mount(tmp_path / "active", create=False)
    for since, rows in before.items():
        assert listed(copy, since) == rows and await off_loop(copy, since) == rows, since
    await copy.crash_close()


async def test_a_file_from_before_the_floor_gets_the_column_at_zero(tmp_path):
    copy = await mount(tmp_path)
    store = MailboxStore(copy)
    await store.create_mailbox("m", folders=["Inbox"])
    await store.put_items("m", [ItemIn(item_id="a", body="a")])
    await copy.dismount()
    path = CopyPaths(tmp_path, "DB1").database
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("ALTER TABLE folders DROP COLUMN modseq_floor")
    conn.close()

    copy = await mount(tmp_path, create=False)
    assert [f.modseq_floor for f in copy.folder_rows("m")] == [0]
    assert listed(copy, 0) == [("a", 1)]
    await MailboxStore(copy).reserve_lost(5)
    assert listed(copy, 1) == [("a", 6)]
    await copy.crash_close()
