"""Folders, flags and UIDs kept by the store (issue 50, step 1): what each write gives and
refuses, a rename's items and digest, UIDs that never go back, and a file from before UIDs
numbered alike on every copy."""

from __future__ import annotations

import asyncio
import shutil
import sqlite3
import uuid
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dag_common.mailbox_digest import rows_digest
from dag_common.model import Position
from dag_common.store_api import ItemIn, Written
from replication_node.active.mailbox_store import MailboxStore
from replication_node.errors import BadRequest, Conflict, NotFound
from replication_node.log.events import Transaction
from replication_node.log.operations import CreateMailbox, PutItem
from replication_node.storage.database import Database
from replication_node.storage.paths import CopyPaths
from tests.replication_node.helpers import body_of, mount

SEEN, DELETED = "\\Seen", "\\Deleted"


def status(copy, mailbox: str) -> dict:
    return {s.folder: s for s in copy.folder_status(mailbox)}


async def test_puts_flags_moves_copies_and_expunges_number_as_imap_asks(tmp_path):
    copy = await mount(tmp_path)
    store = MailboxStore(copy)
    await store.create_mailbox("m", folders=["Inbox", "Work"])
    inbox = status(copy, "m")["Inbox"]
    assert inbox.uidvalidity > 1_700_000_000 and inbox.uid_next == 1  # from the time
    assert status(copy, "m")["Work"].uidvalidity == inbox.uidvalidity + 1
    when = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
    await store.put_items(
        "m",
        [
            ItemIn(item_id="a", body="1", flags=("work", SEEN, SEEN)),
            ItemIn(item_id="b", body="2", received=when),
            ItemIn(item_id="c", body="3"),
        ],
    )
    rows = copy.folder_items("m", "Inbox")
    assert [(r.item_id, r.uid, r.flags) for r in rows] == [
        ("a", 1, (SEEN, "work")), ("b", 2, ()), ("c", 3, ()),
    ]  # fmt: skip
    assert rows[1].received == when.isoformat()
    s = status(copy, "m")["Inbox"]
    assert (s.uid_next, s.highest_modseq, s.messages, s.unseen) == (4, 3, 3, 2)

    _, op, _ = await store.set_flags("m", "Inbox", uids=[2, 3], add=[SEEN, DELETED])
    assert op.modseq == 4 and op.item_ids == ("b", "c")
    after = {r.item_id: r for r in copy.folder_items("m", "Inbox")}
    assert after["b"].flags == (DELETED, SEEN) and after["b"].modseq == 4
    assert status(copy, "m")["Inbox"].unseen == 0

    # a move: new UIDs in the target, one operation; the source's items gone from it
    _, moved, new_uids = await store.move_or_copy_items("m", "Inbox", "Work", copy=False, uids=[1])
    assert [r.item_id for r in moved] == ["a"] and new_uids == [1]
    assert [r.item_id for r in copy.folder_items("m", "Work")] == ["a"]
    _, _copied, copy_uids = await store.move_or_copy_items(
        "m", "Work", "Inbox", copy=True, item_ids=["a"]
    )
    assert copy_uids == [4]  # the Inbox's next: a UID is never given twice
    clone = copy.folder_items("m", "Inbox")[-1]
    assert clone.item_id != "a" and clone.flags == (SEEN, "work")
    assert body_of(copy, "m", clone.item_id) == "1"

    # expunge: only what is flagged \Deleted (among the UIDs given)
    _written, gone = await store.expunge("m", "Inbox", uids=[2, 4])
    assert [r.uid for r in gone] == [2]
    expunged = [r for r in copy.folder_items("m", "Inbox", since_modseq=4) if r.deleted]
    assert [(r.uid, r.item_id) for r in expunged] == [(2, "b")]
    assert [r.uid for r in copy.folder_items("m", "Inbox")] == [3, 4]
    _, gone = await store.expunge("m", "Inbox")
    assert [r.uid for r in gone] == [3]
    assert await store.expunge("m", "Inbox") == (None, [])
    s = status(copy, "m")["Inbox"]
    assert (s.uid_next, s.messages) == (5, 1)
    await copy.crash_close()


