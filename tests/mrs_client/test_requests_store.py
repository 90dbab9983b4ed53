"""A move record reads what older versions of the mover wrote, and keeps what it is given."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import UTC, datetime

from mrs_client.item_limits import SkippedItem, SkipReason
from mrs_client.move_store import MoveRecord
from mrs_client.policy import MovePriority, MoveState, MoveStep
from tests.mrs_client.fakes import SyncMoves

NOW = datetime(2026, 11, 23, tzinfo=UTC)


def test_a_record_from_before_epochs_item_limits_and_batches_still_loads():
    old = {
        "id": "abc123",
        "mailboxes": ["alice"],
        "source_db": "DB1",
        "target_db": "DB2",
        "created": NOW.isoformat(),
        "updated": NOW.isoformat(),
        "state": "InProgress",
        "step": 4,
        "steps_done": 3,
        "sync_cursor": {"alice": 120},
    }
    record = MoveRecord.from_json(json.dumps(old))
    assert record.step is MoveStep.INCREMENTAL_SYNC and record.state is MoveState.IN_PROGRESS
    assert (record.target_epoch, record.source_epoch, record.reconcile_pending) == (0, 0, False)
    assert (record.large_item_limit, record.bad_item_limit, record.skipped) == (0, 0, ())
    assert (record.batch, record.priority, record.not_before) == (None, MovePriority.NORMAL, None)


def test_the_item_limits_skipped_items_and_batch_fields_are_kept_with_the_record(tmp_path):
    store = SyncMoves(tmp_path / "cluster.db")
    record = store.create(
        mailboxes=("alice",),
        source_db="DB1",
        target_db="DB2",
        now=NOW,
        large_item_limit=3,
        bad_item_limit=1,
        batch="wave1",
        priority=MovePriority.HIGH,
    )
    skipped = (
        SkippedItem("alice", "m7", 42, SkipReason.LARGE, 70_000, 65_536, "large item", "0f" * 32),
        SkippedItem("alice", "", 57, SkipReason.BAD, None, None, "HTTP 500"),
    )
    store.save(replace(record, skipped=skipped, not_before=NOW), NOW)
    store.close()
    again = SyncMoves(tmp_path / "cluster.db").get(record.id)
    assert again is not None
    assert (again.large_item_limit, again.bad_item_limit, again.skipped) == (3, 1, skipped)
    assert (again.batch, again.priority, again.not_before) == ("wave1", MovePriority.HIGH, NOW)
    assert again.as_dict()["skipped"][0]["reason"] == "large"
    assert again.as_dict()["priority"] == "HIGH"
