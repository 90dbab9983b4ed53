"""What a database file's header says to its readers while `apply` writes: the waypoint it
commits is published only once committed, never while the COMMIT may still be undone."""

from __future__ import annotations

import threading
import uuid

import pytest

from dag_common.model import Position
from replication_node.log.events import Transaction
from replication_node.log.operations import CreateMailbox, PutItem
from replication_node.storage.database import Database
from tests.replication_node.strategies import T0


class Peek(threading.Event):
    """A `committing` event that notes the header a reader sees when the COMMIT starts."""

    def __init__(self, db: Database) -> None:
        super().__init__()
        self.db = db
        self.seen: list[int] = []

    def set(self) -> None:
        self.seen.append(self.db.header.waypoint)
        super().set()


def test_the_new_waypoint_is_published_after_the_commit_not_before(tmp_path):
    db = Database.create(
        tmp_path / "DB1.sqlite", database_signature=uuid.uuid4(), log_signature=uuid.uuid4()
    )
    ops = (CreateMailbox("m", 1, "M"), PutItem("m", 2, "a", "Inbox", "s", "body"))
    peek = Peek(db)
    header = db.apply([Transaction(Position(1, 512), T0, ops)], waypoint=1, committed=1,
                      last_log_time=T0, committing=peek)  # fmt: skip
    assert peek.seen == [0], "a reader saw the waypoint before the COMMIT"
    assert header.waypoint == db.header.waypoint == 1
    db.close()


def test_a_failed_apply_publishes_nothing(tmp_path):
    db = Database.create(
        tmp_path / "DB1.sqlite", database_signature=uuid.uuid4(), log_signature=uuid.uuid4()
    )
    digest = db.content_digest
    # an operation no decoder of the log lets through (a folder of None): the row cannot be
    # written, after the mailbox's row was
    bad = (CreateMailbox("m", 1, "M"), PutItem("m", 2, "a", None, "s", "body"))  # type: ignore[arg-type]
    peek = Peek(db)
    with pytest.raises(AttributeError):
        db.apply([Transaction(Position(1, 512), T0, bad)], waypoint=1, committed=1,
                 last_log_time=T0, committing=peek)  # fmt: skip
    assert peek.is_set(), "the read waiting for the COMMIT is let go"
    assert db.header.waypoint == 0 and db.content_digest == digest
    db.close()