@pytest.mark.parametrize(
    ("call", "error"),
    [
        (lambda s: s.rename_folder("m", "Nope", "X"), NotFound),
        (lambda s: s.rename_folder("m", "Inbox", "X"), Conflict),
        (lambda s: s.rename_folder("m", "A", "B"), Conflict),  # B exists
        (lambda s: s.rename_folder("m", "A", "A/x"), Conflict),  # into itself
        (lambda s: s.rename_folder("m", "A", "/x"), BadRequest),
        (lambda s: s.delete_folder("m", "A"), Conflict),  # has a child
        (lambda s: s.delete_folder("m", "Inbox"), Conflict),
        (lambda s: s.set_flags("m", "Inbox", uids=[99], add=[SEEN]), NotFound),
        (lambda s: s.set_flags("m", "Inbox", uids=[1], item_ids=["a"], add=[SEEN]), BadRequest),
        (lambda s: s.set_flags("m", "Inbox", uids=[1], add=[SEEN], replace=[]), BadRequest),
        (lambda s: s.move_or_copy_items("m", "Inbox", "Inbox", copy=False, uids=[1]), BadRequest),
        (lambda s: s.move_or_copy_items("m", "Inbox", "Nope", copy=False, uids=[1]), NotFound),
        (lambda s: s.move_or_copy_items("m", "Nope", "Inbox", copy=True, uids=[1]), NotFound),
        (lambda s: s.expunge("m", "Nope"), NotFound),
    ],
)
async def test_a_bad_imap_write_is_refused_and_changes_nothing(tmp_path, call, error):
    copy = await mount(tmp_path)
    store = MailboxStore(copy)
    await store.create_mailbox("m", folders=["Inbox", "A", "A/c", "B"])
    await store.put_items("m", [ItemIn(item_id="a", body="x")])
    before = (copy.folder_rows("m"), copy.items("m"), copy.highest_change_number)
    with pytest.raises(error):
        await call(store)
    assert (copy.folder_rows("m"), copy.items("m"), copy.highest_change_number) == before
    await copy.crash_close()


async def test_a_renamed_folder_takes_its_children_and_items_and_the_digest_follows(tmp_path):
    copy = await mount(tmp_path, log_file_size=16 * 1024, llr_depth=2)
    store = MailboxStore(copy)
    await store.create_mailbox("m", folders=["Inbox", "Projects", "Projects/2026"])
    for i in range(100):  # generations enough that some rows are in the file, some not
        folder = ("Projects", "Projects/2026")[i % 2]
        await store.put_items("m", [ItemIn(item_id=f"i{i}", folder=folder, body="b" * 500)])
    assert copy.db.header.waypoint > 0 and copy.overlay.items
    before = {s.folder: s for s in copy.folder_status("m")}
    await store.rename_folder("m", "Projects", "Archive/Old")
    after = {s.folder: s for s in copy.folder_status("m")}
    assert set(after) == {"Inbox", "Archive/Old", "Archive/Old/2026"}
    for old, new in (("Projects", "Archive/Old"), ("Projects/2026", "Archive/Old/2026")):
        assert after[new] == before[old].model_copy(
            update={"folder": new}
        )  # UIDVALIDITY, counters kept
    items = {r.item_id: r.folder for r in copy.items("m")}
    assert items["i0"] == "Archive/Old" and items["i1"] == "Archive/Old/2026"
    assert [r.uid for r in copy.folder_items("m", "Archive/Old")] == list(range(1, 51))
    assert copy.folder_items("m", "Projects") == []
    # the digest: as a file holding every generation adds it up
    await copy.roll(force=True)
    await copy.roll(force=True)
    await copy.roll(force=True)
    await copy.llr_settled()
    stored, recomputed = copy.db.recompute_digest()
    assert stored == recomputed
    assert not copy.overlay.renames
    assert {r.item_id: r.folder for r in copy.items("m")} == items
    await copy.crash_close()


