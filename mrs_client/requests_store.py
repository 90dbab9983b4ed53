"""Move requests on disk (SQLite, fsync on commit): they survive a crash of the client.

A request is updated after every step and every batch of a sync, so `mrs resume` continues
from the last thing done.  A mailbox can be in one unfinished move only: the claim is a row
in `move_mailboxes`, taken in the same transaction as the request, released on completion
or cancellation.

An operator's request to stop a move (`mrs suspend`, `mrs cancel`) is a row in `move_stops`,
apart from the record: the running mover saves its whole record at every save point and
would overwrite a state another process wrote into it.  The mover reads the row at its safe
points (`request_stop`, `stop_requested`); a suspend request goes in the transaction that
saves the move Suspended, a cancel request in the one that saves it Cancelled (or Completed).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import sqlite3
import threading
import uuid
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field, replace
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from mrs_client.errors import MoveBusy, MoveRejected
from mrs_client.item_limits import SkippedItem
from mrs_client.policy import FINISHED, GuaranteeAnswer, MoveState, MoveStep, StopRequest

_SCHEMA = """
CREATE TABLE IF NOT EXISTS moves(
  id TEXT PRIMARY KEY, body TEXT NOT NULL, created TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS move_mailboxes(
  mailbox TEXT PRIMARY KEY, move_id TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS answers(
  move_id TEXT NOT NULL, time TEXT NOT NULL, step INTEGER NOT NULL, method TEXT NOT NULL,
  status TEXT NOT NULL, retry_after REAL NOT NULL, reason TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS answers_by_move ON answers(move_id, time);
CREATE TABLE IF NOT EXISTS move_stops(
  move_id TEXT PRIMARY KEY, action TEXT NOT NULL, requested TEXT NOT NULL);
"""
# Columns added since the first version; a store made before gets them on open.
_ANSWER_COLUMNS = {
    "epoch": "ALTER TABLE answers ADD COLUMN epoch INTEGER NOT NULL DEFAULT 0",
    "lost": "ALTER TABLE answers ADD COLUMN lost INTEGER NOT NULL DEFAULT 0",
    "expected_in": "ALTER TABLE answers ADD COLUMN expected_in REAL",
}


@dataclass(frozen=True)
class MoveRecord:
    """One move request and how far it got."""

    id: str
    mailboxes: tuple[str, ...]
    source_db: str
    target_db: str
    created: datetime
    updated: datetime
    state: MoveState = MoveState.QUEUED
    step: MoveStep = MoveStep.RECORD_REQUEST  # the step in progress (or failed)
    steps_done: int = 0  # the last step completed
    stalled_since: datetime | None = None
    stall_reason: str | None = None
    time_stalled: float = 0.0  # seconds, over the move's life
    failure: str | None = None
    items_copied: int = 0
    bytes_copied: int = 0
    # What a sync pass knows it has to copy: the items copied so far and the live items of the
    # pass's source listings (0: not known yet); the percent `mrs move` shows is of this.
    items_total: int = 0
    sync_cursor: dict[str, int] = field(default_factory=dict)  # mailbox -> change number
    snapshot_change: dict[str, int] = field(default_factory=dict)
    incremental_passes: int = 0
    # The flush points of steps 6 and 9: a generation, and with an offset the record at that
    # byte of it (flushed inside the open log, every copy in block mode: policy.flush_point).
    final_generation: int | None = None
    final_offset: int | None = None
    unlock_generation: int | None = None  # the generation holding the target's unlock
    unlock_offset: int | None = None
    flush_started: datetime | None = None
    completed: datetime | None = None
    # Stream incarnations (epochs; 0: not seen yet).  A cursor is only as good as the epochs
    # it was read and written under: the source's it counts in, the target's that holds what
    # it covers.  Any answer naming another epoch makes the move reconcile first.
    target_epoch: int = 0
    source_epoch: int = 0
    flush_epoch: int = 0  # the target epoch step 6's flush was Satisfied for
    verified_epoch: int = 0  # the target epoch in which the digests were found equal
    unlock_epoch: int = 0  # the target epoch that acknowledged every unlock of step 9
    reconcile_pending: bool = False  # saved before a reconcile, cleared once it is done
    reconcile_reason: str | None = None
    target_in_doubt: bool = False  # the reconcile due must also flush the target again
    reconciles: int = 0
    verify_rounds: int = 0  # verifications that found a difference
    items_repaired: int = 0  # items written again or removed by reconciles
    # Exchange's -LargeItemLimit and -BadItemLimit: how many items of each kind the move may
    # skip (item_limits), and those it skipped.  In the record, not a table of their own, so
    # that a skip is saved in the same transaction as the cursor that passes it.
    large_item_limit: int = 0
    bad_item_limit: int = 0
    skipped: tuple[SkippedItem, ...] = ()

    def to_json(self) -> str:
        data = asdict(self)
        for key, value in data.items():
            if isinstance(value, datetime):
                data[key] = value.isoformat()
        data["state"] = str(self.state)
        data["step"] = int(self.step)
        data["mailboxes"] = list(self.mailboxes)
        data["skipped"] = [s.as_dict() for s in self.skipped]
        return json.dumps(data)

    @classmethod
    def from_json(cls, text: str) -> MoveRecord:
        data = json.loads(text)
        for key in ("created", "updated", "stalled_since", "flush_started", "completed"):
            if data.get(key):
                data[key] = datetime.fromisoformat(data[key])
        data["state"] = MoveState(data["state"])
        data["step"] = MoveStep(data["step"])
        data["mailboxes"] = tuple(data["mailboxes"])
        # a record from before item limits has none (and loads with 0 and 0)
        data["skipped"] = tuple(SkippedItem.from_dict(s) for s in data.get("skipped", ()))
        return cls(**data)

    def as_dict(self) -> dict[str, Any]:
        return json.loads(self.to_json())


class MoveRequestStore:
    """The move requests of this client."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self._locks = path.with_name(path.name + ".running")
        self._conn = sqlite3.connect(
            path, isolation_level=None, check_same_thread=False, timeout=10.0
        )
        self._lock = threading.Lock()
        with self._lock:
            self._conn.execute("PRAGMA journal_mode=WAL")
            self._conn.execute("PRAGMA synchronous=FULL")
            self._durable = True
            self._conn.executescript(_SCHEMA)
            have = {row[1] for row in self._conn.execute("PRAGMA table_info(answers)")}
            for column, ddl in _ANSWER_COLUMNS.items():
                if column not in have:
                    self._conn.execute(ddl)

    def _synchronous(self, durable: bool) -> None:
        """Commits wait for the disk (FULL) or not (NORMAL: WAL mode keeps them ordered and
        safe from a crash of the process; the next FULL commit syncs them).  Under the lock."""
        if durable != self._durable:
            self._conn.execute(f"PRAGMA synchronous={'FULL' if durable else 'NORMAL'}")
            self._durable = durable

    def close(self) -> None:
        self._conn.close()

    def create(
        self,
        *,
        mailboxes: tuple[str, ...],
        source_db: str,
        target_db: str,
        now: datetime,
        large_item_limit: int = 0,
        bad_item_limit: int = 0,
    ) -> MoveRecord:
        """Record a new request, claiming its mailboxes; MoveRejected if one is claimed."""
        record = MoveRecord(
            id=uuid.uuid4().hex[:12],
            mailboxes=mailboxes,
            source_db=source_db,
            target_db=target_db,
            created=now,
            updated=now,
            large_item_limit=large_item_limit,
            bad_item_limit=bad_item_limit,
        )
        with self._lock:
            self._synchronous(True)
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                for mailbox in mailboxes:
                    row = self._conn.execute(
                        "SELECT move_id FROM move_mailboxes WHERE mailbox=?", (mailbox,)
                    ).fetchone()
                    if row:
                        raise MoveRejected(
                            f"mailbox {mailbox!r} is already being moved (request {row[0]})"
                        )
                    self._conn.execute(
                        "INSERT INTO move_mailboxes VALUES (?, ?)", (mailbox, record.id)
                    )
                self._conn.execute(
                    "INSERT INTO moves VALUES (?, ?, ?)",
                    (record.id, record.to_json(), now.isoformat()),
                )
                self._conn.execute("COMMIT")
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise
        return record

    def save(self, record: MoveRecord, now: datetime, *, durable: bool = True) -> MoveRecord:
        """Persist `record` and return it as saved.  Durable: on the disk when this returns.
        Not durable (progress within a step): safe from a crash of this process, ordered
        with every other save, and on the disk with the next durable one (one WAL, synced
        in order), but lost to a power cut before that."""
        record = replace(record, updated=now)
        with self._lock:
            self._synchronous(durable)
            self._conn.execute("BEGIN IMMEDIATE")
            self._conn.execute("UPDATE moves SET body=? WHERE id=?", (record.to_json(), record.id))
            if record.state in FINISHED:
                self._conn.execute("DELETE FROM move_mailboxes WHERE move_id=?", (record.id,))
                self._conn.execute("DELETE FROM move_stops WHERE move_id=?", (record.id,))
            elif record.state is MoveState.SUSPENDED:
                self._conn.execute(
                    "DELETE FROM move_stops WHERE move_id=? AND action=?",
                    (record.id, StopRequest.SUSPEND.value),
                )
            self._conn.execute("COMMIT")
        return record

    def request_stop(self, move_id: str, action: StopRequest, now: datetime) -> None:
        """Ask the move to stop (durably); a cancel asked before is not turned into a
        suspend."""
        with self._lock:
            self._conn.execute(
                "INSERT INTO move_stops VALUES (?, ?, ?) ON CONFLICT(move_id) DO UPDATE SET"
                " action=excluded.action, requested=excluded.requested"
                " WHERE move_stops.action != ?",
                (move_id, action.value, now.isoformat(), StopRequest.CANCEL.value),
            )

    def stop_requested(self, move_id: str) -> StopRequest | None:
        """What an operator asked of the move and it has not done yet (None: nothing)."""
        with self._lock:
            row = self._conn.execute(
                "SELECT action FROM move_stops WHERE move_id=?", (move_id,)
            ).fetchone()
        return StopRequest(row[0]) if row else None

    def clear_stop(self, move_id: str) -> None:
        """Forget a request to stop (a resume overrides a suspend nobody carried out)."""
        with self._lock:
            self._conn.execute("DELETE FROM move_stops WHERE move_id=?", (move_id,))

    @contextlib.contextmanager
    def running(self, move_id: str) -> Iterator[None]:
        """Hold the right to run `move_id`; MoveRejected if another process holds it.

        An exclusive flock on a file per move: the kernel drops it when its process ends,
        so a client killed with -9 never leaves a move that cannot be resumed, and two
        clients can never run the same move at once.
        """
        if not re.fullmatch(r"[0-9a-f]{1,32}", move_id):
            raise MoveRejected(f"no move request {move_id!r}")
        self._locks.mkdir(parents=True, exist_ok=True)
        fd = os.open(self._locks / f"{move_id}.lock", os.O_RDWR | os.O_CREAT, 0o600)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "?"
                raise MoveBusy(
                    f"move {move_id} is being run by another mrs process (pid {holder})"
                ) from None
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
            yield
        finally:
            os.close(fd)  # releases the lock

    def get(self, move_id: str) -> MoveRecord | None:
        with self._lock:
            row = self._conn.execute("SELECT body FROM moves WHERE id=?", (move_id,)).fetchone()
        return MoveRecord.from_json(row[0]) if row else None

    def list(self) -> list[MoveRecord]:
        with self._lock:
            rows = self._conn.execute("SELECT body FROM moves ORDER BY created").fetchall()
        return [MoveRecord.from_json(r[0]) for r in rows]

    def add_answer(
        self, move_id: str, *, step: MoveStep, method: str, answer: GuaranteeAnswer, now: datetime
    ) -> None:
        with self._lock:
            self._synchronous(True)
            self._conn.execute(
                "INSERT INTO answers(move_id, time, step, method, status, retry_after, reason,"
                " epoch, lost, expected_in) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    move_id,
                    now.isoformat(),
                    int(step),
                    method,
                    str(answer.status),
                    answer.retry_after.total_seconds(),
                    answer.reason,
                    answer.epoch,
                    int(answer.lost),
                    answer.expected_in.total_seconds() if answer.expected_in else None,
                ),
            )

    def answers(self, move_id: str) -> list[dict[str, Any]]:
        with self._lock:
            rows = self._conn.execute(
                "SELECT time, step, method, status, retry_after, reason, epoch, lost, expected_in"
                " FROM answers WHERE move_id=? ORDER BY rowid",
                (move_id,),
            ).fetchall()
        return [
            {
                "time": t,
                "step": s,
                "method": m,
                "status": st,
                "retry_after": str(timedelta(seconds=r)),
                "reason": reason,
                "epoch": epoch,
                "lost": bool(lost),
                "expected_in": None
                if expected is None
                else str(timedelta(seconds=round(expected))),
                # when the service expected the condition to clear, as of that answer
                "expected_clear_at": None
                if expected is None
                else (datetime.fromisoformat(t) + timedelta(seconds=expected)).isoformat(
                    timespec="seconds"
                ),
            }
            for t, s, m, st, r, reason, epoch, lost, expected in rows
        ]
