"""The move store in the cluster store's SQLite file (the embedded engine: one host).

Its own tables beside the cluster store's, its own connection; WAL, fsync on commit (a
progress save within a step may skip the fsync: `save(durable=False)`).  Every decision is
taken inside one IMMEDIATE transaction, so node processes, workers and `mrs` commands of the
host may use the file at once.  Move leases expire by this machine's monotonic clock with its
boot, as the active copy's lease in the same file does.

Group commit: the writes a worker's moves ask for while a commit is under way wait in a
queue and go in the next one together, each in a savepoint of its own.  A write that raises
(a save refused with LeaseLost) is rolled back to its savepoint, alone, and its caller gets
the error; the others commit.  The group is committed with fsync if any of its writes asked
for it, and no caller hears of its write before that commit returned: each write is as
atomic and as durable as in a transaction of its own.  (Eight moves at once on one worker
made 8 fsync'd commits in a row, each a thread hop that waited for the event loop to let go
of the GIL: a save took 6-11 ms, half of a one-item move's time; bench/README.md.)
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import sqlite3
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from datetime import datetime
from pathlib import Path
from typing import Any, TypeVar, TypeVarTuple, Unpack

from dag_common.cluster_store.engine import LeaseClock, immediate, open_store_file
from mrs_client.errors import MoveRejected
from mrs_client.move_store.interface import (
    ANSWERS_KEPT,
    AnswerRow,
    BatchExists,
    BatchRecord,
    LeaseLost,
    MoveHolder,
    MoveLease,
    MoveRecord,
    MoveStore,
)
from mrs_client.policy import FINISHED, MoveState, StopRequest

T = TypeVar("T")
Ts = TypeVarTuple("Ts")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS move_requests(
  id TEXT PRIMARY KEY, state TEXT NOT NULL, batch TEXT, created TEXT NOT NULL,
  body TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS move_requests_by_state ON move_requests(state, created);
CREATE INDEX IF NOT EXISTS move_requests_by_batch ON move_requests(batch, created);
CREATE TABLE IF NOT EXISTS move_mailboxes(
  mailbox TEXT PRIMARY KEY, move_id TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS move_leases(
  move_id TEXT PRIMARY KEY, worker TEXT NOT NULL, token TEXT NOT NULL,
  expires REAL NOT NULL, boot TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS move_stops(
  move_id TEXT PRIMARY KEY, action TEXT NOT NULL, requested TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS move_answers(
  move_id TEXT NOT NULL, body TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS move_answers_by_move ON move_answers(move_id);
CREATE TABLE IF NOT EXISTS move_batches(
  name TEXT PRIMARY KEY, created TEXT NOT NULL, body TEXT NOT NULL);
"""


GROUP_MOST = 64  # writes in one group commit, at most


@dataclass(slots=True)
class _Write:
    """A write waiting for its group commit."""

    call: Callable[[], Any]
    durable: bool
    done: asyncio.Future[Any]


def _settle(done: asyncio.Future[Any], outcome: tuple[bool, Any]) -> None:
    if done.cancelled():
        return
    ok, value = outcome
    if ok:
        done.set_result(value)
    else:
        done.set_exception(value)


