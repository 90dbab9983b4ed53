"""A database copy: one SQLite file holding the mailbox store and its database header.

The header lives in the same file and is updated in the same SQLite transaction as the data
it describes, so the file is always consistent at its waypoint: every transaction of every
generation up to the waypoint is in it, and nothing above.  Terms, as the seeds use them:

- committed:  the highest generation the stream had generated when the header was written;
- waypoint:   the highest generation whose transactions are in this file ("Log Required"'s
              upper end); a divergence at or below it means the database itself diverged;
- checkpoint: the lowest generation recovery needs (waypoint + 1: SQLite commits a whole
              generation atomically, so no generation is half in the file, unlike ESE pages).

Writes use `synchronous=FULL` (fsync on commit).  All methods are synchronous and
thread-safe; async callers run `apply` in a worker thread.

The content digest (`dag_common.mailbox_digest`: a sum of one term per live row) is kept by
triggers on the three tables, in the same transaction as the rows: every write of every
copy, through whatever path, keeps it current, and the file stores it beside its header.
`apply` can report it as of each generation it applies, which is what copies compare with
the active's (the DIGEST record of a roll); `recompute_digest` adds the terms up again from
the rows, to find a row changed inside a page that is otherwise valid.
"""

from __future__ import annotations

import sqlite3
import threading
import uuid
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from datetime import datetime
from enum import StrEnum
from pathlib import Path
from typing import Any

from dag_common.mailbox_digest import MODULUS, to_hex
from replication_node.errors import DatabaseError
from replication_node.storage.digest import (
    DIGEST_SCHEMA,
    install_digest,
    recompute_digest,
    stored_digest,
)
from replication_node.storage.ops import (
    CreateFolder,
    CreateMailbox,
    DeleteItem,
    MalformedOperation,
    PutItem,
    SetMailbox,
    decode,
    mailbox_row,
    tombstone_row,
)

FORMAT = 1

_SCHEMA = """
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
  last_backup_time TEXT
);
CREATE TABLE mailboxes(
  mailbox TEXT PRIMARY KEY, display_name TEXT NOT NULL, locked INTEGER NOT NULL,
  soft_deleted INTEGER NOT NULL, change_number INTEGER NOT NULL
) WITHOUT ROWID;
CREATE TABLE folders(
  mailbox TEXT NOT NULL, folder TEXT NOT NULL, change_number INTEGER NOT NULL,
  PRIMARY KEY (mailbox, folder)
) WITHOUT ROWID;
-- items keep a rowid: their bodies make rows large, and SQLite stores large rows of a
-- WITHOUT ROWID table badly (2.7x slower upserts of 1 KB rows, measured in bench/).
CREATE TABLE items(
  mailbox TEXT NOT NULL, item_id TEXT NOT NULL, folder TEXT NOT NULL, subject TEXT NOT NULL,
  body TEXT NOT NULL, size INTEGER NOT NULL, change_number INTEGER NOT NULL,
  deleted INTEGER NOT NULL, commit_time TEXT NOT NULL,
  PRIMARY KEY (mailbox, item_id)
);
CREATE INDEX items_by_change ON items(mailbox, change_number);
"""


class DatabaseState(StrEnum):
    CLEAN_SHUTDOWN = "Clean Shutdown"
    DIRTY_SHUTDOWN = "Dirty Shutdown"


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
    last_backup_generation: int = 0
    last_backup_time: datetime | None = None

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready form, with the seeds' "Log Required / Log Committed" ranges."""
        return {
            "database_signature": str(self.database_signature),
            "log_signature": str(self.log_signature),
            "state": str(self.state),
            "checkpoint": self.checkpoint,
            "waypoint": self.waypoint,
            "committed": self.committed,
            # Always empty: a generation is written whole, so the file is consistent at its
            # waypoint and needs no log to be usable (ESE needs checkpoint..waypoint).
            "log_required": None,
            "log_committed": [0, self.committed],
            "last_change_number": self.last_change_number,
            "last_log_time": self.last_log_time.isoformat() if self.last_log_time else None,
            "last_backup_generation": self.last_backup_generation,
            "last_backup_time": (
                self.last_backup_time.isoformat() if self.last_backup_time else None
            ),
        }


