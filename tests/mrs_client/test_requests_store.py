"""A move record reads what older versions of the mover wrote, and keeps what it is given."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import UTC, datetime

import pytest

from dag_common.model import Lsn, Position
from mrs_client.item_limits import SkippedItem, SkipReason
from mrs_client.move_store.interface import MoveRecord
from mrs_client.policy import MovePriority, MoveState, MoveStep
from tests.mrs_client.fakes import SyncMoves

NOW = datetime(2026, 11, 23, tzinfo=UTC)

# A move at step 9 as the mover wrote it before its flush points were `Position`s (flat
# generation and offset fields): step 6 flushed inside the open log, step 9 a generation.
BEFORE_POSITION = (
    '{"id": "abc123", "mailboxes": ["alice"], "source_db": "DB1", "target_db": "DB2", '
    '"created": "2026-11-23T00:00:00+00:00", "updated": "2026-11-23T00:00:00+00:00", '
    '"state": "InProgress", "started": null, "step": 9, "steps_done": 8, '
    '"stalled_since": null, "stall_reason": null, "stall_status": null, "time_stalled": 0.0, '
    '"stalled_by": {}, "failure": null, "failed_stalled": null, "items_copied": 0, '
    '"bytes_copied": 0, "items_total": 0, "sync_cursor": {"alice": 120}, '
    '"snapshot_change": {}, "incremental_passes": 0, "final_generation": 7, '
    '"final_offset": 4095, "unlock_generation": 9, "unlock_offset": null, '
    '"flush_started": "2026-11-23T00:00:00+00:00", "completed": null, "target_epoch": 3, '
    '"source_epoch": 0, "flush_epoch": 3, "verified_epoch": 0, "unlock_epoch": 0, '
    '"reconcile_pending": false, "reconcile_reason": null, "target_in_doubt": false, '
    '"reconciles": 0, "verify_rounds": 0, "items_repaired": 0, "large_item_limit": 0, '
    '"bad_item_limit": 0, "skipped": [], "batch": null, "priority": "NORMAL", '
    '"not_before": null, "retries": 0, "worker": null, "replaces_soft_deleted": []}'
)


def test_flush_points_saved_before_position_read_as_positions_and_write_the_same_bytes():
    record = MoveRecord.from_json(BEFORE_POSITION)
    assert record.final_position == Position(7, 4095) and record.unlock_position == Position(9)
    assert record.final_point == Lsn(generation=7, offset=4095, epoch=3)
    assert record.unlock_point == Lsn(generation=9, epoch=3)
    assert record.to_json() == BEFORE_POSITION
    none = MoveRecord.from_json(
        BEFORE_POSITION.replace('"final_generation": 7', '"final_generation": null')
    )
    assert none.final_position is None and none.final_point is None
    assert json.loads(none.to_json())["final_offset"] is None  # no point: both null


@pytest.mark.parametrize(
    "bad",
    [
        '"final_generation": 7, "final_offset": "x"',
        '"final_generation": 7, "final_offset": -1',
        '"final_generation": 0, "final_offset": 4095',
        '"final_generation": true, "final_offset": 4095',
    ],
)
def test_a_saved_flush_point_that_is_not_a_position_is_refused_by_name(bad):
    text = BEFORE_POSITION.replace('"final_generation": 7, "final_offset": 4095', bad)
    assert text != BEFORE_POSITION
    with pytest.raises(ValueError, match=r"final_offset .*: not a log position"):
        MoveRecord.from_json(text)


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
