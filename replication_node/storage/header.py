"""The database header: its values, as `eseutil /mh` shows them, and its row in the file.

The header lives in the same SQLite file as the data (table `db_header`, one row) and is
written in the same transaction as the data it describes (`Database`), so the file is
always consistent at its waypoint.
"""

from __future__ import annotations

import sqlite3
import uuid
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from pathlib import Path
from typing import TypedDict

from replication_node.errors import DatabaseError

FORMAT = 1

HEADER_SCHEMA = """
CREATE TABLE db_header(
  id INTEGER PRIMARY KEY CHECK (id = 1),
  format INTEGER NOT NULL,
  database_signature TEXT NOT NULL,
  log_signature TEXT NOT NULL,
  state TEXT NOT NULL,
  checkpoint INTEGER NOT NULL,
  waypoint INTEGER NOT NULL,
  committed INTEGER NOT NULL,
  last_change_number INTEGER NOT NULL,
  last_log_time TEXT,
  last_backup_generation INTEGER NOT NULL,
  last_backup_time TEXT,
  last_full_backup_generation INTEGER NOT NULL DEFAULT 0,
  last_full_backup_time TEXT,
  last_incremental_backup_generation INTEGER NOT NULL DEFAULT 0,
  last_incremental_backup_time TEXT,
  required_from INTEGER NOT NULL DEFAULT 0
);
"""

# Columns added after the first files were written: (name, declaration), added by
# `migrate_header` to a file that lacks them (the defaults are what such a file means).
_ADDED_COLUMNS = (
    ("last_full_backup_generation", "INTEGER NOT NULL DEFAULT 0"),
    ("last_full_backup_time", "TEXT"),
    ("last_incremental_backup_generation", "INTEGER NOT NULL DEFAULT 0"),
    ("last_incremental_backup_time", "TEXT"),
    ("required_from", "INTEGER NOT NULL DEFAULT 0"),
)


class DatabaseState(StrEnum):
    """Whether the file was closed cleanly (the seeds' "State" in the header)."""

    CLEAN_SHUTDOWN = "Clean Shutdown"
    DIRTY_SHUTDOWN = "Dirty Shutdown"


class HeaderFields(TypedDict):
    """`DatabaseHeader.as_dict`: the header as JSON values (`db-header --json`, a backup's
    stamp)."""

    database_signature: str
    log_signature: str
    state: str
    checkpoint: int
    waypoint: int
    committed: int
    log_required: list[int] | None  # [first, last], set while a staged body is pending
    log_committed: list[int]  # [0, committed]
    last_change_number: int
    last_log_time: str | None
    last_backup_generation: int
    last_backup_time: str | None
    last_full_backup_generation: int
    last_full_backup_time: str | None
    last_incremental_backup_generation: int
    last_incremental_backup_time: str | None


@dataclass(frozen=True, slots=True)
class DatabaseHeader:
    """The database header, as `eseutil /mh` shows it."""

    database_signature: uuid.UUID
    log_signature: uuid.UUID
    state: DatabaseState
    checkpoint: int
    waypoint: int
    committed: int
    last_change_number: int
    last_log_time: datetime | None
    last_backup_generation: int = 0  # the last backup of any kind (truncation's "backed up")
    last_backup_time: datetime | None = None
    last_full_backup_generation: int = 0
    last_full_backup_time: datetime | None = None
    last_incremental_backup_generation: int = 0
    last_incremental_backup_time: datetime | None = None
    # Logs Required: the first generation holding a part of a staged body pending at the
    # waypoint (0: none).  A commit above the waypoint reads that body back from there, so
    # recovery, replay, truncation, seeding and backups keep the log from it.
    required_from: int = 0

    @property
    def first_required(self) -> int:
        """The first generation this file needs to go on from its waypoint."""
        return self.required_from or self.waypoint + 1

    def as_dict(self) -> HeaderFields:
        """JSON-ready form, with the seeds' "Log Required / Log Committed" ranges."""
        return {
            "database_signature": str(self.database_signature),
            "log_signature": str(self.log_signature),
            "state": str(self.state),
            "checkpoint": self.checkpoint,
            "waypoint": self.waypoint,
            "committed": self.committed,
            # A generation is written whole, so the file is consistent at its waypoint; the
            # range is set only while a staged body begun at or below it is pending (a
            # transaction spanning generations, `log/spanning.py`).
            "log_required": [self.required_from, self.waypoint] if self.required_from else None,
            "log_committed": [0, self.committed],
            "last_change_number": self.last_change_number,
            "last_log_time": self.last_log_time.isoformat() if self.last_log_time else None,
            "last_backup_generation": self.last_backup_generation,
            "last_backup_time": _iso(self.last_backup_time),
            "last_full_backup_generation": self.last_full_backup_generation,
            "last_full_backup_time": _iso(self.last_full_backup_time),
            "last_incremental_backup_generation": self.last_incremental_backup_generation,
            "last_incremental_backup_time": _iso(self.last_incremental_backup_time),
        }


