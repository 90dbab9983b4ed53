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
`apply`, the one path that writes the rows (`tables.TableWriter` says what each transaction
adds to it), in the same transaction as the rows, and the file stores it beside its header.
`apply` can report it as of each generation it applies, which is what copies compare with
the active's (the DIGEST record of a roll); `recompute_digest` adds the terms up again from
the rows, to find a row changed inside a page that is otherwise valid, or a write that did
not go through `apply`.

Its reads (mailboxes, folders, items, pages) are `file_reads.FileReads`'; the tables' schema
and the migrations a file from before is given at open, `schema.py`'s (its large bodies
moved into their own table, `body_migration.py`'s).
"""

from __future__ import annotations

import itertools
import os
import sqlite3
import threading
import uuid
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import replace
from datetime import datetime
from operator import itemgetter
from pathlib import Path

from dag_common import sqlite_memory
from dag_common.counted_text import CountedText
from dag_common.mailbox_digest import MODULUS, to_hex
from dag_common.sqlite_memory import release_bindings
from replication_node.errors import DatabaseError
from replication_node.log.events import Transaction
from replication_node.log.operations import PutItem, RecordBackup
from replication_node.storage import file_handles
from replication_node.storage.body_migration import SCHEMA_VERSION, move_bodies_apart
from replication_node.storage.body_parts import SIZE
from replication_node.storage.digest import (
    DIGEST_SCHEMA,
    install_digest,
    recompute_digest,
    stored_digest,
)
from replication_node.storage.file_handles import SharedFile
from replication_node.storage.file_reads import FileReads
from replication_node.storage.header import (
    HEADER_SCHEMA,
    DatabaseHeader,
    DatabaseState,
    insert_new_header,
    migrate_header,
    read_header,
    write_header,
)
from replication_node.storage.ops import with_backup
from replication_node.storage.schema import (
    TABLES_SCHEMA,
    add_format,
    add_imap_columns,
)
from replication_node.storage.stoppable import Interrupt
from replication_node.storage.tables import (
    PutRows,
    TableWriter,
)
from replication_node.storage.writebehind import (
    WalFrames,
    WalMark,
    page_ranges,
    wal_page_ranges,
    write_behind,
)

_WRITE_CACHE_KIB = 16 * 1024
_CHECKPOINT_BYTES = 16 << 20
# A new file's page size: ESE's since Exchange 2010 (32 KB, up from 8 KB in 2007, chosen there
# for fewer, larger I/Os).  Here it is what lets replay write its rows at the pace of plain
# batched upserts into a file of SQLite's default 4 KB pages (bench/shipping.py, issue 33:
# the same 59,600 replayed rows in 0.41-0.57 s at 32 KB against 0.65-0.87 s at 4 KB, where a
# batch of random item ids touches eight times as many index pages); bodies of megabytes
# need an eighth of the overflow pages.  A file created before keeps the size it has (SQLite
# changes it only by rewriting the whole file), and a seed, a backup or a restore copies the
# file and its page size with it.
PAGE_SIZE = 32768
# An `apply` whose bodies add up to this many characters or more is paced (`_make_durable`);
# a replay's are counted in UTF-8 bytes, as its rows have them (`_rows_size`).
PACED_BYTES = 1 << 20
# A backup (seed, snapshot) copies this many pages a step, a stop looked at between two.
_BACKUP_STEP = 1024


class Database(FileReads):
    """One database copy's SQLite file."""

    def __init__(self, path: Path, conn: sqlite3.Connection) -> None:
        self.path = path
        self._conn = conn
        self._lock = threading.RLock()
        # The writing connection: a page cache that holds a replay batch's index pages
        # (item ids are random, so a batch touches index pages all over the file: with
        # SQLite's 2 MiB default they were read back and spilled to the WAL mid-batch),
        # and a checkpoint every 16 MiB of WAL instead of 4 MiB (an index page written by
        # several commits is copied into the file once).  bench/shipping.py, issue 33.
        conn.execute(f"PRAGMA cache_size = -{_WRITE_CACHE_KIB}")
        (page_size,) = conn.execute("PRAGMA page_size").fetchone()
        self._page_size = page_size
        self._autocheckpoint = max(1, _CHECKPOINT_BYTES // page_size)
        conn.execute(f"PRAGMA wal_autocheckpoint = {self._autocheckpoint}")
        # Called before each chunk of a paced write (`_make_durable`; it may name the chunk's
        # size, `writebehind.write_behind`): the active sets it to give way to its log.
        self.pace: Callable[[], int | None] | None = None
        # How far the last paced commit saw the WAL (`_make_durable`); None: not known.
        self._wal_mark: WalMark | None = None
        migrate_header(conn)
        add_format(conn)  # before the digest: a file from before it adds its items up with it
        add_imap_columns(conn)
        self._header = read_header(conn, path)
        self._written: DatabaseHeader | None = None  # written in a transaction, not committed
        with self._lock:
            self._digest = install_digest(conn)  # the running content digest, as apply moves it
        # Last: the digest is added up (a file from before it) where the bodies are now.
        move_bodies_apart(conn)
        # Reads go through a connection of their own: in WAL mode they see the last commit
        # and never wait for a write in progress.  A read on the event loop (a write's
        # checks, the overlay's lookups) used to wait on the one connection's lock while a
        # worker thread wrote an LLR flush into the file: up to 74 ms per 8 MiB body written,
        # the whole node's loop stalled (bench/large_items.py found it).
        self._reads = self._connect(path)
        self._read_lock = threading.Lock()
        # A third connection for the large reads a worker thread makes (a folder's listing,
        # `folder_items_apart`): on the read connection, the loop's own small reads waited
        # on its lock for the whole of one (issue 50: a 10,000-message folder).
        self._apart = self._connect(path)
        self._apart_lock = threading.Lock()
        # The paced write-behind's descriptor of the file, shared by every `Database` of it
        # in this process and closed by the last one: closing a descriptor of its own would
        # drop SQLite's locks on the file (`file_handles.py`).
        self._file: SharedFile | None = file_handles.acquire(path)

    # ---- the content digest --------------------------------------------------------------

    @property
    def content_digest(self) -> str:
        """The content digest of what the file holds (at its waypoint), kept by `apply`."""
        return to_hex(self._digest)

    def recompute_digest(self, interrupt: Interrupt | None = None) -> tuple[str, str]:
        """(stored, recomputed from the rows) in one read snapshot: unequal means a row was
        changed behind SQLite's back (inside a valid page) or written around `apply`.
        `interrupt` stops it (a whole file's read) with sqlite3.OperationalError."""
        with self._lock:
            self._conn.execute("BEGIN")
            try:
                with interrupt.watching(self._conn) if interrupt else nullcontext():
                    stored = stored_digest(self._conn)
                    rows = recompute_digest(self._conn)
            finally:
                self._conn.execute("COMMIT")
        return to_hex(stored or 0), to_hex(rows)

    # ---- lifecycle -----------------------------------------------------------------------

    @staticmethod
    def _connect(path: Path, *, page_size: int | None = None) -> sqlite3.Connection:
        conn = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
        if page_size is not None:  # a new file: before WAL mode writes its first page
            conn.execute(f"PRAGMA page_size = {page_size}")
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
        conn = cls._connect(path, page_size=PAGE_SIZE)
        with conn:
            conn.execute("BEGIN")
            conn.executescript(
                "SAVEPOINT s;" + HEADER_SCHEMA + TABLES_SCHEMA + DIGEST_SCHEMA
                + f"PRAGMA user_version = {SCHEMA_VERSION};RELEASE s;"
            )  # fmt: skip
            conn.execute("INSERT INTO db_digest VALUES (1, ?)", (to_hex(0),))
            insert_new_header(
                conn, database_signature=database_signature, log_signature=log_signature
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
        """Close the file; `clean`: mark it Clean Shutdown first (nothing more to replay)."""
        with self._lock:
            if clean:
                self._write_header(replace(self._header, state=DatabaseState.CLEAN_SHUTDOWN))
            self._conn.close()
        with self._read_lock:
            self._reads.close()
        with self._apart_lock:
            self._apart.close()
        shared, self._file = self._file, None
        if shared is not None:  # once its connections are closed: see file_handles.py
            file_handles.release(shared)

    def _write_header(self, header: DatabaseHeader) -> None:
        """Write the header row; inside `_transaction` it is published (`header`) once the
        COMMIT returns, so a reader of the header (the truncator, Logs Required) never acts
        on a waypoint that a crash during the COMMIT would take back."""
        write_header(self._conn, header)
        if self._conn.in_transaction:
            self._written = header
        else:
            self._header = header

    @property
    def header(self) -> DatabaseHeader:
        return self._header

    @contextmanager
    def _transaction(
        self, committing: threading.Event | None = None, *, publish: bool = True
    ) -> Iterator[sqlite3.Connection]:
        """One write transaction.  A header written in it (`_write_header`) is published once
        the COMMIT returns, or, not `publish`, left for the caller to publish (a paced write
        does once it has made the commit durable itself)."""
        with self._lock:
            self._conn.execute("BEGIN IMMEDIATE")
            digest, self._written = self._digest, None
            try:
                yield self._conn
                if self._digest != digest:
                    self._conn.execute(
                        "UPDATE db_digest SET digest = ? WHERE id = 1", (to_hex(self._digest),)
                    )
            except BaseException:
                self._conn.execute("ROLLBACK")
                self._digest, self._written = digest, None
                raise
            finally:
                if committing is not None:
                    committing.set()
            self._conn.execute("COMMIT")
            if publish and self._written is not None:
                self._header, self._written = self._written, None

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
        required_from: int = 0,
        committing: threading.Event | None = None,
        puts: Iterable[PutRows] | None = None,
        body_bytes: int | None = None,
    ) -> DatabaseHeader:
        """Apply whole generations of transactions and advance the header, atomically.
        Given `digests`, it gets the content digest as of each generation that holds a
        transaction (after its last one).  `required_from`: Logs Required as of `waypoint`
        (the first generation of a staged body pending there; 0: none).  `committing` is
        set once the rows are written and the COMMIT starts waiting on the disk (or the call
        fails): a replay reads its next batch meanwhile (`passive/replayer.py`), and has
        that batch's `puts` (`tables.put_rows` of each transaction) computed with it.
        `body_bytes`: what the transactions' bodies add up to, known beforehand (the LLR
        flush, whose bodies are read back from the log as they are iterated): then they are
        taken one at a time, and a transaction's puts of PACED_BYTES or more are written as
        soon as it is applied, so that one large body at a time is held.

        A malformed operation aborts the whole call (nothing applied, nothing published);
        a waypoint lower than the file's: DatabaseError.
        """
        if waypoint < self._header.waypoint:
            raise DatabaseError(f"waypoint would go back from {self._header.waypoint}")
        if body_bytes is None:
            txns: Iterable[Transaction] = list(transactions)
            if puts is not None:  # a replay's: its rows have their bodies' sizes, summed in C
                puts = tuple(puts)
                body_bytes = sum(map(_rows_size, puts))
            else:
                body_bytes = sum(_body_chars(t) for t in txns)  # type: ignore[union-attr]
            alone = False
        else:
            txns, alone = transactions, True
        paced = body_bytes >= PACED_BYTES
        with (
            self._lock,
            self._paced(paced),
            self._transaction(committing, publish=not paced) as conn,
        ):
            last_cn = self._header.last_change_number
            stamps: list[RecordBackup] = []
            writer = TableWriter(conn, stamps)
            prepared = iter(puts) if puts is not None else itertools.repeat(None)
            for txn in txns:
                last_cn = max(last_cn, writer.apply(txn, next(prepared)))
                if alone and _body_chars(txn) >= PACED_BYTES:
                    writer.flush()
                if digests is not None:
                    digests[txn.generation] = to_hex(self._digest + writer.delta)
            writer.flush()
            self._digest = (self._digest + writer.delta) % MODULUS
            header = self._header
            for stamp in stamps:  # in log order: the last of each kind wins
                header = with_backup(header, stamp)
            self._write_header(
                replace(
                    header,
                    state=state,
                    waypoint=waypoint,
                    checkpoint=waypoint + 1,
                    committed=max(committed, waypoint),
                    last_change_number=last_cn,
                    last_log_time=last_log_time or self._header.last_log_time,
                    required_from=required_from,
                )
            )
        if paced:  # SQLite's copies of the bodies it bound, freed now (sqlite_memory.py)
            with self._lock:
                release_bindings(self._conn, self.path)
        return self._header

    @contextmanager
    def _paced(self, paced: bool) -> Iterator[None]:
        """Around a write transaction whose bodies add up to PACED_BYTES or more (under the
        lock): it commits without SQLite's fsync and automatic checkpoint, `_make_durable`
        does both a chunk at a time, and only then is the header it wrote published (as
        `_transaction` publishes it after the COMMIT of a write SQLite makes durable itself):
        a reader of the header (the truncator, Logs Required) never acts on a waypoint a
        power loss could take back."""
        if not paced:
            yield
            return
        self._conn.execute("PRAGMA synchronous=NORMAL")
        self._conn.execute("PRAGMA wal_autocheckpoint=0")
        try:
            yield
            self._make_durable()
            if self._written is not None:
                self._header = self._written
        finally:
            self._written = None
            self._conn.execute("PRAGMA synchronous=FULL")
            self._conn.execute(f"PRAGMA wal_autocheckpoint = {self._autocheckpoint}")

    def _make_durable(self) -> None:
        """After a paced commit (synchronous=NORMAL: its WAL frames written, not fsync'd):
        the WAL written a chunk at a time (its frames since the last paced commit,
        `writebehind.WalFrames`) and fdatasync'd (the commit is durable from here),
        then checkpointed into the database file without SQLite's own fsync, and the file's
        pages the checkpoint copied written a chunk at a time and fdatasync'd (`writebehind.py`).

        Why every crash state is safe.  Before the WAL's fdatasync, the commit's frames may be
        partly on disk: SQLite's recovery takes frames only along an unbroken checksum chain
        from the WAL header, which ends at the last commit frame whose every frame is there,
        so the file is at its previous commit, whose waypoint the header still published (it
        is published only once this returns).  SQLite still fsyncs the WAL header when it
        restarts the WAL (synchronous=NORMAL does; only OFF does not), so frames of an
        earlier WAL can never be read as the new one's.  The checkpoint (synchronous=OFF, so
        that SQLite does not fsync the database file in one burst) writes pages the WAL
        holds durably; a crash before the file's fdatasync leaves the WAL whole, and SQLite's
        recovery copies it again.  The WAL is restarted (its frames overwritten) only by the
        next write transaction, which takes this object's lock, held until the database
        file's fdatasync.  A failure (EIO, ENOSPC) raises DatabaseError with the header not
        published: the rows are in the file, and the next `apply` of the same generations
        writes the same rows again and makes them durable."""
        wal = self.path.with_name(self.path.name + "-wal")
        mark, self._wal_mark = self._wal_mark, None  # kept again only once all went well
        try:
            fd = os.open(wal, os.O_RDONLY)
            try:
                # The frames since the last paced commit's (`WalMark`): all of them if the WAL
                # was restarted since (its salts changed) or none was seen.
                frames = WalFrames(fd, self._page_size, mark)
                mark = frames.since
                write_behind(wal, [frames.byte_range(mark.frames)], fd=fd, pace=self.pace)
            finally:
                os.close(fd)
            self._conn.execute("PRAGMA synchronous=OFF")
            try:
                _, log, backfilled = self._conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
            finally:
                self._conn.execute("PRAGMA synchronous=NORMAL")
            assert self._file is not None, "a paced write on a closed database"
            if mark.backfilled <= backfilled <= frames.end and log >= 0:
                # The pages of the frames this checkpoint copied, not of every frame the WAL
                # ever held (issue 49: a WAL of 40 MiB read a frame header at a time, and its
                # whole file's ranges looked up, each flush of a 1 MiB body).
                pages = frames.pages_of(mark.backfilled, backfilled)
                ranges = page_ranges(pages, self._page_size)
                self._wal_mark = WalMark(frames.salt, log, backfilled)
            else:
                ranges = wal_page_ranges(wal, self._page_size)
            write_behind(self.path, ranges, fd=self._file.fd, pace=self.pace)
        except (OSError, sqlite3.Error) as exc:
            self._wal_mark = None
            raise DatabaseError(f"{self.path}: making an LLR write durable failed: {exc}") from exc

    def release_memory(self) -> bool:
        """Give back what the file's connections hold while idle: the values bound to their
        statements (the last bodies written or looked up) and their page caches
        (`dag_common/sqlite_memory.py`).  A connection in use is left as it is: False then,
        for a later try."""
        released = True
        for lock, conn in (
            (self._lock, self._conn),
            (self._read_lock, self._reads),
            (self._apart_lock, self._apart),
        ):
            if not lock.acquire(blocking=False):
                released = False
                continue
            try:
                sqlite_memory.release(conn, self.path)
            except sqlite3.ProgrammingError:  # closed meanwhile
                pass
            finally:
                lock.release()
        return released

    def mark_dirty(self) -> None:
        """The database is in use: a crash from now on is a dirty shutdown."""
        if self._header.state is not DatabaseState.DIRTY_SHUTDOWN:
            with self._transaction():
                self._write_header(replace(self._header, state=DatabaseState.DIRTY_SHUTDOWN))

    def backup_to(
        self, dest: Path, interrupt: Interrupt | None = None, *, step: int = _BACKUP_STEP
    ) -> DatabaseHeader:
        """A consistent copy of this file at `dest` (SQLite online backup, `step` pages at a
        time); the copy's header.  `interrupt` stops it between two steps
        (sqlite3.OperationalError): a whole file.

        Copied on a connection of its own inside one read transaction: the copy is the file
        as of that transaction's first read, whatever commits meanwhile, and no write waits
        for it (WAL).  Without it, SQLite's backup starts again from the first page whenever
        another connection commits between two steps: a passive's backup (its reader's
        connection) never ended while replay committed, once the file took more than one
        step; and the copy held the writer's lock, stalling the active's writes throughout."""

        def stepped(_status: int, _remaining: int, _total: int) -> None:
            if interrupt is not None and interrupt.asked:
                raise sqlite3.OperationalError("interrupted")

        source = self._connect(self.path)
        try:
            source.execute("BEGIN")
            header = read_header(source, self.path)  # the snapshot is taken at this read
            target = sqlite3.connect(dest)
            try:
                source.backup(target, pages=step, progress=stepped)
            finally:
                target.close()
            return header
        finally:
            source.close()  # and its read transaction with it


def _rows_size(puts: PutRows) -> int:
    """`_body_chars` of a transaction from its `put_rows`: each body's size in UTF-8 as its
    row has it (a body's characters, but for one that is not ASCII), without a Python step a
    put on the replay's critical path (bench/README.md, issue 51's replay against the base)."""
    return sum(map(_SIZE, puts.rows))


_SIZE = itemgetter(SIZE)


def _body_chars(txn: Transaction) -> int:
    """Its puts' bodies' sizes: a counted one's in UTF-8 (the LLR flush gives a body read
    back from the log as its bytes alone, `active/logged_bodies.py`), another's in characters."""
    return sum(
        op.body.utf8_size if type(op.body) is CountedText else len(op.body)
        for op in txn.ops
        if type(op) is PutItem
    )
