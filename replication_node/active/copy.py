"""The active copy of a database: log stream, database file and LLR overlay, wired.

Writes: `commit(ops)` appends to the log (durable, group commit); the stream's listener adds
the transaction to the LLR overlay before the committer is answered, so an acknowledged
write is visible to every later read.  When a generation closes, the generations at or below
committed - llr_depth are written into the database file (waypoint = committed - llr_depth),
then dropped from the overlay.

Reads merge the overlay over the database file.

Change numbers and the ceiling: the active hands out change numbers in log order.  With the
announcement of each generation's first commit (`LogStream`), it publishes a ceiling: the
highest number handed out so far plus the log file size.  Each change number names one
operation of at least one byte in the log, so no commit of that generation can carry a
number above it (numbers of a transaction refused as too large are taken back, so every
number handed out is written).  A newly mounted active numbers from the highest of its own
and the cluster store's ceiling: the numbers of a lost open log are never handed out again.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from datetime import datetime
from operator import attrgetter

from dag_common.clock import Clock
from dag_common.items_query import ItemsQuery
from dag_common.mailbox_digest import DigestRow
from dag_common.model import RollCause
from dag_common.store_api import FolderStatus
from replication_node.active import llr_pacing
from replication_node.active.lease import LeaseKeeper
from replication_node.active.listing import (
    bodies_apart,
    digest_rows,
    items_page,
    listing_apart,
    live_count,
    with_body,
)
from replication_node.active.logged_bodies import LogBodies, body_bytes, read_back, without_body
from replication_node.errors import SwitchingOver, TransactionTooLarge
from replication_node.log.body import BodyReader
from replication_node.log.events import (
    ClosedGeneration,
    Committed,
    StreamEvent,
    Transaction,
)
from replication_node.log.files import OS_FILES, LogFiles
from replication_node.log.logdir import finish_interrupted_roll
from replication_node.log.logfile import ContentDigest
from replication_node.log.logstream import LogStream
from replication_node.log.operations import AssignUids, Operation, RecordBackup, last_cn
from replication_node.log.recovery import plan_recovery
from replication_node.log.spanning import BlobId, BlobRef
from replication_node.log.writer import OpenLogWriter
from replication_node.storage.database import Database
from replication_node.storage.file_reads import Held
from replication_node.storage.header import DatabaseHeader, DatabaseState
from replication_node.storage.ops import SEEN, floored, folder_floor
from replication_node.storage.overlay import LlrOverlay
from replication_node.storage.paths import CopyPaths
from replication_node.storage.reader import FolderRow, ItemRow, ItemsPage, MailboxRow

logger = logging.getLogger(__name__)

# Announce (generation, change-number ceiling) to the cluster store; False: not the active.
OpenLogPublisher = Callable[[int, int], Awaitable[bool]]


class ActiveCopy:
    """A mounted database: takes writes, writes the log stream, serves reads."""

    def __init__(
        self,
        *,
        paths: CopyPaths,
        db: Database,
        stream: LogStream,
        overlay: LlrOverlay,
        llr_depth: int,
        clock: Clock,
        close_times: dict[int, datetime],
        required_after: dict[int, int] | None = None,
        recovery_notes: tuple[str, ...] = (),
        change_number_floor: int = 0,
        publish_open_log: OpenLogPublisher | None = None,
        lease: LeaseKeeper | None = None,
        pause: Callable[[float], None] = time.sleep,
    ) -> None:
        self.paths = paths
        self.db = db
        self.stream = stream
        self.overlay = overlay
        self.llr_depth = llr_depth
        self._clock = clock
        self._close_times = close_times
        # Logs Required after each closed generation the database file does not have yet.
        self._required_after = dict(required_after or {})
        # The highest change number this copy holds (its file's and its logs'), and the
        # cluster store's ceiling it numbers above: what a lossy activation reserves between.
        self.held_change_number = max(db.header.last_change_number, overlay.max_change_number)
        self.change_number_floor = change_number_floor
        self._change_number = max(self.held_change_number, change_number_floor)
        self._publish_open_log = publish_open_log
        if publish_open_log is not None:
            stream.set_announcer(self._announce)
        self._lease = lease
        if lease is not None:
            stream.set_fence(lease.confirm)
        self._flush_lock = asyncio.Lock()
        self._flush_tasks: set[asyncio.Task[None]] = set()
        self.llr_flush_failures = 0
        self.recovery_notes = recovery_notes
        self.last_closed_time: datetime | None = max(close_times.values(), default=None)
        # The database file's content digest as of its waypoint: what a roll writes.
        self.flushed_digest = ContentDigest(db.header.waypoint, db.content_digest)
        # The last generation whose close this copy has heard of (`_on_event`): every
        # transaction of it and before is in the overlay.  The stream's own generation runs
        # ahead of that while a batch is written (the writer thread rolls in the middle of
        # it, and its transactions reach the overlay only once it is written), so the LLR
        # flush never goes past this one.
        self._closed_seen = stream.last_closed_generation
        stream.add_listener(self._on_event)
        # LLR's paced writes of large bodies give way to the log's commits (`llr_pacing`).
        self._pause = pause
        db.pace = self._give_way

    @functools.cached_property
    def bodies(self) -> LogBodies:
        """The overlay's staged bodies, read back from the log (`logged_bodies`)."""
        return LogBodies(self.paths.logs)

    @classmethod
    async def mount(
        cls,
        *,
        paths: CopyPaths,
        log_file_size: int,
        llr_depth: int,
        clock: Clock,
        create: bool = False,
        change_number_floor: int = 0,
        publish_open_log: OpenLogPublisher | None = None,
        lease: LeaseKeeper | None = None,
        synchronous_copies: int = 0,
        synchronous_wait: float = 5.0,
        epoch: int = 0,
        pause: Callable[[float], None] = time.sleep,
        log_files: LogFiles = OS_FILES,
    ) -> ActiveCopy:
        """Open (recovering from a crash) or create the database and its log stream.

        `change_number_floor`: the cluster store's change-number ceiling (numbers start above
        it).  `publish_open_log(generation, ceiling)`: announces each generation's first
        commit before it is answered, and the records recovered in E00.log before the stream
        takes writes (raises `Deposed` if the store names another active).  `lease`: the
        active's lease, without which no commit is acknowledged (`lease.py`).  `epoch`: the
        stream incarnation of this mount, named by every commit's LSN.  `pause`: how LLR's
        paced writes wait (`llr_pacing`; a worker thread calls it).  `log_files`: the file
        steps of the log's writer, its roll and its spares (`log/files.py`)."""
        paths.root.mkdir(parents=True, exist_ok=True)
        if create and not paths.database.exists():
            db = Database.create(
                paths.database, database_signature=uuid.uuid4(), log_signature=uuid.uuid4()
            )
        else:  # in a thread: an open may migrate the file's schema (`storage/schema.py`)
            db = await asyncio.to_thread(Database.open, paths.database)
        if paths.logs.exists():
            await asyncio.to_thread(finish_interrupted_roll, paths.logs, log_files)
        plan = await asyncio.to_thread(plan_recovery, paths.logs, db.header)
        overlay = LlrOverlay()
        for txn in plan.transactions:
            overlay.add(txn, db)
        writer = OpenLogWriter.open(
            log_dir=paths.logs,
            database_signature=db.header.database_signature,
            log_signature=db.header.log_signature,
            log_file_size=log_file_size,
            clock=clock,
            open_scan=plan.open_scan,
            next_generation=db.header.waypoint + 1,
            pending=plan.pending,
            epoch=epoch,
            files=log_files,
        )
        stream = LogStream(writer=writer, clock=clock)
        db.mark_dirty()
        copy = cls(
            paths=paths,
            db=db,
            stream=stream,
            overlay=overlay,
            llr_depth=llr_depth,
            clock=clock,
            close_times=dict(plan.close_times),
            required_after=plan.required_after,
            recovery_notes=plan.notes,
            change_number_floor=change_number_floor,
            publish_open_log=publish_open_log,
            lease=lease,
            pause=pause,
        )
        stream.set_digest_provider(lambda: copy.flushed_digest)
        stream.set_synchronous(synchronous_copies, synchronous_wait)
        try:
            await copy._flush_llr()
            await stream.announce_recovered()
            # Bodies staged before the crash and never committed: never acknowledged.
            await stream.abort(stream.pending_bodies)
        except BaseException:
            await copy.crash_close()
            raise
        stream.start()
        return copy

    # ---- writes --------------------------------------------------------------------------

    def next_change_number(self) -> int:
        """Reserve the next change number (called in log order, before commit)."""
        self._change_number += 1
        return self._change_number

    def now(self) -> datetime:
        """The time, by the clock that stamps commits."""
        return self._clock.now()

    def unnumbered(self) -> bool:
        """Whether anything waits for `AssignUids` (a file, or logs, from before UIDs)."""
        overlay = self.overlay
        held = overlay.transactions_through(overlay.generations[-1]) if len(overlay) else []
        numbering = any(type(op) is AssignUids for txn in held for op in txn.ops)
        return (
            (self.db.unnumbered() and not numbering)
            or any(row.uidvalidity_next == 0 for _, row in overlay.mailboxes.values())
            or any(r is not None and r.uidvalidity == 0 for _, r in overlay.folders.values())
            or any(not r.deleted and r.uid == 0 for _, r in overlay.items.values())
        )

    @property
    def highest_change_number(self) -> int:
        """The highest change number handed out so far."""
        return self._change_number

    async def admit(self) -> None:
        """Before a write hands out change numbers: LeaseLost while the lease cannot be
        renewed; SynchronousCopiesMissing (after `synchronous_wait`) while fewer copies than
        `synchronous_copies` follow in block mode.  Nothing is written either way."""
        if self._lease is not None:
            self._lease.refuse_without_lease()
        await self.stream.await_synchronous_followers()

    async def stage(self, body: BodyReader, *, continues: BlobId | None = None) -> BlobRef:
        """Stage a large body in the log (`LogStream.stage`, `continues` one staged as it
        arrives); refused like a commit, before anything is written, while the lease cannot
        be shown or a switchover began."""
        if self._lease is not None:
            self._lease.refuse_without_lease()
        return await self.stream.stage(body, continues=continues)

    async def abort_staged(self, blobs: list[BlobRef]) -> None:
        """Abort staged bodies no commit will use; best effort: a stream that stopped meanwhile
        leaves them pending in its log, and the recovery of whoever mounts it aborts them."""
        try:
            await self.stream.abort([b.id for b in blobs])
        except Exception as exc:
            logger.warning("staged bodies left pending for recovery to abort: %s", exc)

    async def commit(
        self, ops: Sequence[Operation], *, staged: Mapping[int, BlobRef] | None = None
    ) -> Committed:
        """Make `ops` one durable transaction; return its LSN and commit time.  Refused
        before anything is written: LeaseLost while the lease cannot be renewed,
        SwitchingOver once a switchover began (the check and the stream's queueing have no
        await between them, so the switchover's roll is queued behind every commit
        admitted).  `staged`: the bodies staged for some of its puts, by index
        (`LogStream.commit`)."""
        try:
            if self._lease is not None:
                self._lease.refuse_without_lease()
            return await self.stream.commit(ops, self._clock.now(), staged=staged)
        except (TransactionTooLarge, SwitchingOver):
            # Refused before anything was queued, with no await since its numbers were
            # handed out: take them back, so every number handed out is in the log (the
            # ceiling's premise).
            numbered = [op for op in ops if not isinstance(op, RecordBackup)]
            if numbered and self._change_number == max(map(last_cn, numbered)):
                self._change_number = min(op.cn for op in numbered) - 1
            raise

    async def _announce(self, generation: int) -> bool:
        assert self._publish_open_log is not None
        ceiling = self._change_number + self.stream.log_file_size
        return await self._publish_open_log(generation, ceiling)

    def listing_apart(
        self, mailbox: str, folder: str, since_modseq: int = 0
    ) -> Callable[[], list[ItemRow] | None] | None:
        """A folder's listing read off the loop, the overlay merged in (`listing.py`)."""
        floor = folder_floor(self.folder_rows(mailbox), folder)
        return listing_apart(self.overlay, self.db, mailbox, folder, since_modseq, floor)

    def bodies_apart(self, mailbox: str, ids: Sequence[str]) -> tuple[Database, Held]:
        db, held = bodies_apart(self.overlay, self.db, mailbox, ids)  # (`listing.py`)
        return db, read_back(held, self.overlay, self.bodies, mailbox)

    async def roll(self, *, force: bool = False, cause: RollCause = RollCause.DEMAND) -> int | None:
        """Close the open log now (the mover's roll); the generation closed, if any."""
        return await self.stream.roll(force=force, cause=cause)

    def _on_event(self, event: StreamEvent) -> None:
        if isinstance(event, Transaction):
            self.overlay.add(event, self.db)
        elif isinstance(event, ClosedGeneration):
            self._closed_seen = max(self._closed_seen, event.generation)
            self._close_times[event.generation] = event.close_time
            self._required_after[event.generation] = event.required_from
            self.last_closed_time = event.close_time
            task = asyncio.get_running_loop().create_task(self.flush_llr_after_roll())
            self._flush_tasks.add(task)
            task.add_done_callback(self._flush_tasks.discard)

    def _give_way(self) -> int | None:
        """Before each chunk of LLR's paced write of a large body (worker thread): held back
        while a large body is staged into the log, a pause while small commits flow, unless
        LLR is too far behind (`llr_pacing`).  Returns the chunk's size (None: the
        write-behind's own)."""
        for _ in range(llr_pacing.YIELD_STEPS):
            if not self._yielding():
                break
            self._pause(llr_pacing.YIELD_STEP)
        seconds = llr_pacing.llr_pause(
            commits_flowing=self.stream.commits_flowing, backlog=self._llr_backlog()
        )
        if seconds:
            self._pause(seconds)
        return llr_pacing.llr_chunk(seconds)

    async def _yield_to_staging(self) -> None:
        """Before a flush a roll starts: wait while a large body is staged into the log, as
        `_give_way` does before each chunk (`llr_pacing`), so that not even a small write
        of the header (and its fsync) goes to the disk meanwhile.  Real-time waits, as the
        chunks' pauses: bounded by YIELD_STEPS whatever the stream's clock does."""
        for _ in range(llr_pacing.YIELD_STEPS):
            if not self._yielding():
                return
            await asyncio.sleep(llr_pacing.YIELD_STEP)

    def _yielding(self) -> bool:
        """Whether LLR holds back for a large body staged into the log (`llr_pacing`)."""
        return llr_pacing.yields(
            staging=self.stream.staging,
            commits_flowing=self.stream.commits_flowing,
            backlog=self._llr_backlog(),
        )

    def _llr_backlog(self) -> int:
        """How many generations LLR is behind the one it is due to write (any thread)."""
        return self._closed_seen + 1 - self.llr_depth - self.db.header.waypoint

    async def flush_llr_after_roll(self) -> None:
        """The LLR flush a roll (or a mend: `log_mend`) starts.  A failure (the database file's
        disk full) is reported, never dropped: nothing is lost by it, since the transactions
        stay in the overlay and in the log, and the next roll tries again."""
        try:
            await self._yield_to_staging()
            await self._flush_llr()
        except Exception as exc:
            self.llr_flush_failures += 1
            logger.error(
                "LLR: writing into %s failed (%d so far; kept in memory and in the log, "
                "tried again at the next roll): %s",
                self.paths.database.name,
                self.llr_flush_failures,
                exc,
            )

    async def _flush_llr(self, *, through: int | None = None) -> None:
        """Write into the database file what LLR no longer needs to hold back."""
        async with self._flush_lock:
            committed = self.stream.generation
            closed = self._closed_seen  # not the stream's: see __init__
            target = closed + 1 - self.llr_depth if through is None else through
            target = min(target, closed)
            if target <= self.db.header.waypoint:
                return
            txns = self.overlay.transactions_through(target)
            # Unknown only if no roll said so: the file's own value is never above the truth
            # (a body pending at `target` and begun at or below its waypoint was pending there).
            required = self._required_after.get(target, self.db.header.first_required)
            await asyncio.to_thread(
                self.db.apply,
                self.bodies.with_bodies(txns),
                body_bytes=body_bytes(txns),
                waypoint=target,
                committed=committed,
                last_log_time=self._close_times.get(target),
                required_from=required,
            )
            self.bodies.flushed(below=required or target + 1)  # the next reads from there
            for gen in [g for g in self._required_after if g <= target]:
                del self._required_after[gen]
            # What the next roll writes into the log for the copies to compare.
            self.flushed_digest = ContentDigest(target, self.db.content_digest)
            self.overlay.forget_through(target)
            for gen in [g for g in self._close_times if g < target]:
                del self._close_times[gen]
            logger.debug("LLR: database written through generation %d", target)

    async def dismount(self) -> DatabaseHeader:
        """Clean shutdown: close the open log, write everything, mark the file clean."""
        await self.stream.roll(cause=RollCause.DISMOUNT)
        await self.stream.close()
        if self._flush_tasks:
            await asyncio.gather(*self._flush_tasks)
        await self._flush_llr(through=self.stream.last_closed_generation)
        self.db.close(clean=True)
        return self.db.header

    async def crash_close(self) -> None:
        """Stop without a clean shutdown (tests, and a node that must stop fast)."""
        await self.stream.close()
        await self.llr_settled()
        self.db.close()

    async def llr_settled(self) -> None:
        """Return once the LLR flushes that the rolls so far started have ended (each one
        reports its own failure; none is raised here)."""
        if self._flush_tasks:
            await asyncio.gather(*self._flush_tasks, return_exceptions=True)

    # ---- reads (database file merged with the overlay) -----------------------------------

    @property
    def header(self) -> DatabaseHeader:
        return self.db.header

    @property
    def merged_header(self) -> DatabaseHeader:
        """The header as the log has it: the file's, with the backup stamps still in the
        LLR overlay (the active shows a backup at once; its passive copies once replayed)."""
        return self.overlay.over_header(self.db.header)

    @property
    def state(self) -> DatabaseState:
        return self.db.header.state

    def mailboxes(self) -> list[MailboxRow]:
        hides = self.overlay.hides
        rows = {r.mailbox: r for r in self.db.mailboxes() if not hides(r.mailbox)}
        rows.update({name: row for name, (_, row) in self.overlay.mailboxes.items()})
        return [rows[k] for k in sorted(rows)]

    def mailbox(self, name: str) -> MailboxRow | None:
        return self.overlay.mailbox(name) or (
            None if self.overlay.hides(name) else self.db.mailbox(name)
        )

    def folders(self, mailbox: str) -> list[str]:
        return [r.folder for r in self.folder_rows(mailbox)]

    def folder_rows(self, mailbox: str) -> list[FolderRow]:
        """A mailbox's folders with their counters, by name."""
        rows = self.overlay.current_folders(self.db, mailbox)
        return [rows[k] for k in sorted(rows)]

    def _file_rows(self, mailbox: str, rows: list[ItemRow]) -> list[ItemRow]:
        """Rows read from the file as the overlay's generations leave them (`over_file`)."""
        overlay = self.overlay
        if not overlay.renames.get(mailbox) and not overlay.assigned:
            return rows
        return [overlay.over_file(r) for r in rows]  # type: ignore[misc]

    def items(self, mailbox: str, since_change: int = 0) -> list[ItemRow]:
        """Every change after `since_change` with its body: the overlay's as `_with_body`
        gives them, the file's read whole (tests and benches: no route lists so)."""
        stored = [] if self.overlay.hides(mailbox) else self.db.items(mailbox, since_change)
        rows = {r.item_id: r for r in self._file_rows(mailbox, stored)}
        for (m, item_id), (_, row) in self.overlay.items.items():
            if m == mailbox:
                if row.change_number > since_change:
                    rows[item_id] = self._with_body(row)
                else:
                    rows.pop(item_id, None)
        return sorted(rows.values(), key=attrgetter("change_number"))

    def folder_status(self, mailbox: str) -> list[FolderStatus]:
        """Each folder's counters with its live items and those not `\\Seen`: the file's
        counts, corrected item by item for what the overlay changed (its rows, the file's
        rows renamed since)."""
        folders = self.folder_rows(mailbox)
        hidden = self.overlay.hides(mailbox)
        counts: dict[str, list[int]] = {f.folder: [0, 0] for f in folders}
        if not hidden:
            for folder, (messages, unseen) in self.db.folder_counts(mailbox).items():
                name = self.overlay.renamed(mailbox, folder)
                if name in counts:
                    counts[name][0] += messages
                    counts[name][1] += unseen
        for (m, item_id), (_, row) in self.overlay.items.items():
            if m != mailbox:
                continue
            old = None if hidden else self.overlay.over_file(self.db.item_head(mailbox, item_id))
            for sign, each in ((-1, old), (1, row)):
                if each is not None and not each.deleted and each.folder in counts:
                    counts[each.folder][0] += sign
                    counts[each.folder][1] += sign * (SEEN not in each.flags)
        return [f.status(*counts[f.folder]) for f in folders]

    def folder_items(self, mailbox: str, folder: str, since_modseq: int = 0) -> list[ItemRow]:
        """A folder's items without bodies, by UID (`Database.folder_items`), the overlay's
        over the file's."""
        rows: dict[str, ItemRow] = {}
        floor = folder_floor(self.folder_rows(mailbox), folder)
        if not self.overlay.hides(mailbox):
            # the file's modseqs are final unless AssignUids is held here; below the
            # folder's floor (the overlay's may be above the file's) every item is listed
            since = 0 if self.overlay.assigned or floor > since_modseq else since_modseq
            for name in self.overlay.file_names(mailbox, folder):
                stored = self.db.folder_items(mailbox, name, since, tombstones=since_modseq > 0)
                for row in self._file_rows(mailbox, stored):
                    if row.folder == folder:
                        rows[row.item_id] = row
        for (m, item_id), (_, row) in self.overlay.items.items():
            if m == mailbox:
                rows.pop(item_id, None)
                if row.folder == folder:
                    rows[item_id] = without_body(row)
        listed = [
            r
            for r in (floored(r, floor) for r in rows.values())
            if (since_modseq == 0 and not r.deleted)
            or (since_modseq > 0 and r.modseq > since_modseq)
        ]
        return sorted(listed, key=_uid)

    def moved_out(self, mailbox: str, uidvalidity: int, since_modseq: int) -> list[int]:
        """The UIDs moved out of the folder of `uidvalidity` after `since_modseq`
        (`Database.moved_out`), the overlay's with the file's."""
        uids = set()
        if not self.overlay.hides(mailbox):
            uids.update(self.db.moved_out(mailbox, uidvalidity, since_modseq))
        for (m, validity, uid), (_, modseq) in self.overlay.moved_out.items():
            if m == mailbox and validity == uidvalidity and modseq > since_modseq:
                uids.add(uid)
        return sorted(uids)

    def digest_rows(self, mailbox: str) -> list[DigestRow]:
        return digest_rows(self.overlay, self.db, mailbox)  # (`listing.py`)

    def live_count(self, mailbox: str, since_change: int) -> int:
        return live_count(self.overlay, self.db, mailbox, since_change)  # (`listing.py`)

    def items_page(self, mailbox: str, query: ItemsQuery, *, blobs: bool = False) -> ItemsPage:
        """A page of the file's changes with the overlay's merged in, cut by count and bytes
        over both (`listing.items_page`), the overlay's bodies as `_with_body` gives them.
        With `blobs`, the file's large bodies are read a part at a time as they are written."""
        return items_page(
            self.overlay, self.db, mailbox, query, with_body=self._with_body, blobs=blobs
        )

    def item(self, mailbox: str, item_id: str) -> ItemRow | None:
        """An item's row, no body read: its body only if the overlay holds it in memory,
        else "" with its hash (`ItemRow`), as the overlay holds it or the file's head.  No
        reader needs a body whole: those that send one read it a part at a time (the
        listing, `bodies_apart`)."""
        return self.overlay.current_item(self.db, mailbox, item_id)

    def _with_body(self, row: ItemRow) -> ItemRow:
        """An overlay row with its body as a reader is given it (`listing.with_body`)."""
        return with_body(self.overlay, self.db, self.bodies, row)


_uid = attrgetter("uid", "item_id")
