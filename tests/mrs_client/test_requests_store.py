"""The move request store opens what older versions of the mover wrote."""

from __future__ import annotations

import json
import sqlite3
from datetime import UTC, datetime, timedelta

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
