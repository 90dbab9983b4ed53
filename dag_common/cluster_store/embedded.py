"""The cluster store as one SQLite file shared by the node processes of one machine.

Its calls run in a thread pool of their own (`_POOL_SIZE` threads), not asyncio's default
one: the node's other blocking work (`asyncio.to_thread`: a folder listing, a backup, a log
deletion) queues there, and an active's lease renewal queued behind it expired the lease
while the store itself was idle.  The calls are serialised on one connection anyway, so one
thread is all they use.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from pathlib import Path
from typing import TypeVar, TypeVarTuple, Unpack

from dag_common.clock import Clock, SystemClock
from dag_common.cluster_store.engine import LeaseClock, immediate, open_store_file
from dag_common.cluster_store.interface import (
    MOVE_CLAIMS_TABLE,
    MOVE_REQUESTS_TABLE,
    ActivationCause,
    ActiveRecord,
    ClusterStore,
    DirectoryEntry,
    EpochRecord,
    FailoverPause,
    LeaseRecord,
    RedeliveryChange,
    RedeliveryRecord,
    SetActive,
    known_member,
    move_hold,
)
from dag_common.errors import FailoverPaused, LeaseHeld
from dag_common.model import AutoDatabaseMountDial

T = TypeVar("T")
Ts = TypeVarTuple("Ts")

_POOL_SIZE = 1  # the calls share one connection, under one lock

_SCHEMA = """
CREATE TABLE IF NOT EXISTS active_copy(
  database TEXT PRIMARY KEY, node TEXT NOT NULL, epoch INTEGER NOT NULL,
  last_log_generated INTEGER NOT NULL DEFAULT 0, updated TEXT NOT NULL,
  open_generation INTEGER NOT NULL DEFAULT 0, change_number_ceiling INTEGER NOT NULL DEFAULT 0);
