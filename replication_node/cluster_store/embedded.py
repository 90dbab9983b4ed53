"""The cluster store as one SQLite file shared by the node processes of one machine."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from datetime import UTC, datetime
from pathlib import Path

from replication_node.cluster_store import ActiveRecord, ClusterStore

_SCHEMA = """
CREATE TABLE IF NOT EXISTS active_copy(
  database TEXT PRIMARY KEY, node TEXT NOT NULL, epoch INTEGER NOT NULL,
  last_log_generated INTEGER NOT NULL DEFAULT 0, updated TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS mailbox_directory(
  mailbox TEXT PRIMARY KEY, database TEXT NOT NULL, updated TEXT NOT NULL);
"""


class EmbeddedClusterStore(ClusterStore):
    """SQLite, WAL, fsync on commit; writes are compare-and-set inside IMMEDIATE txns."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self._conn = sqlite3.connect(
            path, check_same_thread=False, isolation_level=None, timeout=10.0
        )
        self._lock = threading.Lock()
        with self._lock:
            self._conn.execute("PRAGMA journal_mode=WAL")
            self._conn.execute("PRAGMA synchronous=FULL")
            self._conn.executescript(_SCHEMA)

    async def _run(self, fn, *args):  # type: ignore[no-untyped-def]
        return await asyncio.to_thread(self._locked, fn, *args)

    def _locked(self, fn, *args):  # type: ignore[no-untyped-def]
        with self._lock:
            return fn(*args)

    @staticmethod
    def _now() -> str:
        return datetime.now(UTC).isoformat()

    def _active(self, database: str) -> ActiveRecord | None:
        row = self._conn.execute(
            "SELECT node, epoch, last_log_generated, updated FROM active_copy WHERE database=?",
            (database,),
        ).fetchone()
        if row is None:
            return None
        return ActiveRecord(database, row[0], row[1], row[2], datetime.fromisoformat(row[3]))

    async def active(self, database: str) -> ActiveRecord | None:
        return await self._run(self._active, database)

    def _set_active(self, database: str, node: str, expected_epoch: int) -> ActiveRecord | None:
        self._conn.execute("BEGIN IMMEDIATE")
        try:
            current = self._active(database)
            if (current.epoch if current else 0) != expected_epoch:
                self._conn.execute("ROLLBACK")
                return None
            generated = current.last_log_generated if current else 0
            self._conn.execute(
                "INSERT OR REPLACE INTO active_copy VALUES (?, ?, ?, ?, ?)",
                (database, node, expected_epoch + 1, generated, self._now()),
            )
            self._conn.execute("COMMIT")
        except BaseException:
            if self._conn.in_transaction:
                self._conn.execute("ROLLBACK")
            raise
        return self._active(database)

    async def set_active(
        self, database: str, node: str, *, expected_epoch: int
    ) -> ActiveRecord | None:
        return await self._run(self._set_active, database, node, expected_epoch)

    def _publish(self, database: str, node: str, epoch: int, generation: int) -> bool:
        cur = self._conn.execute(
            "UPDATE active_copy SET last_log_generated=max(last_log_generated, ?), updated=?"
            " WHERE database=? AND node=? AND epoch=?",
            (generation, self._now(), database, node, epoch),
        )
        return cur.rowcount == 1

    async def publish_last_log_generated(
        self, database: str, node: str, epoch: int, generation: int
    ) -> bool:
        return await self._run(self._publish, database, node, epoch, generation)

    def _mailbox_database(self, mailbox: str) -> str | None:
        row = self._conn.execute(
            "SELECT database FROM mailbox_directory WHERE mailbox=?", (mailbox,)
        ).fetchone()
        return row[0] if row else None

    async def mailbox_database(self, mailbox: str) -> str | None:
        return await self._run(self._mailbox_database, mailbox)

    def _set_mailbox(self, mailbox: str, database: str, expected: str | None) -> bool:
        self._conn.execute("BEGIN IMMEDIATE")
        try:
            if self._mailbox_database(mailbox) != expected:
                self._conn.execute("ROLLBACK")
                return False
            self._conn.execute(
                "INSERT OR REPLACE INTO mailbox_directory VALUES (?, ?, ?)",
                (mailbox, database, self._now()),
            )
            self._conn.execute("COMMIT")
            return True
        except BaseException:
            if self._conn.in_transaction:
                self._conn.execute("ROLLBACK")
            raise

    async def set_mailbox_database(
        self, mailbox: str, database: str, *, expected: str | None
    ) -> bool:
        return await self._run(self._set_mailbox, mailbox, database, expected)

    async def mailboxes(self) -> dict[str, str]:
        rows = await self._run(
            lambda: self._conn.execute("SELECT mailbox, database FROM mailbox_directory").fetchall()
        )
        return dict(rows)

    def close(self) -> None:
        with self._lock:
            self._conn.close()