def _iso(value: datetime | None) -> str | None:
    return value.isoformat() if value else None


def _dt(value: str | None) -> datetime | None:
    return datetime.fromisoformat(value) if value else None


def insert_new_header(
    conn: sqlite3.Connection, *, database_signature: uuid.UUID, log_signature: uuid.UUID
) -> None:
    """The header row of a new, empty database (dirty: it is about to be used)."""
    conn.execute(
        "INSERT INTO db_header VALUES"
        " (1, ?, ?, ?, ?, 1, 0, 0, 0, NULL, 0, NULL, 0, NULL, 0, NULL, 0)",
        (FORMAT, str(database_signature), str(log_signature), "Dirty Shutdown"),
    )


def read_header(conn: sqlite3.Connection, path: Path) -> DatabaseHeader:
    """The header row of the file at `path`; DatabaseError if it has none we can use."""
    try:
        row = conn.execute("SELECT * FROM db_header WHERE id = 1").fetchone()
    except sqlite3.DatabaseError as exc:
        raise DatabaseError(f"{path} has no database header: {exc}") from exc
    if row is None or row["format"] != FORMAT:
        raise DatabaseError(f"{path} has no usable database header")
    return DatabaseHeader(
        database_signature=uuid.UUID(row["database_signature"]),
        log_signature=uuid.UUID(row["log_signature"]),
        state=DatabaseState(row["state"]),
        checkpoint=row["checkpoint"],
        waypoint=row["waypoint"],
        committed=row["committed"],
        last_change_number=row["last_change_number"],
        last_log_time=_dt(row["last_log_time"]),
        last_backup_generation=row["last_backup_generation"],
        last_backup_time=_dt(row["last_backup_time"]),
        last_full_backup_generation=row["last_full_backup_generation"],
        last_full_backup_time=_dt(row["last_full_backup_time"]),
        last_incremental_backup_generation=row["last_incremental_backup_generation"],
        last_incremental_backup_time=_dt(row["last_incremental_backup_time"]),
        required_from=row["required_from"],
    )


def migrate_header(conn: sqlite3.Connection) -> None:
    """Add the header columns a file written before them lacks (a no-op on a current file).
    Checked again inside the write transaction: two handles opening the same old file
    (a passive's pipeline and its reader) add each column once."""
    if not _missing_columns(conn):
        return
    conn.execute("BEGIN IMMEDIATE")
    try:
        for name, declaration in _missing_columns(conn):
            conn.execute(f"ALTER TABLE db_header ADD COLUMN {name} {declaration}")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")


def _missing_columns(conn: sqlite3.Connection) -> list[tuple[str, str]]:
    have = {row[1] for row in conn.execute("PRAGMA table_info(db_header)")}
    if not have:
        return []  # no header at all: read_header says so
    return [(name, decl) for name, decl in _ADDED_COLUMNS if name not in have]


def write_header(conn: sqlite3.Connection, header: DatabaseHeader) -> None:
    """Update the header row (inside the caller's transaction)."""
    conn.execute(
        "UPDATE db_header SET state=?, checkpoint=?, waypoint=?, committed=?,"
        " last_change_number=?, last_log_time=?, last_backup_generation=?,"
        " last_backup_time=?, database_signature=?, log_signature=?,"
        " last_full_backup_generation=?, last_full_backup_time=?,"
        " last_incremental_backup_generation=?, last_incremental_backup_time=?,"
        " required_from=? WHERE id = 1",
        (
            str(header.state),
            header.checkpoint,
            header.waypoint,
            header.committed,
            header.last_change_number,
            _iso(header.last_log_time),
            header.last_backup_generation,
            _iso(header.last_backup_time),
            str(header.database_signature),
            str(header.log_signature),
            header.last_full_backup_generation,
            _iso(header.last_full_backup_time),
            header.last_incremental_backup_generation,
            _iso(header.last_incremental_backup_time),
            header.required_from,
        ),
    )