async def test_a_deleted_folder_leaves_tombstones_and_a_new_one_of_its_name_a_new_uidvalidity(
    tmp_path,
):
    copy = await mount(tmp_path)
    store = MailboxStore(copy)
    await store.create_mailbox("m", folders=["Inbox", "Old"])
    await store.put_items("m", [ItemIn(item_id=f"i{i}", folder="Old") for i in range(3)])
    first = status(copy, "m")["Old"].uidvalidity
    written = await store.delete_folder("m", "Old")
    assert "Old" not in copy.folders("m")
    tombs = [r for r in copy.items("m") if r.deleted]
    assert sorted(r.change_number for r in tombs) == [
        written.change_number - 2, written.change_number - 1, written.change_number
    ]  # fmt: skip
    assert {r.uid for r in tombs} == {1, 2, 3}
    await store.create_folder("m", "Old")
    again = status(copy, "m")["Old"]
    assert again.uidvalidity > first and again.uid_next == 1
    await copy.crash_close()


def _logged(copy, seen: list[Transaction]) -> list[Transaction]:
    """`seen` with the transactions the active's overlay holds now that it lacks, in order."""
    known = {id(t) for t in seen}
    seen.extend(t for t in copy.overlay.transactions_through(10**9) if id(t) not in known)
    return seen


async def test_a_move_is_an_expunge_of_its_source_since_its_modseq_on_every_copy(tmp_path):
    copy = await mount(tmp_path, log_file_size=16 * 1024, llr_depth=2)
    store = MailboxStore(copy)
    await store.create_mailbox("m", folders=["Inbox", "Work", "Old"])
    for i in range(40):
        await store.put_items("m", [ItemIn(item_id=f"i{i}", body="b" * 500)])
    validity = status(copy, "m")["Inbox"].uidvalidity
    _, _, first = await store.move_or_copy_items("m", "Inbox", "Work", copy=False, uids=[1, 2])
    log = _logged(copy, [])
    for _ in range(3):  # the first move's generation into the file, the second's not
        await copy.roll(force=True)
    await copy.llr_settled()
    assert not copy.overlay.moved_out
    mark = status(copy, "m")["Inbox"].highest_modseq
    await store.move_or_copy_items("m", "Inbox", "Work", copy=False, uids=[3])
    await store.move_or_copy_items(
        "m", "Work", "Inbox", copy=False, uids=first[:1]
    )  # back in: a new UID there
    assert copy.overlay.moved_out
    assert copy.moved_out("m", validity, 0) == [1, 2, 3]
    assert copy.moved_out("m", validity, mark) == [3]
    assert [r.uid for r in copy.folder_items("m", "Inbox", since_modseq=mark)] == [41]
    # a rename keeps them (the folder's UIDVALIDITY is its identity)
    await store.rename_folder("m", "Work", "Done")
    work = status(copy, "m")["Done"].uidvalidity
    assert copy.moved_out("m", work, 0) == first[:1]
    # a folder removed takes its records with it
    await store.move_or_copy_items("m", "Inbox", "Old", copy=False, uids=[4])
    old = status(copy, "m")["Old"].uidvalidity
    await store.move_or_copy_items("m", "Old", "Inbox", copy=False, uids=[1])
    assert copy.moved_out("m", old, 0) == [1]
    await store.delete_folder("m", "Old")
    assert copy.moved_out("m", old, 0) == []

    # a passive replaying the log holds the same records
    passive = Database.create(
        tmp_path / "passive.sqlite", database_signature=uuid.uuid4(), log_signature=uuid.uuid4()
    )
    try:
        txns = _logged(copy, log)
        passive.apply(txns, waypoint=1, committed=1, last_log_time=T0)
        for v in (validity, work, old):
            assert passive.moved_out("m", v, 0) == sorted(copy.moved_out("m", v, 0))
        assert passive.moved_out("m", validity, mark) == [3, 4]
    finally:
        passive.close()
    # and the active's file, once every generation is in it
    for _ in range(3):
        await copy.roll(force=True)
    await copy.llr_settled()
    assert not copy.overlay.moved_out
    assert copy.moved_out("m", validity, mark) == [3, 4]
    assert copy.db.moved_out("m", old, 0) == []
    await copy.crash_close()