CREATE TABLE IF NOT EXISTS mailbox_directory(
  mailbox TEXT PRIMARY KEY, database TEXT NOT NULL, updated TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS active_lease(
  database TEXT PRIMARY KEY, node TEXT NOT NULL, epoch INTEGER NOT NULL,
  expires REAL NOT NULL, boot TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS stream_history(
  database TEXT NOT NULL, epoch INTEGER NOT NULL, node TEXT NOT NULL,
  start_generation INTEGER NOT NULL, created TEXT NOT NULL, kept_through INTEGER,
  cause TEXT, mount_dial TEXT, lost_logs INTEGER,
  PRIMARY KEY(database, epoch));
CREATE TABLE IF NOT EXISTS failover_pause(
  id INTEGER PRIMARY KEY CHECK(id = 1), since TEXT NOT NULL, paused_by TEXT NOT NULL,
  reason TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS dumpster_redelivery(
  database TEXT PRIMARY KEY, body TEXT NOT NULL);
"""
# Columns added after the first release: a store file from before gets them on open (several
# node processes may open it at once: a column another one just added is no error).
_ADDED_COLUMNS = {
    "open_generation": "INTEGER NOT NULL DEFAULT 0",
    "change_number_ceiling": "INTEGER NOT NULL DEFAULT 0",
}
# An epoch recorded before its cause was kept reads it as unknown (NULL); `created` was
# always its time.
_ADDED_HISTORY_COLUMNS = {
    "kept_through": "INTEGER",
    "cause": "TEXT",
    "mount_dial": "TEXT",
    "lost_logs": "INTEGER",
}
_ACTIVE_COLUMNS = "node, epoch, last_log_generated, updated, open_generation, change_number_ceiling"
# A mailbox with the move that claimed it and that move's request, in one statement (one
# snapshot); without the move store's tables (no mover ever ran here), the mailbox alone.
_ENTRY = "SELECT database, NULL, NULL FROM mailbox_directory WHERE mailbox=?"
_ENTRY_WITH_MOVE = (
    "SELECT d.database, c.move_id, r.body FROM mailbox_directory d"
    f" LEFT JOIN {MOVE_CLAIMS_TABLE} c ON c.mailbox = d.mailbox"
    f" LEFT JOIN {MOVE_REQUESTS_TABLE} r ON r.id = c.move_id WHERE d.mailbox=?"
)


class EmbeddedClusterStore(ClusterStore):
    """SQLite, WAL, fsync on commit; writes are compare-and-set inside IMMEDIATE txns."""

    def __init__(self, path: Path, *, clock: Clock | None = None) -> None:
        self.path = path
        # Leases expire by this machine's monotonic clock, which every process on it shares
        # and which no one sets; a lease from another boot (its clock began again) is over.
        # The records' stamps are its wall time.  (Tests inject a ManualClock.)
        self._clock: Clock = clock or SystemClock()
        self._leases = LeaseClock(self._clock.monotonic)
        self._conn = open_store_file(path, _SCHEMA)
        self._lock = threading.Lock()
        self._pool = ThreadPoolExecutor(_POOL_SIZE, thread_name_prefix="cluster-store")
        self._move_tables = False  # seen the move store's tables (never dropped once made)
        # Node processes open a new file at the same moment: the check and the ALTER run in
        # one write transaction, so only one of them adds a column.
        with self._lock, immediate(self._conn):
            have = {row[1] for row in self._conn.execute("PRAGMA table_info(active_copy)")}
            for column, kind in _ADDED_COLUMNS.items():
                if column not in have:
                    self._conn.execute(f"ALTER TABLE active_copy ADD COLUMN {column} {kind}")
            have = {row[1] for row in self._conn.execute("PRAGMA table_info(stream_history)")}
            for column, kind in _ADDED_HISTORY_COLUMNS.items():
                if column not in have:
                    self._conn.execute(f"ALTER TABLE stream_history ADD COLUMN {column} {kind}")

    async def _run(self, fn: Callable[[Unpack[Ts]], T], *args: *Ts) -> T:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._pool, lambda: self._locked(fn, *args))

    def _locked(self, fn: Callable[[Unpack[Ts]], T], *args: *Ts) -> T:
        with self._lock:
            return fn(*args)

    def _now(self) -> str:
        return self._clock.now().isoformat()

    def _active(self, database: str) -> ActiveRecord | None:
        row = self._conn.execute(
            f"SELECT {_ACTIVE_COLUMNS} FROM active_copy WHERE database=?", (database,)
        ).fetchone()
        if row is None:
            return None
        node, epoch, generated, updated, open_generation, ceiling = row
        return ActiveRecord(
            database,
            node,
            epoch,
            generated,
            datetime.fromisoformat(updated),
            open_generation=open_generation,
            change_number_ceiling=ceiling,
        )

    async def active(self, database: str) -> ActiveRecord | None:
        return await self._run(self._active, database)

    def _set_active(self, new: SetActive) -> ActiveRecord | None:
        database = new.database
        with immediate(self._conn):
            current = self._active(database)
            if not new.follows(current):
                return None
            held = self._lease(database)
            if held is not None and held.node != new.node:
                raise LeaseHeld(database, held.node, held.expires_in)
            pause = self._failover_pause() if new.automatic else None
            if pause is not None:
                raise FailoverPaused(pause)
            ceiling = current.change_number_ceiling if current else 0
            now = self._now()
            self._conn.execute(
                f"INSERT OR REPLACE INTO active_copy(database, {_ACTIVE_COLUMNS})"
                " VALUES (?, ?, ?, ?, ?, 0, ?)",
                (database, new.node, new.epoch, new.last_log_generated(current), now, ceiling),
            )
            self._conn.execute(
                "INSERT OR REPLACE INTO stream_history(database, epoch, node,"
                " start_generation, created, kept_through, cause, mount_dial, lost_logs)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    database,
                    new.epoch,
                    new.node,
                    new.recorded_start,
                    now,
                    new.kept_through,
                    new.cause,
                    new.mount_dial,
                    new.lost_logs,
                ),
            )
        return self._active(database)

    async def _activate(self, new: SetActive) -> ActiveRecord | None:
        return await self._run(self._set_active, new)

    def _lease(self, database: str) -> LeaseRecord | None:
        live = self._leases.live(
            self._conn.execute(
                "SELECT node, epoch, expires, boot FROM active_lease WHERE database=?", (database,)
            ).fetchone()
        )
        return LeaseRecord(database, *live) if live else None

    async def lease(self, database: str) -> LeaseRecord | None:
        return await self._run(self._lease, database)

    def _renew_lease(self, database: str, node: str, epoch: int, ttl: float) -> bool:
        with immediate(self._conn):
            current = self._active(database)
            held = self._lease(database)
            if (
                current is None
                or (current.node, current.epoch) != (node, epoch)
                or (held is not None and held.node != node)
            ):
                return False
            self._conn.execute(
                "INSERT OR REPLACE INTO active_lease VALUES (?, ?, ?, ?, ?)",
                (database, node, epoch, self._leases.expires(ttl), self._leases.boot),
            )
            return True

    async def renew_lease(self, database: str, node: str, epoch: int, ttl: float) -> bool:
        return await self._run(self._renew_lease, database, node, epoch, ttl)

    def _release_lease(self, database: str, node: str, epoch: int) -> None:
        self._conn.execute(
            "DELETE FROM active_lease WHERE database=? AND node=? AND epoch=?",
            (database, node, epoch),
        )

    async def release_lease(self, database: str, node: str, epoch: int) -> None:
        await self._run(self._release_lease, database, node, epoch)

    def _history(self, database: str) -> list[EpochRecord]:
        rows = self._conn.execute(
            "SELECT epoch, node, start_generation, kept_through, created, cause, mount_dial,"
            " lost_logs FROM stream_history WHERE database=? ORDER BY epoch",
            (database,),
        ).fetchall()
        return [
            EpochRecord(
                database,
                epoch,
                node,
                start,
                kept,
                began=datetime.fromisoformat(created),
                cause=known_member(ActivationCause, cause),
                mount_dial=known_member(AutoDatabaseMountDial, dial),
                lost_logs=lost,
            )
            for epoch, node, start, kept, created, cause, dial, lost in rows
        ]

    async def history(self, database: str) -> list[EpochRecord]:
        return await self._run(self._history, database)

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

    def _publish_open(
        self, database: str, node: str, epoch: int, generation: int, ceiling: int
    ) -> bool:
        cur = self._conn.execute(
            "UPDATE active_copy SET open_generation=max(open_generation, ?),"
            " change_number_ceiling=max(change_number_ceiling, ?), updated=?"
            " WHERE database=? AND node=? AND epoch=?",
            (generation, ceiling, self._now(), database, node, epoch),
        )
        return cur.rowcount == 1

    async def publish_open_generation(
        self, database: str, node: str, epoch: int, generation: int, change_number_ceiling: int
    ) -> bool:
        return await self._run(
            self._publish_open, database, node, epoch, generation, change_number_ceiling
        )

    def _failover_pause(self) -> FailoverPause | None:
        row = self._conn.execute(
            "SELECT since, paused_by, reason FROM failover_pause WHERE id=1"
        ).fetchone()
        if row is None:
            return None
        return FailoverPause(since=datetime.fromisoformat(row[0]), by=row[1], reason=row[2])

    async def failover_pause(self) -> FailoverPause | None:
        return await self._run(self._failover_pause)

    def _pause_failover(self, pause: FailoverPause) -> bool:
        cur = self._conn.execute(
            "INSERT OR IGNORE INTO failover_pause VALUES (1, ?, ?, ?)",
            (pause.since.isoformat(), pause.by, pause.reason),
        )
        return cur.rowcount == 1

    async def pause_failover(self, pause: FailoverPause) -> bool:
        return await self._run(self._pause_failover, pause)

    def _resume_failover(self) -> FailoverPause | None:
        with immediate(self._conn):
            pause = self._failover_pause()
            self._conn.execute("DELETE FROM failover_pause")
            return pause

    async def resume_failover(self) -> FailoverPause | None:
        return await self._run(self._resume_failover)

    def _mailbox_database(self, mailbox: str) -> str | None:
        row = self._conn.execute(
            "SELECT database FROM mailbox_directory WHERE mailbox=?", (mailbox,)
        ).fetchone()
        return row[0] if row else None

    async def mailbox_database(self, mailbox: str) -> str | None:
        return await self._run(self._mailbox_database, mailbox)

    def _set_mailbox(self, mailbox: str, database: str, expected: str | None) -> bool:
        with immediate(self._conn):
            if self._mailbox_database(mailbox) != expected:
                return False
            self._conn.execute(
                "INSERT OR REPLACE INTO mailbox_directory VALUES (?, ?, ?)",
                (mailbox, database, self._now()),
            )
            return True

    async def set_mailbox_database(
        self, mailbox: str, database: str, *, expected: str | None
    ) -> bool:
        return await self._run(self._set_mailbox, mailbox, database, expected)

    async def mailboxes(self) -> dict[str, str]:
        rows = await self._run(
            lambda: self._conn.execute("SELECT mailbox, database FROM mailbox_directory").fetchall()
        )
        return dict(rows)

    def _mailbox_entry(self, mailbox: str) -> DirectoryEntry | None:
        if not self._move_tables:
            (found,) = self._conn.execute(
                "SELECT count(*) FROM sqlite_master WHERE type='table' AND name IN (?, ?)",
                (MOVE_CLAIMS_TABLE, MOVE_REQUESTS_TABLE),
            ).fetchone()
            self._move_tables = found == 2
        sql = _ENTRY_WITH_MOVE if self._move_tables else _ENTRY
        row = self._conn.execute(sql, (mailbox,)).fetchone()
        return DirectoryEntry(mailbox, row[0], move_hold(row[1], row[2])) if row else None

    async def mailbox_entry(self, mailbox: str) -> DirectoryEntry | None:
        return await self._run(self._mailbox_entry, mailbox)

    def _redelivery(self, database: str) -> RedeliveryRecord | None:
        row = self._conn.execute(
            "SELECT body FROM dumpster_redelivery WHERE database=?", (database,)
        ).fetchone()
        return RedeliveryRecord.from_json(database, row[0]) if row else None

    async def redelivery(self, database: str) -> RedeliveryRecord | None:
        return await self._run(self._redelivery, database)

    def _change_redelivery_now(
        self, database: str, change: RedeliveryChange
    ) -> RedeliveryRecord | None:
        with immediate(self._conn):
            current = self._redelivery(database)
            new = change(current)
            if new is not None and new != current:
                self._conn.execute(
                    "INSERT OR REPLACE INTO dumpster_redelivery VALUES (?, ?)",
                    (database, new.to_json()),
                )
            return new

    async def _change_redelivery(
        self, database: str, change: RedeliveryChange
    ) -> RedeliveryRecord | None:
        return await self._run(self._change_redelivery_now, database, change)

    def close(self) -> None:
        with self._lock:
            self._conn.close()
        self._pool.shutdown(wait=False)
