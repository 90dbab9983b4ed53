"""The change feed of an active copy (`active/change_feed.py`), fed transactions as the log
stream's listener is: what it says of each mailbox, and whom it wakes (only the waiters of
the mailboxes a transaction touches; every one when it ends).  Real events, no mocks."""

from __future__ import annotations

from datetime import UTC, datetime

from dag_common.model import Position
from replication_node.active.change_feed import ChangeFeed
from replication_node.log.events import Transaction
from replication_node.log.operations import (
    BackupKind,
    CreateFolder,
    CreateMailbox,
    DeleteItem,
    DeleteMailbox,
    Operation,
    PutItem,
    RecordBackup,
    SetMailbox,
)

NOW = datetime(2026, 12, 1, tzinfo=UTC)


def txn(*ops: Operation) -> Transaction:
    return Transaction(position=Position(3, 0), commit_time=NOW, ops=tuple(ops))


def feed(floor: int = 10, folders: dict[tuple[str, str], str] | None = None) -> ChangeFeed:
    known = folders or {}
    return ChangeFeed(floor=floor, folder_of=lambda m, i: known.get((m, i)))


async def test_a_transaction_wakes_the_waiters_of_its_mailboxes_and_no_other():
    f = feed()
    alice, bob = f.register("alice"), f.register("bob")
    assert f.waiting == 2
    f.observe(txn(PutItem("alice", 11, "i1", "Inbox")))
    assert alice.is_set() and not bob.is_set()
    assert f.last_seen("alice") == 11 and f.last_seen("bob") == 0
    assert f.visible == 11
    f.unregister("alice", alice)  # already taken off by the wake: no error
    f.unregister("bob", bob)
    assert f.waiting == 0


def test_what_it_says_of_each_mailbox_and_its_folders():
    f = feed(folders={("alice", "i1"): "Archive"})
    f.observe(txn(CreateFolder("alice", 11, "Archive"), PutItem("alice", 12, "i2", "Inbox")))
    f.observe(txn(DeleteItem("alice", 13, "i1")))
    f.observe(txn(SetMailbox("alice", 14, locked=True)))
    assert f.last_seen("alice") == 14
    assert f.folders_above("alice", 10) == {"Archive", "Inbox"}
    assert f.folders_above("alice", 12) == {"Archive"}, "the deleted item's folder, at 13"
    assert f.folders_above("alice", 13) == set(), "a lock is the mailbox's, no folder's"
    f.observe(txn(DeleteMailbox("alice", 15), CreateMailbox("alice", 16, folders=("Inbox",))))
    assert f.folders_above("alice", 10) == {"Inbox"}, "the removed mailbox's folders went"


def test_a_backup_stamp_changes_nothing_and_the_floor_holds():
    f = feed(floor=40)
    f.observe(txn(RecordBackup(BackupKind.FULL, 2, NOW.isoformat())))
    assert f.visible == 40
    f.observe(txn(PutItem("alice", 41, "i1", "Inbox")))
    assert f.visible == 41 and f.floor == 40


def test_the_end_wakes_every_waiter_and_any_later_one_at_once():
    f = feed()
    waiting = [f.register("alice"), f.register("alice"), f.register("bob")]
    f.end()
    assert all(e.is_set() for e in waiting) and f.ended and f.waiting == 0
    late = f.register("carol")
    assert late.is_set() and f.waiting == 0