@settings(max_examples=15, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    steps=st.lists(
        st.tuples(
            st.sampled_from(["put", "put", "flags", "move", "copy", "expunge", "rename"]),
            st.integers(0, 3),
        ),
        min_size=1,
        max_size=25,
    )
)
def test_uid_next_never_goes_back_and_no_uid_is_given_twice(tmp_path_factory, steps):
    """Whatever writes come (puts, flags, moves, copies, expunges, renames back and forth),
    a folder's UIDNEXT and HIGHESTMODSEQ never go back, and no UID of a folder (by its
    UIDVALIDITY) is given to two items."""

    async def run() -> None:
        copy = await mount(tmp_path_factory.mktemp("uids"), log_file_size=16 * 1024)
        store = MailboxStore(copy)
        await store.create_mailbox("m", folders=["Inbox", "A", "B"])
        seen: dict[int, int] = {}  # uidvalidity -> highest uid_next seen
        given: dict[tuple[int, int], str] = {}  # (uidvalidity, uid) -> item id
        for n, (kind, k) in enumerate(steps):
            folders = ["Inbox", *sorted(f for f in copy.folders("m") if f != "Inbox")]
            folder = folders[k % len(folders)]
            other = folders[(k + 1) % len(folders)]
            uids = [r.uid for r in copy.folder_items("m", folder)][: k + 1]
            if kind == "put":
                await store.put_items("m", [ItemIn(item_id=f"p{n}", folder=folder)])
            elif kind == "rename" and folder != "Inbox":
                await store.rename_folder("m", folder, f"R{n}")
            elif uids and kind == "flags":
                await store.set_flags("m", folder, uids=uids, add=[DELETED])
            elif uids and kind == "move" and other != folder:
                await store.move_or_copy_items("m", folder, other, copy=False, uids=uids)
            elif uids and kind == "copy":
                await store.move_or_copy_items("m", folder, other, copy=True, uids=uids)
            elif kind == "expunge":
                await store.expunge("m", folder)
            for f in copy.folder_rows("m"):
                assert f.uid_next >= seen.get(f.uidvalidity, 1)
                seen[f.uidvalidity] = f.uid_next
                for r in copy.folder_items("m", f.folder):
                    assert 0 < r.uid < f.uid_next and r.modseq <= f.highest_modseq
                    assert given.setdefault((f.uidvalidity, r.uid), r.item_id) == r.item_id
        await copy.crash_close()

    asyncio.run(run())


T0 = datetime(2026, 11, 1, tzinfo=UTC)


def old_file(path, txns) -> None:
    """A database file as a node from before UIDs left it: its rows written, then the
    columns and index issue 50 added taken away."""
    db = Database.create(path, database_signature=uuid.uuid4(), log_signature=uuid.uuid4())
    db.apply(txns, waypoint=1, committed=1, last_log_time=T0)
    db.close()
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("DROP INDEX items_by_uid")
    conn.execute("DROP TABLE moved_out")
    for table, column in (
        ("mailboxes", "uidvalidity_next"), ("folders", "uidvalidity"), ("folders", "uid_next"),
        ("folders", "highest_modseq"), ("items", "uid"), ("items", "modseq"),
        ("items", "flags"), ("items", "received"),
    ):  # fmt: skip
        conn.execute(f"ALTER TABLE {table} DROP COLUMN {column}")
    conn.execute("DROP TABLE bodies")  # after them, too
    conn.execute("PRAGMA user_version = 0")
    conn.close()


