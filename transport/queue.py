"""The transport's queue and dumpster: one SQLite file on the transport's own disk.

    messages(message_id, folder, subject, body, size, submitted, format, file)
    deliveries(id, message_id, recipient, state, tries, failures, last_error, database,
               delivered, queued, redeliveries, size)
    dumpster_size(database, messages, bytes)   kept by triggers in the same transactions

What a delivery costs does not grow with the dumpster: its size per database is a row the
triggers keep, its oldest entry one step down the partial index `dumpster`, and only what
leaves it is read.

A delivery is one recipient's copy of a message; its state is Queued (waiting or being
tried), Delivered (durable on the recipient's database: it is then in that database's
dumpster) or Poison (given up, with the reason; kept until an operator looks).  A message's
row lives as long as one of its deliveries does.

Every change is a transaction with fsync (WAL, synchronous=FULL) and is acknowledged only
once committed: a message is accepted (the submitter's 201) only once it is on disk, and a
transport killed at any point delivers every accepted message after its restart (Queued
deliveries are tried again; one already durable on its database is replaced by the same
item).  One writer thread commits whatever is waiting as one transaction (a group commit):
many submitters and deliveries pay one fsync.

The WAL is checkpointed into the file by the writer thread once the bodies written since the
last checkpoint reach CHECKPOINT_BYTES, after the batch that crossed it is answered: a
checkpoint (the WAL's pages written again, the file fsync'd) is never in a submitter's way
to its acknowledgement, and with no write beside it the WAL starts over after it.  SQLite's
own checkpoint after a commit, inside that commit's wait, is kept only as a bound
(WAL_BOUND_PAGES) the bodies' count cannot miss.

A message's body is kept as bytes, as it came (a text item's in UTF-8; rows of before kept
it as text, and are read as such): a small one in its row (a BLOB), one of FILE_FROM bytes
or more in a file of its own (`bodies.py`), written and fsync'd before its row is committed
and removed after the commit that deletes the row: a large body is written once, not
through SQLite's pages, WAL and checkpoint.

Times are wall times (epoch seconds): the dumpster's window is defined by delivery times
(the seeds' loss window) and its MaxDumpsterTime by age.  When to try a delivery again is
not kept here: it is the delivery loop's, on the monotonic clock, and a restart tries every
Queued delivery at once.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import queue
import sqlite3
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple, TypeVar

from dag_common.api_types import item_id_for
from dag_common.message_body import Parts
from dag_common.rfc822 import BodyFormat, message_bytes
from transport.bodies import FILE_FROM, BodyFiles
from transport.dumpster import Entry, evicted
from transport.messages import Delivery, Queued

logger = logging.getLogger(__name__)

T = TypeVar("T")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS messages(
  message_id TEXT PRIMARY KEY, folder TEXT NOT NULL, subject TEXT NOT NULL,
  body TEXT NOT NULL, size INTEGER NOT NULL, submitted REAL NOT NULL,
  format TEXT NOT NULL DEFAULT 'text', file TEXT);
CREATE TABLE IF NOT EXISTS deliveries(
  id INTEGER PRIMARY KEY, message_id TEXT NOT NULL REFERENCES messages(message_id),
  recipient TEXT NOT NULL, state TEXT NOT NULL, tries INTEGER NOT NULL DEFAULT 0,
  failures INTEGER NOT NULL DEFAULT 0, last_error TEXT, database TEXT, delivered REAL,
  queued REAL NOT NULL, redeliveries INTEGER NOT NULL DEFAULT 0, size INTEGER NOT NULL,
  UNIQUE(message_id, recipient));
CREATE INDEX IF NOT EXISTS deliveries_state ON deliveries(state);
CREATE INDEX IF NOT EXISTS dumpster ON deliveries(database, delivered) WHERE state = 'Delivered';
CREATE TABLE IF NOT EXISTS dumpster_size(
  database TEXT PRIMARY KEY, messages INTEGER NOT NULL, bytes INTEGER NOT NULL);
CREATE TRIGGER IF NOT EXISTS dumpster_in AFTER UPDATE OF state ON deliveries
  WHEN new.state = 'Delivered' AND old.state != 'Delivered' BEGIN
  INSERT INTO dumpster_size VALUES (new.database, 1, new.size) ON CONFLICT(database)
    DO UPDATE SET messages = messages + 1, bytes = bytes + new.size; END;
CREATE TRIGGER IF NOT EXISTS dumpster_out AFTER UPDATE OF state ON deliveries
  WHEN old.state = 'Delivered' AND new.state != 'Delivered' BEGIN
  UPDATE dumpster_size SET messages = messages - 1, bytes = bytes - old.size
    WHERE database = old.database; END;
CREATE TRIGGER IF NOT EXISTS dumpster_gone AFTER DELETE ON deliveries
  WHEN old.state = 'Delivered' BEGIN
  UPDATE dumpster_size SET messages = messages - 1, bytes = bytes - old.size
    WHERE database = old.database; END;
"""