@dataclass(frozen=True, slots=True)
class Transaction:
    """One committed transaction read from the log: where it is, when, and what it does."""

    generation: int
    offset: int
    commit_time: datetime
    ops: list[dict[str, Any]]


def _dt(value: str | None) -> datetime | None:
    return datetime.fromisoformat(value) if value else None


class Database:
    """One database copy's SQLite file."""

    def __init__(self, path: Path, conn: sqlite3.Connection) -> None:
        self.path = path
        self._conn = conn
        self._lock = threading.RLock()
        self._header = self._read_header()
        self._digest = 0  # the running content digest, as the triggers move it
        self._install_digest()

    # ---- the content digest --------------------------------------------------------------

    def _install_digest(self) -> None:
        def term(sign: int, value: int) -> None:
            self._digest = (self._digest + sign * value) % MODULUS

        with self._lock:
            self._digest = install_digest(self._conn, term)

    @property
    def content_digest(self) -> str:
        """The content digest of what the file holds (at its waypoint), kept by triggers."""
        return to_hex(self._digest)

    def recompute_digest(self) -> tuple[str, str]:
        """(stored, recomputed from the rows) in one read snapshot: unequal means a row was
        changed behind SQLite's back (inside a valid page) or a trigger missed a change."""
        with self._lock:
            self._conn.execute("BEGIN")
            try:
                stored = stored_digest(self._conn)
                rows = recompute_digest(self._conn)
            finally:
                self._conn.execute("COMMIT")
        return to_hex(stored or 0), to_hex(rows)

    # ---- lifecycle -----------------------------------------------------------------------

    @staticmethod
    def _connect(path: Path) -> sqlite3.Connection:
        conn = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=FULL")
        conn.row_factory = sqlite3.Row
        return conn

    @classmethod
    def create(
        cls, path: Path, *, database_signature: uuid.UUID, log_signature: uuid.UUID
    ) -> Database:
        """Create a new, empty database file (fails if one exists)."""
        if path.exists():
            raise DatabaseError(f"{path} exists already")
        path.parent.mkdir(parents=True, exist_ok=True)
        conn = cls._connect(path)
        with conn:
            conn.execute("BEGIN")
            conn.executescript("SAVEPOINT s;" + _SCHEMA + DIGEST_SCHEMA + "RELEASE s;")
            conn.execute("INSERT INTO db_digest VALUES (1, ?)", (to_hex(0),))
            conn.execute(
                "INSERT INTO db_header VALUES (1, ?, ?, ?, ?, 1, 0, 0, 0, NULL, 0, NULL)",
                (FORMAT, str(database_signature), str(log_signature), "Dirty Shutdown"),
            )
        return cls(path, conn)

    @classmethod
    def open(cls, path: Path) -> Database:
        """Open an existing database file; DatabaseError if it is missing or not ours."""
        if not path.exists():
            raise DatabaseError(f"database file {path} does not exist")
        try:
            conn = cls._connect(path)
            return cls(path, conn)
        except sqlite3.DatabaseError as exc:
            raise DatabaseError(f"{path} is not a usable database: {exc}") from exc

    def close(self, *, clean: bool = False) -> None:
        with self._lock:
            if clean:
                self._write_header(replace(self._header, state=DatabaseState.CLEAN_SHUTDOWN))
            self._conn.close()

    def _read_header(self) -> DatabaseHeader:
        try:
            row = self._conn.execute("SELECT * FROM db_header WHERE id = 1").fetchone()
        except sqlite3.DatabaseError as exc:
            raise DatabaseError(f"{self.path} has no database header: {exc}") from exc
        if row is None or row["format"] != FORMAT:
            raise DatabaseError(f"{self.path} has no usable database header")
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
        )

    def _write_header(self, header: DatabaseHeader) -> None:
        self._conn.execute(
            "UPDATE db_header SET state=?, checkpoint=?, waypoint=?, committed=?,"
            " last_change_number=?, last_log_time=?, last_backup_generation=?,"
            " last_backup_time=?, database_signature=?, log_signature=? WHERE id = 1",
            (
                str(header.state),
                header.checkpoint,
                header.waypoint,
                header.committed,
                header.last_change_number,
                header.last_log_time.isoformat() if header.last_log_time else None,
                header.last_backup_generation,
                header.last_backup_time.isoformat() if header.last_backup_time else None,
                str(header.database_signature),
                str(header.log_signature),
            ),
        )
        self._header = header

    @property
    def header(self) -> DatabaseHeader:
        return self._header

    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            self._conn.execute("BEGIN IMMEDIATE")
            saved, digest = self._header, self._digest
            try:
                yield self._conn
                if self._digest != digest:
                    self._conn.execute(
                        "UPDATE db_digest SET digest = ? WHERE id = 1", (to_hex(self._digest),)
                    )
            except BaseException:
                self._conn.execute("ROLLBACK")
                self._header, self._digest = saved, digest
                raise
            self._conn.execute("COMMIT")

    # ---- writes --------------------------------------------------------------------------

    def apply(
        self,
        transactions: Iterable[Transaction],
        *,
        waypoint: int,
        committed: int,
        last_log_time: datetime | None,
        state: DatabaseState = DatabaseState.DIRTY_SHUTDOWN,
        digests: dict[int, str] | None = None,
    ) -> DatabaseHeader:
        """Apply whole generations of transactions and advance the header, atomically.
        Given `digests`, it gets the content digest as of each generation that holds a
        transaction (after its last one).

        A malformed operation aborts the whole call (nothing applied): DatabaseError.
        """
        if waypoint < self._header.waypoint:
            raise DatabaseError(f"waypoint would go back from {self._header.waypoint}")
        with self._transaction() as conn:
            last_cn = self._header.last_change_number
            for txn in transactions:
                last_cn = max(last_cn, _apply_ops(conn, txn))
                if digests is not None:
                    digests[txn.generation] = to_hex(self._digest)
            self._write_header(
                replace(
                    self._header,
                    state=state,
                    waypoint=waypoint,
                    checkpoint=waypoint + 1,
                    committed=max(committed, waypoint),
                    last_change_number=last_cn,
                    last_log_time=last_log_time or self._header.last_log_time,
                )
            )
        return self._header

    def record_backup(self, generation: int, when: datetime) -> None:
        """Stamp the header with a completed backup up to `generation`."""
        with self._transaction():
            self._write_header(
                replace(self._header, last_backup_generation=generation, last_backup_time=when)
            )

    def mark_dirty(self) -> None:
        """The database is in use: a crash from now on is a dirty shutdown."""
        if self._header.state is not DatabaseState.DIRTY_SHUTDOWN:
            with self._transaction():
                self._write_header(replace(self._header, state=DatabaseState.DIRTY_SHUTDOWN))

    def backup_to(self, dest: Path) -> DatabaseHeader:
        """A consistent copy of this file at `dest` (SQLite online backup); its header."""
        with self._lock:
            target = sqlite3.connect(dest)
            try:
                self._conn.backup(target)
            finally:
                target.close()
            return self._header

    # ---- reads ---------------------------------------------------------------------------

    def mailboxes(self) -> list[dict[str, Any]]:
        with self._lock:
            rows = self._conn.execute("SELECT * FROM mailboxes ORDER BY mailbox").fetchall()
        return [_mailbox(r) for r in rows]

    def mailbox(self, name: str) -> dict[str, Any] | None:
        with self._lock:
            row = self._conn.execute("SELECT * FROM mailboxes WHERE mailbox=?", (name,)).fetchone()
        return _mailbox(row) if row else None

    def folders(self, mailbox: str) -> list[str]:
        with self._lock:
            rows = self._conn.execute(
                "SELECT folder FROM folders WHERE mailbox=? ORDER BY folder", (mailbox,)
            ).fetchall()
        return [r[0] for r in rows]

    def items(self, mailbox: str, since_change: int = 0) -> list[dict[str, Any]]:
        """Items (and tombstones) of a mailbox changed after `since_change`, by change number."""
        with self._lock:
            rows = self._conn.execute(
                "SELECT * FROM items WHERE mailbox=? AND change_number>? ORDER BY change_number",
                (mailbox, since_change),
            ).fetchall()
        return [_item(r) for r in rows]

    def item(self, mailbox: str, item_id: str) -> dict[str, Any] | None:
        with self._lock:
            row = self._conn.execute(
                "SELECT * FROM items WHERE mailbox=? AND item_id=?", (mailbox, item_id)
            ).fetchone()
        return _item(row) if row else None