async def test_a_file_from_before_uids_is_numbered_once_and_alike_on_every_copy(tmp_path):
    ops = [CreateMailbox("m", 1, folders=("Inbox", "Work"))]
    # ids out of arrival order: numbered in item-id order, the same on every copy
    for cn, (item_id, folder) in enumerate([("z", "Inbox"), ("b", "Inbox"), ("k", "Work")], 2):
        ops.append(PutItem("m", cn, item_id, folder, body=item_id))
    paths = CopyPaths(tmp_path / "active", "DB1")
    paths.root.mkdir(parents=True)
    old_file(paths.database, [Transaction(Position(1, 512), T0, tuple(ops))])
    passive_file = tmp_path / "passive.sqlite"
    shutil.copy(paths.database, passive_file)

    copy = await mount(tmp_path / "active", create=False)
    store = MailboxStore(copy)
    assert copy.unnumbered()
    written = await store.assign_uids()
    assert written is not None and not copy.unnumbered()
    assert await store.assign_uids() is None  # once
    inbox = copy.folder_items("m", "Inbox")
    assert [(r.item_id, r.uid) for r in inbox] == [("b", 1), ("z", 2)]
    assert [(r.item_id, r.uid) for r in copy.folder_items("m", "Work")] == [("k", 1)]
    rows = status(copy, "m")
    assert rows["Inbox"].uid_next == 3 and rows["Inbox"].uidvalidity > 0
    # a new put goes on from there
    await store.put_items("m", [ItemIn(item_id="new")])
    assert copy.folder_items("m", "Inbox")[-1].uid == 3

    # the passive replays the same log: the same UIDs, flags and counters
    txns = copy.overlay.transactions_through(10**6)
    passive = Database.open(passive_file)
    try:
        passive.apply(txns, waypoint=2, committed=2, last_log_time=T0 + timedelta(seconds=1))
        assert passive.folder_rows("m") == copy.folder_rows("m")
        for folder in ("Inbox", "Work"):
            assert passive.folder_items("m", folder) == copy.folder_items("m", folder)
        assert rows_digest("m", passive.digest_rows("m")) == rows_digest("m", copy.digest_rows("m"))
    finally:
        passive.close()
    await copy.crash_close()


async def test_a_reservation_past_a_folders_last_uid_refuses_its_puts_and_nothing_else(tmp_path):
    """The 2^32 fallback is not built: a folder whose UIDNEXT a lossy activation's
    reservation would carry past the last UID is held there, refuses new messages (409,
    nothing written), and gives no UID twice; the other folders number as ever."""
    copy = await mount(tmp_path)
    store = MailboxStore(copy)
    await store.create_mailbox("m", folders=["Inbox", "Work"])
    await store.put_items("m", [ItemIn(item_id=i) for i in "abc"])
    assert await store.reserve_lost(0) is None  # nothing to reserve
    before = status(copy, "m")
    await store.reserve_lost(2**32 - 3)
    rows = status(copy, "m")
    assert rows["Inbox"].uid_next == 2**32 and rows["Work"].uid_next == 2**32 - 2
    assert rows["Inbox"].highest_modseq == before["Inbox"].highest_modseq + 2**32 - 3
    with pytest.raises(Conflict, match="no UID left"):
        await store.put_items("m", [ItemIn(item_id="d")])
    assert copy.item("m", "d") is None
    await store.put_items("m", [ItemIn(item_id=i, folder="Work") for i in "wx"])
    assert [r.uid for r in copy.folder_items("m", "Work")] == [2**32 - 2, 2**32 - 1]
    await copy.crash_close()


async def test_the_same_item_put_again_keeps_its_uid_flags_and_internaldate(tmp_path):
    """The dumpster redelivering a message a lossy failover did not lose: its UID, modseq,
    flags and INTERNALDATE kept (a client sees nothing change); a put of other bytes, in
    another folder, or naming flags replaces it under a new UID, as before."""
    copy = await mount(tmp_path)
    store = MailboxStore(copy)
    await store.create_mailbox("m", folders=["Inbox", "Work"])
    await store.put_items("m", [ItemIn(item_id="a", body="1"), ItemIn(item_id="b", body="2")])
    await store.set_flags("m", "Inbox", uids=[1], add=[SEEN])
    before = {r.item_id: r for r in copy.folder_items("m", "Inbox")}
    await store.put_items("m", [ItemIn(item_id="a", body="1")])  # again, as it is
    again = copy.item("m", "a")
    assert (again.uid, again.modseq, again.flags, again.received) == (
        1, before["a"].modseq, (SEEN,), before["a"].received,
    )  # fmt: skip
    assert status(copy, "m")["Inbox"].uid_next == 3
    for changed in (
        ItemIn(item_id="b", body="2 changed"),
        ItemIn(item_id="b", body="2 changed", flags=(SEEN,)),
        ItemIn(item_id="b", body="2 changed", folder="Work"),
    ):
        await store.put_items("m", [changed])
        assert copy.item("m", "b").uid not in (0, before["b"].uid), changed