QUEUED, DELIVERED, POISON = "Queued", "Delivered", "Poison"
# Bodies written since the last checkpoint that set off the next (the default WAL's size,
# 1,000 pages); SQLite's own automatic checkpoint only past WAL_BOUND_PAGES.
CHECKPOINT_BYTES = 4 * 1024 * 1024
WAL_BOUND_PAGES = 16384

_DELIVERY = (
    "SELECT d.id, d.message_id, d.recipient, m.folder, d.size, d.tries, d.failures, d.queued"
    " FROM deliveries d JOIN messages m USING (message_id)"
)


@dataclass(frozen=True)
class Submitted:
    """What `submit` did: `new` False when the message id was already known (nothing
    queued: a client's retry of a submission it did not hear answered); `first`: the
    message's row was inserted by this submission (its body is the one queued, not that of
    an earlier submission under the same id)."""

    new: bool
    deliveries: list[Delivery]
    first: bool = False


@dataclass(frozen=True)
class DumpsterSize:
    database: str
    messages: int
    bytes: int


class RecipientState(NamedTuple):
    """One recipient's delivery of a message, as `GET /v1/messages/{id}` shows it."""

    recipient: str
    state: str
    tries: int
    last_error: str | None
    database: str | None
    delivered: float | None  # wall time it was durable on the active (epoch seconds)
    redeliveries: int


class Poisoned(NamedTuple):
    """A delivery given up (the poison queue), with why."""

    message_id: str
    recipient: str
    tries: int
    reason: str | None


@dataclass(frozen=True)
class Stored:
    """A delivery's message as read back from the queue, to be written to its mailbox."""

    delivery: Delivery
    subject: str
    format: BodyFormat
    # Bytes as queued; text in a row of before bytes were kept; a message's file, not read
    # (`QueueStore.items(files=True)`: sent from it a slice at a time); or the parts it was
    # queued from, still in memory (`delivery.FreshBodies`).
    body: bytes | str | Path | Parts

    @property
    def length(self) -> int:
        if isinstance(self.body, Path):
            return self.body.stat().st_size
        if isinstance(self.body, tuple):
            return sum(map(len, self.body))
        return len(self.body)

    def message(self) -> bytes | Path | Parts:
        """The message's bytes, its file or its parts (a message only): what `PUT
        …/message` sends."""
        if isinstance(self.body, str):
            return message_bytes(self.body, self.format)
        return self.body

    def item(self) -> dict[str, str]:
        """The item of `POST …/items` it is.  A message's subject is left to the node,
        which reads it from the message's headers (it refuses one that differs); a text
        item is sent as items always were, without a format."""
        body = self.body
        if isinstance(body, tuple):
            body = b"".join(body)
        if isinstance(body, bytes):
            body = body.decode("latin-1" if self.format is BodyFormat.MESSAGE_8BIT else "utf-8",
                               "surrogatepass")  # fmt: skip
        d = self.delivery
        if self.format.is_message:
            return {"item_id": item_id_for(d.message_id), "folder": d.folder,
                    "body": body, "format": str(self.format)}  # fmt: skip
        return {"item_id": item_id_for(d.message_id), "folder": d.folder,
                "subject": self.subject, "body": body}  # fmt: skip