def _mailbox(row: sqlite3.Row) -> dict[str, Any]:
    return {
        "mailbox": row["mailbox"],
        "display_name": row["display_name"],
        "locked": bool(row["locked"]),
        "soft_deleted": bool(row["soft_deleted"]),
        "change_number": row["change_number"],
    }


def _item(row: sqlite3.Row) -> dict[str, Any]:
    return {
        "mailbox": row["mailbox"],
        "item_id": row["item_id"],
        "folder": row["folder"],
        "subject": row["subject"],
        "body": row["body"],
        "size": row["size"],
        "change_number": row["change_number"],
        "deleted": bool(row["deleted"]),
        "commit_time": row["commit_time"],
    }


_PUT = "INSERT OR REPLACE INTO items VALUES (?, ?, ?, ?, ?, ?, ?, 0, ?)"


def _apply_ops(conn: sqlite3.Connection, txn: Transaction) -> int:
    """Apply one transaction's operations (`ops.decode`d: the same model the overlay
    applies, the same rows); return its highest change number."""
    when = txn.commit_time.isoformat()
    puts: list[tuple[Any, ...]] = []
    last_cn = 0

    def flush_puts() -> None:
        if puts:
            conn.executemany(_PUT, puts)
            puts.clear()

    for raw in txn.ops:
        try:
            op = decode(raw)
        except MalformedOperation as exc:
            raise DatabaseError(
                f"malformed operation in generation {txn.generation} at offset {txn.offset}: {exc}"
            ) from exc
        last_cn = max(last_cn, op.cn)
        if type(op) is PutItem:  # item_row's columns, without the dict (the hot path)
            size = len(op.body.encode())
            puts.append((op.mailbox, op.item_id, op.folder, op.subject, op.body, size, op.cn, when))
            continue
        flush_puts()
        match op:
            case CreateMailbox():
                row = mailbox_row(op)
                conn.execute(
                    "INSERT OR REPLACE INTO mailboxes VALUES (?, ?, ?, ?, ?)",
                    tuple(row[c] for c in _MAILBOX_COLUMNS),
                )
                conn.executemany(
                    "INSERT OR IGNORE INTO folders VALUES (?, ?, ?)",
                    [(op.mailbox, f, op.cn) for f in op.folders],
                )
            case SetMailbox():
                # the row as set_mailbox_row leaves it: only the fields the operation names
                sets, args = ["change_number=?"], [op.cn]
                for field in ("locked", "soft_deleted"):
                    if getattr(op, field) is not None:
                        sets.append(f"{field}=?")
                        args.append(int(getattr(op, field)))
                conn.execute(
                    f"UPDATE mailboxes SET {', '.join(sets)} WHERE mailbox=?",
                    (*args, op.mailbox),
                )
            case CreateFolder():
                conn.execute(
                    "INSERT OR IGNORE INTO folders VALUES (?, ?, ?)",
                    (op.mailbox, op.folder, op.cn),
                )
            case DeleteItem():
                tomb = tombstone_row(None, op, when)
                cur = conn.execute(
                    "UPDATE items SET deleted=1, body='', size=0, change_number=?, commit_time=?"
                    " WHERE mailbox=? AND item_id=?",
                    (op.cn, when, op.mailbox, op.item_id),
                )
                if cur.rowcount == 0:
                    conn.execute(
                        "INSERT INTO items VALUES (?, ?, ?, ?, ?, ?, ?, 1, ?)",
                        tuple(tomb[c] for c in _ITEM_COLUMNS),
                    )
    flush_puts()
    return last_cn


# Column order of the tables, for the rows `ops` defines.
_ITEM_COLUMNS = (
    "mailbox", "item_id", "folder", "subject", "body", "size", "change_number", "commit_time",
)  # fmt: skip
_MAILBOX_COLUMNS = ("mailbox", "display_name", "locked", "soft_deleted", "change_number")