async def test_an_append_retried_under_its_item_id_keeps_its_uid(tmp_path):
    """An IMAP APPEND the front sends again under the same item id (its answer lost in a
    failover) names the flags and INTERNALDATE it was put with: the same item, kept; other
    flags or another INTERNALDATE replace it under a new UID."""
    copy = await mount(tmp_path)
    store = MailboxStore(copy)
    await store.create_mailbox("m", folders=["Inbox"])
    when = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
    appended = ItemIn(item_id="a", body="1", flags=("\\Seen", "\\Draft"), received=when)
    both = await store.put_items("m", [appended, ItemIn(item_id="b", body="2", flags=("\\Seen",))])
    first = copy.item("m", "a")
    # the answer says each item's UID (the front's APPENDUID, read back from nothing)
    assert both.item_uids == (first.uid, copy.item("m", "b").uid)
    assert (both.uid_of("a"), both.uid_of("b"), both.uid_of("c")) == (*both.item_uids, None)
    answer = await store.put_items("m", [appended])
    again = copy.item("m", "a")
    assert (answer.item_id, answer.uid, answer.uid_of("a")) == ("a", first.uid, first.uid)
    assert Written.model_validate(answer.wire()) == answer  # as the front reads it
    assert (again.uid, again.modseq, again.flags, again.received) == (
        first.uid, first.modseq, first.flags, first.received,
    )  # fmt: skip
    for changed in (
        ItemIn(item_id="a", body="1", flags=("\\Seen",), received=when),
        ItemIn(item_id="b", body="2", flags=("\\Seen",), received=when),
    ):
        before = copy.item("m", changed.item_id).uid
        await store.put_items("m", [changed])
        assert copy.item("m", changed.item_id).uid not in (0, before), changed


async def test_a_conditional_store_changes_only_what_is_unchanged_since(tmp_path):
    """RFC 7162's UNCHANGEDSINCE on the node: an item changed past the modseq is left as it
    is and answered; of two conditional STOREs racing on an item only one passes (the first's
    modseq counts before it is durable); none passing writes nothing."""
    copy = await mount(tmp_path)
    store = MailboxStore(copy)
    await store.create_mailbox("m", folders=["Inbox"])
    await store.put_items("m", [ItemIn(item_id=i, body=i) for i in "abc"])
    held = status(copy, "m")["Inbox"].highest_modseq  # 3: each put's
    await store.set_flags("m", "Inbox", uids=[2], add=["x"])  # b now at 4
    written, op, modified = await store.set_flags(
        "m", "Inbox", uids=[1, 2, 3], add=[SEEN], unchanged_since=held
    )
    assert written is not None and op.item_ids == ("a", "c") and op.modseq == 5
    assert [r.item_id for r in modified] == ["b"]
    flags = {r.item_id: r.flags for r in copy.folder_items("m", "Inbox")}
    assert flags == {"a": (SEEN,), "b": ("x",), "c": (SEEN,)}

    races = await asyncio.gather(
        store.set_flags("m", "Inbox", uids=[1], add=["one"], unchanged_since=5),
        store.set_flags("m", "Inbox", uids=[1], add=["two"], unchanged_since=5),
    )
    assert sorted(len(m) for _, _, m in races) == [0, 1]
    (a,) = [r for r in copy.folder_items("m", "Inbox") if r.item_id == "a"]
    assert a.flags in ((SEEN, "one"), (SEEN, "two"))

    before = [(r.item_id, r.flags, r.modseq) for r in copy.folder_items("m", "Inbox")]
    nothing = await store.set_flags("m", "Inbox", uids=[1, 2], add=["z"], unchanged_since=0)
    assert nothing[:2] == (None, None) and len(nothing[2]) == 2
    assert [(r.item_id, r.flags, r.modseq) for r in copy.folder_items("m", "Inbox")] == before
    with pytest.raises(BadRequest):
        await store.set_flags("m", "Inbox", uids=[1], add=["z"], unchanged_since=2**63)