class QueueStore:
    """The queue file, written by one thread in group commits."""

    def __init__(self, path: Path, *, max_dumpster_time: float, max_dumpster_size: int) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self._conn = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
        self._conn.execute("PRAGMA journal_mode=WAL")
        self._conn.execute("PRAGMA synchronous=FULL")
        self._conn.execute(f"PRAGMA wal_autocheckpoint={WAL_BOUND_PAGES}")
        self._conn.executescript(_SCHEMA)
        self._upgrade()
        self._bodies = BodyFiles(path.with_name(path.name + ".bodies"))
        kept = {row[0] for row in self._conn.execute(
            "SELECT file FROM messages WHERE file IS NOT NULL"
        )}  # fmt: skip
        self._bodies.sweep(kept)  # bodies whose rows were never committed
        self._sync_bodies = False  # a body file was named in this transaction (writer thread)
        self._gone: list[str] = []  # body files whose rows this transaction deleted
        self._max_time = max_dumpster_time
        self._max_size = max_dumpster_size
        self._work: queue.SimpleQueue[tuple[Callable[[], Any], asyncio.Future[Any]] | None] = (
            queue.SimpleQueue()
        )
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread = threading.Thread(target=self._writer, name=f"queue {path}", daemon=True)
        self._thread.start()
        self.commits = 0  # transactions committed (each one fsync)
        self.checkpoints = 0  # the writer's own (`_checkpoint`)
        self._written = 0  # bytes of bodies written since the last checkpoint (writer thread)

    def _upgrade(self) -> None:
        """A queue file of before messages had a format: its messages are text, and their
        column says so (added once, in one transaction, before anything is served)."""
        columns = {row[1] for row in self._conn.execute("PRAGMA table_info(messages)")}
        if "format" not in columns:
            self._conn.execute(
                "ALTER TABLE messages ADD COLUMN format TEXT NOT NULL DEFAULT 'text'"
            )
            logger.info("queue file upgraded: messages gained their format (text)")
        if "file" not in columns:  # every body of before is in its row
            self._conn.execute("ALTER TABLE messages ADD COLUMN file TEXT")
            logger.info("queue file upgraded: messages may keep their bodies in files")

    # ---- the writer thread ------------------------------------------------------------------

    def _writer(self) -> None:
        while True:
            first = self._work.get()
            if first is None:
                return
            batch = [first]
            while True:  # everything waiting joins this transaction
                try:
                    more = self._work.get_nowait()
                except queue.Empty:
                    break
                if more is None:
                    self._work.put(None)
                    break
                batch.append(more)
            self._commit(batch)  # answered
            if self._written >= CHECKPOINT_BYTES:
                self._checkpoint()

    def _checkpoint(self) -> None:
        """Write the WAL's pages into the file (fsync'd), in the writer thread: nothing is
        written beside it, so every page is and the next commit starts the WAL over."""
        self._written = 0
        try:
            self._conn.execute("PRAGMA wal_checkpoint(PASSIVE)")
        except sqlite3.Error:  # the next one tries again; SQLite's own bound holds meanwhile
            logger.exception("the transport queue could not checkpoint its WAL")
        else:
            self.checkpoints += 1

    def _commit(self, batch: list[tuple[Callable[[], Any], asyncio.Future[Any]]]) -> None:
        results: list[tuple[asyncio.Future[Any], bool, Any]] = []
        self._sync_bodies = False
        self._gone = []
        try:
            self._conn.execute("BEGIN IMMEDIATE")
            for n, (work, fut) in enumerate(batch):
                self._conn.execute(f"SAVEPOINT w{n}")
                gone = len(self._gone)
                try:
                    results.append((fut, True, work()))
                    self._conn.execute(f"RELEASE w{n}")
                except Exception as exc:  # this one's error, the rest go on
                    self._conn.execute(f"ROLLBACK TO w{n}")
                    self._conn.execute(f"RELEASE w{n}")
                    del self._gone[gone:]
                    results.append((fut, False, exc))
            if self._sync_bodies:  # the files' names durable before the rows naming them
                self._bodies.sync()
            self._conn.execute("COMMIT")
            self.commits += 1
        except Exception as exc:  # the commit failed (disk full, I/O): nothing of it holds
            logger.exception("the transport queue could not commit")
            if self._conn.in_transaction:
                self._conn.execute("ROLLBACK")
            results = [(fut, False, exc) for _, fut in batch]
            self._gone = []
        if self._gone:  # named by no row any more
            self._bodies.remove(self._gone)
            self._gone = []
        for fut, ok, value in results:
            self._answer(fut, ok, value)

    def _answer(self, fut: asyncio.Future[Any], ok: bool, value: Any) -> None:
        def settle() -> None:
            if fut.done():
                return
            if ok:
                fut.set_result(value)
            else:
                fut.set_exception(value)

        assert self._loop is not None
        self._loop.call_soon_threadsafe(settle)

    async def _run(self, work: Callable[[], T]) -> T:
        """Run `work` (on the connection) in the next group commit; its result once
        committed."""
        self._loop = asyncio.get_running_loop()
        fut: asyncio.Future[T] = self._loop.create_future()
        self._work.put((work, fut))
        return await fut

    def close(self) -> None:
        self._work.put(None)
        self._thread.join(timeout=10)
        self._conn.close()

    # ---- the operations -------------------------------------------------------------------

    async def submit(self, message: Queued, now: float) -> Submitted:
        """Queue `message` for its recipients (those it was not queued for already under
        its message id); once this returns it is committed, its body fsync'd with it.
        sqlite3.Error or OSError: nothing of it holds."""
        recipients = list(dict.fromkeys(message.recipients))  # a mailbox named twice: once
        length = message.length
        file: str | None = None
        if length >= FILE_FROM:  # written and fsync'd beside the others' (not in the writer)
            file = await asyncio.to_thread(self._bodies.write, message.chunks())
        body = b"" if file is not None else b"".join(message.chunks())
        taken = False  # the file is named by the row inserted

        def work() -> Submitted:
            nonlocal taken
            todo = recipients
            known = self._conn.execute(
                "SELECT folder, size FROM messages WHERE message_id=?", (message.message_id,)
            ).fetchone()
            if known:
                # The same message id again: a retry (nothing queued), or the same message
                # for other recipients (an MTA's next transaction): only those are queued,
                # with the message as first taken.
                folder, size = known
                had = {row[0] for row in self._conn.execute(
                    "SELECT recipient FROM deliveries WHERE message_id=?", (message.message_id,)
                )}  # fmt: skip
                todo = [r for r in recipients if r not in had]
                if not todo:
                    return Submitted(False, [])
            else:
                folder, size = message.folder, message.size
                self._conn.execute(
                    "INSERT INTO messages(message_id, folder, subject, body, size, submitted, "
                    "format, file) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                    (message.message_id, folder, message.subject, body, size, now,
                     str(message.format), file),
                )  # fmt: skip
                if file is not None:
                    self._sync_bodies = taken = True
                else:
                    self._written += length
            ids = [
                self._conn.execute(
                    "INSERT INTO deliveries(message_id, recipient, state, queued, size) "
                    "VALUES (?, ?, ?, ?, ?)",
                    (message.message_id, r, QUEUED, now, size),
                ).lastrowid
                for r in todo
            ]
            return Submitted(True, [
                Delivery(int(i or 0), message.message_id, r, folder, size, 0, 0, now)
                for i, r in zip(ids, todo, strict=True)
            ], first=not known)  # fmt: skip

        try:
            submitted = await self._run(work)
        except Exception:  # not committed (a cancelled wait may still commit: kept then)
            if file is not None:
                self._bodies.remove([file])
            raise
        if file is not None and not taken:
            self._bodies.remove([file])
        return submitted

    async def queued(self) -> list[Delivery]:
        """Every Queued delivery, oldest first (a restart tries them all)."""
        return await self._run(lambda: self._deliveries("WHERE d.state=? ORDER BY d.id", QUEUED))

    async def items(self, deliveries: list[Delivery], *, files: bool = False) -> list[Stored]:
        """The messages of `deliveries`, read from the queue's file and body files (each
        message's once, however many recipients); `files`: a message whose body is in a
        file is given as the file, not read."""
        ids = list(dict.fromkeys(d.message_id for d in deliveries))

        def work() -> dict[str, tuple[str, Any, str, str | None]]:
            marks = ",".join("?" * len(ids))
            rows = self._conn.execute(
                "SELECT message_id, subject, body, format, file FROM messages "
                f"WHERE message_id IN ({marks})",
                ids,
            ).fetchall()
            return {row[0]: (row[1], row[2], row[3], row[4]) for row in rows}

        rows = await self._run(work)
        stored: dict[str, tuple[str, BodyFormat, bytes | str]] = {}
        for message_id, (subject, body, fmt, file) in rows.items():
            form = BodyFormat(fmt)
            if file is not None and files and form.is_message:
                body = self._bodies.path(file)
            elif file is not None:  # read off the writer thread and the event loop
                body = await asyncio.to_thread(self._bodies.read, file)
            stored[message_id] = (subject, form, body)
        return [Stored(d, *stored[d.message_id]) for d in deliveries]

    def _deliveries(self, where: str, *args: Any) -> list[Delivery]:
        rows = self._conn.execute(f"{_DELIVERY} {where}", args).fetchall()
        return [Delivery(*row) for row in rows]

    async def delivered(self, ids: list[int], database: str, now: float) -> int:
        """Mark `ids` Delivered to `database` (into its dumpster), then let out of that
        dumpster what its bounds say; the number of messages let out."""

        def work() -> int:
            self._conn.executemany(
                "UPDATE deliveries SET state=?, database=?, delivered=?, tries=tries+1, "
                "last_error=NULL WHERE id=? AND state=?",
                [(DELIVERED, database, now, i, QUEUED) for i in ids],
            )
            return self._evict(database, now)

        return await self._run(work)

    def _evict(self, database: str, now: float) -> int:
        row = self._conn.execute(
            "SELECT bytes FROM dumpster_size WHERE database=?", (database,)
        ).fetchone()
        total = row[0] if row else 0
        # a literal state, so that SQLite may use the partial index
        (oldest,) = self._conn.execute(
            "SELECT MIN(delivered) FROM deliveries WHERE database=? AND state='Delivered'",
            (database,),
        ).fetchone()
        if total <= self._max_size and (oldest is None or now - oldest <= self._max_time):
            return 0
        cursor = self._conn.execute(
            "SELECT id, delivered, size FROM deliveries WHERE database=? AND state='Delivered' "
            "ORDER BY delivered, id",
            (database,),
        )
        try:
            out = evicted(
                (Entry(*row) for row in cursor),
                total=total,
                now=now,
                max_time=self._max_time,
                max_size=self._max_size,
            )
        finally:
            cursor.close()
        if out:
            self._forget(out)
        return len(out)

    def _forget(self, ids: list[int]) -> None:
        """Delete the deliveries `ids`, and each message none of whose deliveries is left."""
        for start in range(0, len(ids), 500):  # within SQLite's bound on parameters
            part = ids[start : start + 500]
            marks = ",".join("?" * len(part))
            messages = [row[0] for row in self._conn.execute(
                f"SELECT DISTINCT message_id FROM deliveries WHERE id IN ({marks})", part
            )]  # fmt: skip
            self._conn.execute(f"DELETE FROM deliveries WHERE id IN ({marks})", part)
            for m in messages:
                for (file,) in self._conn.execute(
                    "DELETE FROM messages WHERE message_id=? AND NOT EXISTS "
                    "(SELECT 1 FROM deliveries WHERE deliveries.message_id=messages.message_id) "
                    "RETURNING file",
                    (m,),
                ).fetchall():
                    if file is not None:
                        self._gone.append(file)  # removed once this is committed

    async def sweep(self, now: float) -> int:
        """Let out of every database's dumpster what its bounds say (MaxDumpsterTime passes
        on a database that nothing is delivered to); the number let out."""

        def work() -> int:
            databases = [row[0] for row in self._conn.execute(
                "SELECT database FROM dumpster_size WHERE messages > 0"
            )]  # fmt: skip
            return sum(self._evict(db, now) for db in databases)

        return await self._run(work)

    async def failed(self, delivery_id: int, error: str, *, counts: bool) -> None:
        """A try that failed; `counts`: the answer says the message itself is wrong (it
        counts towards max_tries)."""
        await self._run(
            lambda: self._conn.execute(
                "UPDATE deliveries SET tries=tries+1, failures=failures+?, last_error=? "
                "WHERE id=? AND state=?",
                (int(counts), error[:1000], delivery_id, QUEUED),
            )
        )

    async def poison(self, delivery_id: int, reason: str) -> None:
        """Give up a delivery after a try that failed: into the poison queue with `reason`."""
        await self._run(
            lambda: self._conn.execute(
                "UPDATE deliveries SET state=?, last_error=?, tries=tries+1 WHERE id=? AND state=?",
                (POISON, reason[:1000], delivery_id, QUEUED),
            )
        )

    async def redeliver(
        self, database: str, start: float, end: float, now: float
    ) -> list[Delivery]:
        """Take the messages delivered to `database` within [start, end] out of its dumpster
        and queue them again (the seeds: "once the message is resubmitted for delivery, the
        message is removed from the transport dumpster"; it comes back in once delivered).
        Each is queued as of `now`: a message delivered days ago has its whole
        message_expiration again."""

        def work() -> list[Delivery]:
            found = self._deliveries(
                "WHERE d.state=? AND d.database=? AND d.delivered BETWEEN ? AND ? ORDER BY d.id",
                DELIVERED, database, start, end,
            )  # fmt: skip
            self._conn.executemany(
                "UPDATE deliveries SET state=?, redeliveries=redeliveries+1, tries=0, "
                "failures=0, queued=? WHERE id=?",
                [(QUEUED, now, d.id) for d in found],
            )
            return [dataclasses.replace(d, tries=0, failures=0, queued=now) for d in found]

        return await self._run(work)

    async def message(self, message_id: str) -> list[RecipientState]:
        """Each recipient's delivery of `message_id` (empty: not known, or let out of the
        dumpster)."""
        return await self._all(
            RecipientState,
            "SELECT recipient, state, tries, last_error, database, delivered, redeliveries "
            "FROM deliveries WHERE message_id=? ORDER BY recipient",
            message_id,
        )

    async def poisoned(self) -> list[Poisoned]:
        """The poison queue: each delivery given up, with why."""
        return await self._all(
            Poisoned,
            "SELECT message_id, recipient, tries, last_error FROM deliveries WHERE state=? "
            "ORDER BY id",
            POISON,
        )

    async def _all(self, make: Callable[..., T], sql: str, *args: object) -> list[T]:
        """Each row `sql` selects with `args`, made into a `make`."""

        def work() -> list[T]:
            return [make(*row) for row in self._conn.execute(sql, args).fetchall()]

        return await self._run(work)

    async def counts(self) -> tuple[dict[str, int], list[DumpsterSize]]:
        """Deliveries by state, and each database's dumpster (messages, bytes)."""

        def work() -> tuple[dict[str, int], list[DumpsterSize]]:
            states = dict.fromkeys((QUEUED, DELIVERED, POISON), 0)
            states.update(
                self._conn.execute(
                    "SELECT state, COUNT(*) FROM deliveries GROUP BY state"
                ).fetchall()
            )
            sizes = self._conn.execute(
                "SELECT database, messages, bytes FROM dumpster_size WHERE messages > 0 "
                "ORDER BY database"
            ).fetchall()
            return states, [DumpsterSize(*row) for row in sizes]

        return await self._run(work)