class EmbeddedMoveStore(MoveStore):
    """SQLite, WAL, fsync on commit; decisions inside IMMEDIATE transactions."""

    def __init__(self, path: Path, *, monotonic: Callable[[], float] = time.monotonic) -> None:
        self.path = path
        self._leases = LeaseClock(monotonic)
        self._conn = open_store_file(path, _SCHEMA)
        self._lock = threading.Lock()
        self._durable = True
        # Writes waiting for the next group commit, and whether a thread is committing
        # (both under `_queue_lock`, which is never held while the file is used).
        self._queue: list[_Write] = []
        self._queue_lock = threading.Lock()
        self._committing = False
        self.commits = 0  # group commits made: a count for tests and the curious
        # Calls sent to the store's thread and not answered yet: a test driving a manual
        # clock moves it only while none is (the mover is waiting on the clock, not on us).
        self.in_flight = 0
        # Threads of its own, as the cluster store's: a mover's other blocking work in the
        # loop's default pool never queues a lease renewal or a step's save behind it (one
        # committing the queued writes, one for a read beside it).
        self._pool = ThreadPoolExecutor(2, thread_name_prefix="move-store")

    async def _run(self, fn: Callable[[Unpack[Ts]], T], *args: *Ts) -> T:
        self.in_flight += 1
        try:
            loop = asyncio.get_running_loop()
            return await loop.run_in_executor(self._pool, lambda: self._locked(fn, *args))
        finally:
            self.in_flight -= 1

    def _locked(self, fn: Callable[[Unpack[Ts]], T], *args: *Ts) -> T:
        with self._lock:
            return fn(*args)

    def _transaction(self, fn: Callable[[Unpack[Ts]], T], *args: *Ts) -> T:
        """`fn` inside one IMMEDIATE transaction, fsync'd, under the lock; rolled back on
        any error."""
        with self._lock:
            self._synchronous(durable=True)
            with immediate(self._conn):
                return fn(*args)

    def _synchronous(self, *, durable: bool) -> None:
        """The next commit fsync'd or not (under the lock)."""
        if durable != self._durable:
            self._conn.execute(f"PRAGMA synchronous={'FULL' if durable else 'NORMAL'}")
            self._durable = durable

    async def _write(self, fn: Callable[[Unpack[Ts]], T], *args: *Ts, durable: bool = True) -> T:
        """`fn` in the next group commit (module docstring); its result or its error."""
        self.in_flight += 1
        try:
            loop = asyncio.get_running_loop()
            job = _Write(functools.partial(fn, *args), durable, loop.create_future())
            # Its error is the caller's; a caller cancelled meanwhile leaves it unread.
            job.done.add_done_callback(lambda f: f.cancelled() or f.exception())
            with self._queue_lock:
                self._queue.append(job)
                start, self._committing = not self._committing, True
            if start:
                loop.run_in_executor(self._pool, self._commit_queued)
            # A caller cancelled meanwhile does not undo the write, as a transaction run in
            # a thread was not undone: the group commits it all the same.
            return await asyncio.shield(job.done)
        finally:
            self.in_flight -= 1

    def _commit_queued(self) -> None:
        """In a thread: commit the queued writes, a group at a time, until none is left."""
        try:
            while True:
                with self._queue_lock:
                    group, self._queue = self._queue[:GROUP_MOST], self._queue[GROUP_MOST:]
                    if not group:
                        self._committing = False
                        return
                outcomes = self._commit_group(group)
                for job, outcome in zip(group, outcomes, strict=True):
                    with contextlib.suppress(RuntimeError):  # its loop closed: nobody waits
                        job.done.get_loop().call_soon_threadsafe(_settle, job.done, outcome)
        except BaseException:  # not one of a write's errors: the next write commits again
            with self._queue_lock:
                self._committing = False
            raise

    def _commit_group(self, group: list[_Write]) -> list[tuple[bool, Any]]:
        """One IMMEDIATE transaction for `group`, each write in a savepoint (a write alone
        needs none): per write (True, its result) or (False, its error).  Should the
        transaction itself fail (BEGIN, a savepoint's rollback, COMMIT, a write alone),
        every write of the group gets that error: none was committed."""
        outcomes: list[tuple[bool, Any]] = []
        try:
            with self._lock:
                self._synchronous(durable=any(job.durable for job in group))
                with immediate(self._conn):
                    if len(group) == 1:  # alone: its error rolls the transaction back
                        outcomes.append((True, group[0].call()))
                    else:
                        for job in group:
                            self._conn.execute("SAVEPOINT move_write")
                            try:
                                outcomes.append((True, job.call()))
                            except Exception as exc:
                                self._conn.execute("ROLLBACK TO move_write")
                                outcomes.append((False, exc))
                            self._conn.execute("RELEASE move_write")
                self.commits += 1
        except Exception as exc:
            return [(False, exc)] * len(group)
        return outcomes

    def call(self, fn: Callable[..., Any], *args: Any) -> Any:
        """One of the engine's own reads or writes (`_get`, `_save`…) on this thread, in a
        transaction: for a test that reads the store between two turns of a manual clock."""
        return self._transaction(fn, *args)

    # ---- requests ---------------------------------------------------------------------

    def _create(self, records: list[MoveRecord], batch: BatchRecord | None) -> None:
        if (
            batch is not None
            and self._conn.execute(
                "SELECT 1 FROM move_batches WHERE name=?", (batch.name,)
            ).fetchone()
        ):
            raise BatchExists.named(batch.name)
        taken = []
        for record in records:
            for mailbox in record.mailboxes:
                row = self._conn.execute(
                    "SELECT move_id FROM move_mailboxes WHERE mailbox=?", (mailbox,)
                ).fetchone()
                if row:
                    taken.append(f"mailbox {mailbox!r} is already being moved (request {row[0]})")
        if taken:
            raise MoveRejected("; ".join(taken))
        for record in records:
            self._conn.executemany(
                "INSERT INTO move_mailboxes VALUES (?, ?)",
                [(mailbox, record.id) for mailbox in record.mailboxes],
            )
            self._conn.execute(
                "INSERT INTO move_requests VALUES (?, ?, ?, ?, ?)",
                (
                    record.id,
                    str(record.state),
                    record.batch,
                    record.created.isoformat(),
                    record.to_json(),
                ),
            )
        if batch is not None:
            self._conn.execute(
                "INSERT INTO move_batches VALUES (?, ?, ?)",
                (batch.name, batch.created.isoformat(), batch.to_json()),
            )

    async def create(self, records: list[MoveRecord], batch: BatchRecord | None = None) -> None:
        try:
            await self._write(self._create, records, batch)
        except sqlite3.IntegrityError as exc:  # the same mailbox twice in `records`
            raise MoveRejected(f"a mailbox is named twice: {exc}") from None

    def _get(self, move_id: str) -> MoveRecord | None:
        row = self._conn.execute("SELECT body FROM move_requests WHERE id=?", (move_id,)).fetchone()
        return MoveRecord.from_json(row[0]) if row else None

    async def get(self, move_id: str) -> MoveRecord | None:
        return await self._run(self._get, move_id)

    def _list(self, states: list[str] | None, batch: str | None) -> list[MoveRecord]:
        where, args = [], []
        if states is not None:
            where.append(f"state IN ({','.join('?' * len(states))})")
            args.extend(states)
        if batch is not None:
            where.append("batch=?")
            args.append(batch)
        sql = "SELECT body FROM move_requests"
        if where:
            sql += " WHERE " + " AND ".join(where)
        rows = self._conn.execute(sql + " ORDER BY created, id", args).fetchall()
        return [MoveRecord.from_json(r[0]) for r in rows]

    async def list(
        self, *, states: Iterable[MoveState] | None = None, batch: str | None = None
    ) -> list[MoveRecord]:
        wanted = None if states is None else [str(s) for s in states]
        return await self._run(self._list, wanted, batch)

    def _live(self, move_id: str) -> tuple[str, str, float] | None:
        """(worker, token, seconds left) of the move's live lease, or None."""
        return self._leases.live(
            self._conn.execute(
                "SELECT worker, token, expires, boot FROM move_leases WHERE move_id=?", (move_id,)
            ).fetchone()
        )

    def _save(self, record: MoveRecord, lease: MoveLease) -> None:
        live = self._live(record.id)
        if live is None or (live[0], live[1]) != (lease.worker, lease.token):
            raise LeaseLost.saving(record.id, lease.worker, live[0] if live else None)
        self._conn.execute(
            "UPDATE move_requests SET body=?, state=? WHERE id=?",
            (record.to_json(), str(record.state), record.id),
        )
        if record.state in FINISHED:
            self._conn.execute("DELETE FROM move_mailboxes WHERE move_id=?", (record.id,))
            self._conn.execute("DELETE FROM move_stops WHERE move_id=?", (record.id,))
        elif record.state is MoveState.SUSPENDED:
            self._conn.execute(
                "DELETE FROM move_stops WHERE move_id=? AND action=?",
                (record.id, StopRequest.SUSPEND.value),
            )

    async def save(
        self, record: MoveRecord, now: datetime, *, lease: MoveLease, durable: bool = True
    ) -> MoveRecord:
        record = replace(record, updated=now)
        await self._write(self._save, record, lease, durable=durable)
        return record

    def _save_and_look(
        self, record: MoveRecord, lease: MoveLease, answers: Sequence[AnswerRow]
    ) -> StopRequest | None:
        for row in answers:
            self._add_answer(record.id, row)
        self._save(record, lease)  # LeaseLost: the transaction, answers and all, rolls back
        return self._stop_requested(record.id)

    async def save_and_look(
        self,
        record: MoveRecord,
        now: datetime,
        *,
        lease: MoveLease,
        durable: bool = True,
        answers: Sequence[AnswerRow] = (),
    ) -> tuple[MoveRecord, StopRequest | None]:
        """One transaction (one commit) for the three (`MoveStore.save_and_look`)."""
        record = replace(record, updated=now)
        stop = await self._write(self._save_and_look, record, lease, answers, durable=durable)
        return record, stop

    # ---- leases -----------------------------------------------------------------------

    def _claim(self, move_id: str, worker: str, ttl: float) -> MoveLease | None:
        if self._live(move_id) is not None:
            return None
        lease = MoveLease(move_id, worker, uuid.uuid4().hex)
        self._conn.execute(
            "INSERT OR REPLACE INTO move_leases VALUES (?, ?, ?, ?, ?)",
            (move_id, worker, lease.token, self._leases.expires(ttl), self._leases.boot),
        )
        return lease

    async def claim(self, move_id: str, worker: str, ttl: float) -> MoveLease | None:
        return await self._write(self._claim, move_id, worker, ttl)

    def _renew(self, lease: MoveLease, ttl: float) -> bool:
        live = self._live(lease.move_id)
        if live is None or (live[0], live[1]) != (lease.worker, lease.token):
            return False
        self._conn.execute(
            "UPDATE move_leases SET expires=? WHERE move_id=?",
            (self._leases.expires(ttl), lease.move_id),
        )
        return True

    async def renew(self, lease: MoveLease, ttl: float) -> bool:
        return await self._write(self._renew, lease, ttl)

    def _release(self, lease: MoveLease) -> None:
        self._conn.execute(
            "DELETE FROM move_leases WHERE move_id=? AND worker=? AND token=?",
            (lease.move_id, lease.worker, lease.token),
        )

    async def release(self, lease: MoveLease) -> None:
        await self._write(self._release, lease)

    def _holder(self, move_id: str) -> MoveHolder | None:
        live = self._live(move_id)
        return MoveHolder(live[0], live[2]) if live else None

    async def holder(self, move_id: str) -> MoveHolder | None:
        return await self._run(self._holder, move_id)

    def _holders(self) -> dict[str, MoveHolder]:
        ids = [r[0] for r in self._conn.execute("SELECT move_id FROM move_leases")]
        found = {i: self._holder(i) for i in ids}
        return {i: h for i, h in found.items() if h is not None}

    async def holders(self) -> dict[str, MoveHolder]:
        return await self._run(self._holders)

    # ---- stop requests ------------------------------------------------------------------

    def _request_stop(self, move_id: str, action: StopRequest, now: datetime) -> None:
        self._conn.execute(
            "INSERT INTO move_stops VALUES (?, ?, ?) ON CONFLICT(move_id) DO UPDATE SET"
            " action=excluded.action, requested=excluded.requested"
            " WHERE move_stops.action != ?",
            (move_id, action.value, now.isoformat(), StopRequest.CANCEL.value),
        )

    async def request_stop(self, move_id: str, action: StopRequest, now: datetime) -> None:
        await self._write(self._request_stop, move_id, action, now)

    def _stop_requested(self, move_id: str) -> StopRequest | None:
        row = self._conn.execute(
            "SELECT action FROM move_stops WHERE move_id=?", (move_id,)
        ).fetchone()
        return StopRequest(row[0]) if row else None

    async def stop_requested(self, move_id: str) -> StopRequest | None:
        return await self._run(self._stop_requested, move_id)

    def _clear_stop(self, move_id: str) -> None:
        self._conn.execute("DELETE FROM move_stops WHERE move_id=?", (move_id,))

    async def clear_stop(self, move_id: str) -> None:
        await self._write(self._clear_stop, move_id)

    # ---- guarantee answers ----------------------------------------------------------------

    def _add_answer(self, move_id: str, row: AnswerRow) -> None:
        self._conn.execute(
            "INSERT INTO move_answers VALUES (?, ?)", (move_id, row.model_dump_json())
        )
        self._conn.execute(
            "DELETE FROM move_answers WHERE move_id=? AND rowid NOT IN (SELECT rowid FROM"
            " move_answers WHERE move_id=? ORDER BY rowid DESC LIMIT ?)",
            (move_id, move_id, ANSWERS_KEPT),
        )

    async def keep_answer(self, move_id: str, row: AnswerRow) -> None:
        await self._write(self._add_answer, move_id, row)

    def _answers(self, move_id: str) -> list[AnswerRow]:
        rows = self._conn.execute(
            "SELECT body FROM move_answers WHERE move_id=? ORDER BY rowid", (move_id,)
        ).fetchall()
        return [AnswerRow.model_validate_json(r[0]) for r in rows]

    async def answers(self, move_id: str) -> list[AnswerRow]:
        return await self._run(self._answers, move_id)

    # ---- batches ------------------------------------------------------------------------

    def _batch(self, name: str) -> BatchRecord | None:
        row = self._conn.execute("SELECT body FROM move_batches WHERE name=?", (name,)).fetchone()
        return BatchRecord.from_json(row[0]) if row else None

    async def batch(self, name: str) -> BatchRecord | None:
        return await self._run(self._batch, name)

    def _batches(self) -> list[BatchRecord]:
        rows = self._conn.execute("SELECT body FROM move_batches ORDER BY created, name")
        return [BatchRecord.from_json(r[0]) for r in rows.fetchall()]

    async def batches(self) -> list[BatchRecord]:
        return await self._run(self._batches)

    def _save_batch(self, batch: BatchRecord) -> None:
        self._conn.execute(
            "UPDATE move_batches SET body=? WHERE name=?", (batch.to_json(), batch.name)
        )

    async def save_batch(self, batch: BatchRecord) -> None:
        await self._write(self._save_batch, batch)

    async def aclose(self) -> None:
        with self._lock:
            self._conn.close()
        self._pool.shutdown(wait=False)
