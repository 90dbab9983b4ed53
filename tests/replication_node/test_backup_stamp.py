"""The backup stamp in the database header: applied by replay like any operation, held by
the LLR overlay until the file has it, and a file written before the backup columns existed
still opens (migrated in place)."""

from __future__ import annotations

import sqlite3
import uuid
from datetime import UTC, datetime

from dag_common.model import Position
from replication_node.log.events import Transaction
from replication_node.log.operations import BackupKind, RecordBackup
from replication_node.storage.database import Database
from replication_node.storage.header import DatabaseState
from replication_node.storage.overlay import LlrOverlay

T = datetime(2026, 11, 23, 12, tzinfo=UTC)


def stamp(kind: BackupKind, generation: int, minute: int) -> Transaction:
    op = RecordBackup(kind, generation, T.replace(minute=minute).isoformat())
    return Transaction(Position(generation + 1, 512), T, (op,))


def new_db(path) -> Database:
    return Database.create(path, database_signature=uuid.uuid4(), log_signature=uuid.uuid4())


def test_a_file_without_the_backup_columns_opens_and_takes_stamps(tmp_path):
    path = tmp_path / "old.sqlite"
    new_db(path).close(clean=True)
    conn = sqlite3.connect(path)
    for column in (
        "last_full_backup_generation",
        "last_full_backup_time",
        "last_incremental_backup_generation",
        "last_incremental_backup_time",
    ):
        conn.execute(f"ALTER TABLE db_header DROP COLUMN {column}")
    conn.commit()
    conn.close()

    db = Database.open(path)
    try:
        assert db.header.state is DatabaseState.CLEAN_SHUTDOWN
        assert db.header.last_full_backup_generation == 0
        assert db.header.last_incremental_backup_time is None
        db.apply([stamp(BackupKind.FULL, 4, 5)], waypoint=5, committed=5, last_log_time=None)
    finally:
        db.close()
    again = Database.open(path)  # the migration is durable, and a second open adds nothing
    try:
        assert again.header.last_full_backup_generation == 4
        assert again.header.last_backup_generation == 4
        assert again.header.last_full_backup_time == T.replace(minute=5)
    finally:
        again.close()


def test_the_overlay_shows_a_stamp_until_the_file_has_its_generation(tmp_path):
    db = new_db(tmp_path / "db.sqlite")
    try:
        overlay = LlrOverlay()
        full, incremental = stamp(BackupKind.FULL, 3, 1), stamp(BackupKind.INCREMENTAL, 6, 2)
        for txn in (full, incremental):
            overlay.add(txn, db)
        shown = overlay.over_header(db.header)
        assert (shown.last_full_backup_generation, shown.last_incremental_backup_generation) == (
            3,
            6,
        )
        assert shown.last_backup_generation == 6
        assert db.header.last_backup_generation == 0  # the file has neither yet

        db.apply([full], waypoint=4, committed=7, last_log_time=None)
        overlay.forget_through(4)
        shown = overlay.over_header(db.header)
        assert shown.last_full_backup_generation == 3  # now from the file
        assert shown.last_incremental_backup_generation == 6  # still from the overlay
        assert shown.last_backup_generation == 6
    finally:
        db.close()
