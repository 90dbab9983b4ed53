"""The lossy failover's `modseq_floor` (issue 50, docs/concepts/imap.md *No UID shown…*):
after `ReserveLost` every item of a folder is reported changed at the folder's new
HIGHESTMODSEQ, so a CONDSTORE client whose cached flags came from the lost tail learns they
may be wrong; on the active (the overlay holding it), on a passive that replayed it, in the
listing built off the loop, in a conditional STORE, and in a file from before the column."""

from __future__ import annotations

import sqlite3
import uuid

import orjson
import pytest

from dag_common.errors import BadRequest
from dag_common.store_api import ItemIn
from replication_node.active.mailbox_store import MailboxStore
from replication_node.http.folder_listing import folder_listing, message_rows
from replication_node.log.operations import SetFolderCounters, decode, encode
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
    written, _, modified = await store.set_flags(
        "m", "Inbox", uids=[1, 2, 3], add=["x"], unchanged_since=held
    )
    assert written is None and [r.item_id for r in modified] == ["a", "b", "c"]
    written, op, modified = await store.set_flags(
        "m", "Inbox", uids=[1], add=["x"], unchanged_since=floor
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


async def test_a_moves_counters_carry_the_floor_on_the_overlay_a_passive_and_the_file(tmp_path):
    """A move's final sync gives the target folder the source's floor (`SetFolderCounters
    {modseq_floor}`): its items, copied with the modseqs they had before the source's
    failover, are reported at the floor, as the source reported them; never lowered."""
    copy = await mount(tmp_path / "active")
    store = MailboxStore(copy)
    await store.create_mailbox("m", folders=["Inbox"], locked=True)
    await store.put_items("m", [ItemIn(item_id=i, body=i) for i in "ab"], override_lock=True)
    floor = 90
    await store.set_folder_counters(
        "m", "Inbox", uid_next=50, highest_modseq=floor, uidvalidity_next=0,
        modseq_floor=floor, override_lock=True,
    )  # fmt: skip
    await store.set_folder_counters(  # a floor is never lowered (a retried sync's, older)
        "m", "Inbox", uid_next=1, highest_modseq=0, uidvalidity_next=0, override_lock=True
    )
    (inbox,) = copy.folder_rows("m")
    assert (inbox.highest_modseq, inbox.modseq_floor) == (floor, floor)
    assert [s.modseq_floor for s in copy.folder_status("m")] == [floor]
    every = [("a", floor), ("b", floor)]
    for since in (0, 2, floor - 1):
        assert listed(copy, since) == every and await off_loop(copy, since) == every, since
    assert listed(copy, floor) == []

    passive = Database.create(
        tmp_path / "passive.sqlite", database_signature=uuid.uuid4(), log_signature=uuid.uuid4()
    )
    try:
        txns = copy.overlay.transactions_through(10**6)
        passive.apply(txns, waypoint=2, committed=2, last_log_time=None)
        assert passive.folder_rows("m") == copy.folder_rows("m")
        assert passive.folder_status("m") == copy.folder_status("m")
        assert listed(passive, 0) == every and listed(passive, floor) == []
    finally:
        passive.close()
    await copy.dismount()
    copy = await mount(tmp_path / "active", create=False)
    assert [f.modseq_floor for f in copy.folder_rows("m")] == [floor]
    assert listed(copy, 0) == every and await off_loop(copy, 0) == every
    await copy.crash_close()


async def test_a_floor_above_the_highest_modseq_given_is_refused_and_changes_nothing(tmp_path):
    copy = await mount(tmp_path)
    store = MailboxStore(copy)
    await store.create_mailbox("m", folders=["Inbox"], locked=True)
    before = copy.folder_rows("m")
    with pytest.raises(BadRequest, match="above highest_modseq"):
        await store.set_folder_counters(
            "m", "Inbox", uid_next=5, highest_modseq=10, uidvalidity_next=0,
            modseq_floor=11, override_lock=True,
        )  # fmt: skip
    assert copy.folder_rows("m") == before
    await copy.crash_close()


def test_a_counters_record_without_a_floor_is_written_and_read_as_before():
    """A log from before the floor replays (the field absent: 0), and a record without a
    floor is written without the field, so a reader from before it still reads it."""
    old = {"op": "set_folder_counters", "mailbox": "m", "cn": 3, "folder": "Inbox",
           "uid_next": 7, "highest_modseq": 9, "uidvalidity_next": 0}  # fmt: skip
    op = decode(old)
    assert isinstance(op, SetFolderCounters) and op.modseq_floor == 0
    assert encode(op) == old
    floored_op = decode({**old, "modseq_floor": 9})
    assert floored_op.modseq_floor == 9 and encode(floored_op) == {**old, "modseq_floor": 9}
