"""The move request store opens what older versions of the mover wrote."""

from __future__ import annotations

import json
import sqlite3
from dataclasses import replace
from datetime import UTC, datetime, timedelta

from mrs_client.item_limits import SkippedItem, SkipReason
from mrs_client.policy import GuaranteeAnswer, GuaranteeStatus, MoveStep
from mrs_client.requests_store import MoveRecord, MoveRequestStore

NOW = datetime(2026, 11, 23, tzinfo=UTC)


def test_a_record_and_answers_from_before_epochs_still_load(tmp_path):
    path = tmp_path / "moves.db"
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
    conn = sqlite3.connect(path)
    conn.executescript(
        """
        CREATE TABLE moves(id TEXT PRIMARY KEY, body TEXT NOT NULL, created TEXT NOT NULL);
        CREATE TABLE move_mailboxes(mailbox TEXT PRIMARY KEY, move_id TEXT NOT NULL);
        CREATE TABLE answers(
          move_id TEXT NOT NULL, time TEXT NOT NULL, step INTEGER NOT NULL,
          method TEXT NOT NULL, status TEXT NOT NULL, retry_after REAL NOT NULL,
          reason TEXT NOT NULL);
        """
    )
    conn.execute("INSERT INTO moves VALUES (?, ?, ?)", ("abc123", json.dumps(old), NOW.isoformat()))
    conn.execute(
        "INSERT INTO answers VALUES (?, ?, ?, ?, ?, ?, ?)",
        ("abc123", NOW.isoformat(), 1, "CheckReplicationHealth", "Satisfied", 0.0, "ok"),
    )
    conn.commit()
    conn.close()

    store = MoveRequestStore(path)
    record = store.get("abc123")
    assert isinstance(record, MoveRecord) and record.step is MoveStep.INCREMENTAL_SYNC
    assert (record.target_epoch, record.source_epoch, record.reconcile_pending) == (0, 0, False)
    store.add_answer(
        "abc123",
        step=MoveStep.FINAL_SYNC_AND_FLUSH,
        method="CheckReplicationFlush",
        answer=GuaranteeAnswer(
            GuaranteeStatus.NOT_SATISFIED, timedelta(0), "forked", epoch=3, lost=True
        ),
        now=NOW,
    )
    first, second = store.answers("abc123")
    assert (first["epoch"], first["lost"]) == (0, False)
    assert (second["epoch"], second["lost"]) == (3, True)
    store.close()
    # and from before item limits: none skipped, both limits 0
    assert (record.large_item_limit, record.bad_item_limit, record.skipped) == (0, 0, ())


def test_the_item_limits_and_the_skipped_items_are_kept_with_the_record(tmp_path):
    store = MoveRequestStore(tmp_path / "moves.db")
    record = store.create(
        mailboxes=("alice",),
        source_db="DB1",
        target_db="DB2",
        now=NOW,
        large_item_limit=3,
        bad_item_limit=1,
    )
    skipped = (
        SkippedItem("alice", "m7", 42, SkipReason.LARGE, 70_000, 65_536, "large item", "0f" * 32),
        SkippedItem("alice", "", 57, SkipReason.BAD, None, None, "HTTP 500"),
    )
    store.save(replace(record, skipped=skipped), NOW)
    store.close()
    again = MoveRequestStore(tmp_path / "moves.db").get(record.id)
    assert again is not None
    assert (again.large_item_limit, again.bad_item_limit, again.skipped) == (3, 1, skipped)
    assert again.as_dict()["skipped"][0]["reason"] == "large"
