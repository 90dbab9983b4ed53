"""One operation model: what the log carries decodes to the typed operation and back, and
the database (SQL) and the LLR overlay (rows in memory) end with the same rows for the same
operations, whatever they are (property-based, real SQLite)."""

from __future__ import annotations

import uuid

import pytest
from hypothesis import HealthCheck, given, settings

from replication_node.storage import ops
from replication_node.storage.database import Database
from replication_node.storage.overlay import LlrOverlay
from tests.replication_node.strategies import ITEM_IDS, MAILBOXES, history, numbered, operation


@settings(max_examples=200, deadline=None)
@given(raw=operation())
def test_an_operation_decodes_and_encodes_to_what_the_log_carries(raw):
    raw = {**raw, "cn": 7}
    op = ops.decode(raw)
    encoded = ops.encode(op)
    assert ops.decode(encoded) == op
    assert {field: encoded[field] for field in raw} == raw


@pytest.mark.parametrize(
    ("raw", "why"),
    [
        ([], "must be an object"),
        ({"op": "drop_table", "mailbox": "m", "cn": 1}, "unknown operation"),
        ({"op": "put_item", "mailbox": "m", "cn": 1, "folder": "Inbox"}, "no item_id"),
        ({"op": "put_item", "mailbox": "m", "cn": "1", "item_id": "a", "folder": "I"}, "cn"),
        ({"op": "delete_item", "mailbox": "m", "cn": True, "item_id": "a"}, "cn"),
        ({"op": "set_mailbox", "mailbox": "m", "cn": 1, "locked": "yes"}, "locked"),
        ({"op": "create_mailbox", "mailbox": "m", "cn": 1, "folders": [1]}, "folder"),
    ],
)
def test_what_is_not_an_operation_is_refused_naming_why(raw, why):
    with pytest.raises(ops.MalformedOperation, match=why):
        ops.decode(raw)


@settings(
    max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(generations=history)
def test_the_database_and_the_overlay_end_with_the_same_rows(tmp_path_factory, generations):
    txns = numbered(generations)
    path = tmp_path_factory.mktemp("ops") / "db.sqlite"
    db = Database.create(path, database_signature=uuid.uuid4(), log_signature=uuid.uuid4())
    empty = Database.create(
        path.with_name("empty.sqlite"), database_signature=uuid.uuid4(), log_signature=uuid.uuid4()
    )
    try:
        db.apply(txns, waypoint=len(generations), committed=len(generations), last_log_time=None)
        overlay = LlrOverlay()
        for txn in txns:
            overlay.add(txn, db_mailbox=empty.mailbox, db_item=empty.item)
        for mailbox in MAILBOXES:
            assert overlay.mailbox(mailbox) == db.mailbox(mailbox)
            for item_id in ITEM_IDS:
                assert overlay.item(mailbox, item_id) == db.item(mailbox, item_id)
            in_overlay = sorted(f for (m, f) in overlay.folders if m == mailbox)
            assert in_overlay == db.folders(mailbox)
    finally:
        db.close()
        empty.close()
