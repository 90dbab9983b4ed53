"""Small in-memory fakes of what a mover talks to (tests only), and `record`, a move's
stored record to start from.

`FakeNodes` keeps, per database, a log of acknowledged transactions and the state they
make, in an epoch.  `failover(db, lose=N)` drops the last N transactions (an unshipped open
log), bumps the epoch and rebuilds the state from what is left; like a real new active, it
numbers changes again from its own highest change number, reusing the lost numbers.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any

from dag_common.clock import ManualClock
from dag_common.items_query import ItemsQuery
from dag_common.mailbox_digest import body_hash, mailbox_digest
from dag_common.model import Lsn
from dag_common.store_api import (
    Digest,
    Item,
    Items,
    LogPosition,
    Mailbox,
    Rolled,
    Written,
    utf8_len,
)
from mrs_client.body_budget import BodyBudget
from mrs_client.errors import NodeCallError
from mrs_client.move_store.embedded import EmbeddedMoveStore
from mrs_client.move_store.interface import (
    AnswerRow,
    MoveLease,
    MoveRecord,
    answer_row,
    new_move_id,
)
from mrs_client.mover import Mover
from mrs_client.policy import GuaranteeAnswer, GuaranteeStatus, MoveSettings, MoveState


@dataclass
class _Box:
    display_name: str
    folders: set[str]
    locked: bool = False
    soft_deleted: bool = False
    items: dict[str, Item] = field(default_factory=dict)


class FakeDatabase:
    """One database's active copy: a log of transactions, the state it makes, an epoch."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.epoch = 1
        self.generation = 1
        self.log: list[tuple[str, tuple[Any, ...]]] = []
        self.boxes: dict[str, _Box] = {}
        self.cn = 0
        # The open log: its durable length (a 512-byte header, then 100 bytes a transaction)
        # and where its last transaction starts; who follows it in block mode.
        self.durable = 512
        self.last_offset = 0
        self.passive_copies: tuple[str, ...] = ("mbx2", "mbx3")
        self.block_followers: tuple[str, ...] = ()

    def _apply(self, op: str, args: tuple[Any, ...]) -> None:
        if op == "create":
            name, display_name, folders, locked = args
            self.boxes[name] = _Box(display_name, set(folders), locked)
        elif op == "folder":
            self.boxes[args[0]].folders.add(args[1])
        elif op == "put":
            name, item = args
            self.boxes[name].items[item.item_id] = item
            self.cn = max(self.cn, item.change_number)
        elif op == "delete":
            name, item_id, cn = args
            old = self.boxes[name].items[item_id]
            self.boxes[name].items[item_id] = replace(old, body="", deleted=True, change_number=cn)
            self.cn = max(self.cn, cn)
        elif op == "drop":
            del self.boxes[args[0]]
        elif op == "state":
            name, key, value = args
            setattr(self.boxes[name], key, value)

    def commit(self, ops: list[tuple[str, tuple[Any, ...]]]) -> Written:
        for op, args in ops:
            self.log.append((op, args))
            self._apply(op, args)
        self.last_offset, self.durable = self.durable, self.durable + 100
        lsn = Lsn(generation=self.generation, offset=self.last_offset or 512, epoch=self.epoch)
        return Written(epoch=self.epoch, change_number=self.cn, lsn=lsn)

    def next_cn(self) -> int:
        self.cn += 1
        return self.cn

    def failover(self, *, lose: int = 0) -> None:
        """A new active, in a new epoch, without the last `lose` transactions."""
        if lose:
            del self.log[-lose:]
        self.durable = 512  # the new active's open log
        self.boxes = {}
        self.cn = 0
        for op, args in self.log:
            self._apply(op, args)
        self.epoch += 1

    def live(self, mailbox: str) -> dict[str, tuple[str, str, str]]:
        box = self.boxes[mailbox]
        return {k: (i.folder, i.subject, i.body) for k, i in box.items.items() if not i.deleted}


def _head(item: Item) -> Item:
    """`item` as a listing without bodies gives it."""
    if item.deleted:
        return replace(item, body="", body_size=0)
    return replace(item, body="", body_hash=body_hash(item.body), body_size=utf8_len(item.body))


class Crash(BaseException):
    """What a test raises inside a call to play kill -9 of the mover."""


class FakeNodes:
    """store_api.NodeStore over FakeDatabases, with hooks before each call."""

    def __init__(self, *names: str) -> None:
        self.dbs = {n: FakeDatabase(n) for n in names}
        self.calls: list[tuple[str, str]] = []
        self.trace: list[tuple[Any, ...]] = []  # digests and soft-deletes, in order
        self.before: list[Callable[[str, str, int], None]] = []  # (method, db, call number)
        self.drops: set[str] = set()  # item ids the target acknowledges and loses at once
        # (database, change number) of rows a node cannot read: any listing reaching one, and
        # the digest of its mailbox, answer 500 as a real node does (sqlite3 cannot decode).
        self.damaged: set[tuple[str, int]] = set()
        # ... rows whose body alone it cannot read: only a listing with bodies reaching one
        # answers 500 (without bodies, and for the digest, the hash kept beside it serves).
        self.damaged_bodies: set[tuple[str, int]] = set()
        self.listings: list[tuple[str, int, bool]] = []  # (database, since, bodies) asked

    def _unreadable(self, database: str, rows: Any, *, bodies: bool = False) -> None:
        damaged = self.damaged | self.damaged_bodies if bodies else self.damaged
        for row in rows:
            if (database, row.change_number) in damaged:
                raise NodeCallError(
                    f"GET {database}: HTTP 500: internal error (OperationalError: Could not "
                    f"decode to UTF-8 column 'body')",
                    status=500,
                    detail="internal error (OperationalError: Could not decode to UTF-8 column)",
                )

    def _call(self, method: str, database: str, mailbox: str | None = None) -> FakeDatabase:
        self.calls.append((method, database))
        n = sum(1 for m, d in self.calls if (m, d) == (method, database))
        try:  # as node_client does: an error names the database called
            for hook in list(self.before):
                hook(method, database, n)
        except NodeCallError as exc:
            exc.database = database
            raise
        db = self.dbs[database]
        if mailbox is not None and mailbox not in db.boxes:
            raise NodeCallError(
                f"{method} {database}: HTTP 404: no mailbox {mailbox!r}", status=404
            )
        return db

    # -- the Protocol --

    async def mailbox(self, database: str, mailbox: str) -> Mailbox | None:
        db = self._call("mailbox", database)
        box = db.boxes.get(mailbox)
        if box is None:
            return None
        return Mailbox(
            name=mailbox,
            display_name=box.display_name,
            folders=tuple(sorted(box.folders)),
            locked=box.locked,
            soft_deleted=box.soft_deleted,
            epoch=db.epoch,
        )

    async def create_mailbox(
        self,
        database: str,
        mailbox: str,
        *,
        display_name: str,
        folders: list[str],
        locked: bool,
        replace_soft_deleted: bool = False,
    ) -> Written:
        db = self._call("create_mailbox", database)
        box = db.boxes.get(mailbox)
        replacing = box is not None and box.soft_deleted and replace_soft_deleted
        assert mailbox not in db.boxes or replacing, "exists"
        ops = [("drop", (mailbox,))] if replacing else []
        return db.commit([*ops, ("create", (mailbox, display_name, tuple(folders), locked))])

    async def create_folder(self, database: str, mailbox: str, folder: str) -> Written:
        db = self._call("create_folder", database, mailbox)
        return db.commit([("folder", (mailbox, folder))])

    async def items(self, database: str, mailbox: str, query: ItemsQuery) -> Items:
        """As a node lists: a page cut by `limit` changes and, as its bodies (or without
        `bodies`, its rows) reach `page_bytes`, one change at least."""
        since_change, limit, page_bytes = query.since_change, query.limit, query.page_bytes
        count, bodies = query.count, query.bodies
        db = self._call("items", database, mailbox)
        self.listings.append((database, since_change, bodies))
        rows = sorted(
            (i for i in db.boxes[mailbox].items.values() if i.change_number > since_change),
            key=lambda i: i.change_number,
        )
        live = sum(not i.deleted for i in rows) if count else None
        cut = len(rows) if limit is None else min(limit, len(rows))
        if page_bytes is not None:
            held = 0
            for n, row in enumerate(rows[:cut]):
                held += utf8_len(row.body) if bodies else len(row.subject) + 256
                if held >= page_bytes:
                    cut = n + 1
                    break
        page = rows[:cut]
        self._unreadable(database, page, bodies=bodies)
        if not bodies:
            page = [_head(row) for row in page]
        if cut < len(rows):
            return Items(tuple(page), page[-1].change_number, db.epoch, more=True, live=live)
        last = max((i.change_number for i in page), default=since_change)
        return Items(tuple(page), last, db.epoch, live=live)

    async def put_items(self, database: str, mailbox: str, items: list[Item]) -> Written:
        for item in items:
            item.entry()  # an item listed without its body cannot be written
        db = self._call("put_items", database, mailbox)
        ops = [
            ("put", (mailbox, replace(i, change_number=db.next_cn(), deleted=False))) for i in items
        ]
        written = db.commit(ops)
        for item_id in self.drops & {i.item_id for i in items}:
            del db.boxes[mailbox].items[item_id]
        return written

    async def delete_item(self, database: str, mailbox: str, item_id: str) -> Written | None:
        db = self._call("delete_item", database, mailbox)
        item = db.boxes[mailbox].items.get(item_id)
        if item is None or item.deleted:
            return None
        return db.commit([("delete", (mailbox, item_id, db.next_cn()))])

    async def delete_mailbox(self, database: str, mailbox: str) -> bool:
        db = self._call("delete_mailbox", database)
        if mailbox not in db.boxes:
            return False
        db.commit([("drop", (mailbox,))])
        return True

    async def set_state(self, database: str, mailbox: str, action: str) -> Written:
        db = self._call(action, database, mailbox)
        key, value = {
            "lock": ("locked", True),
            "unlock": ("locked", False),
            "soft-delete": ("soft_deleted", True),
        }[action]
        if action == "soft-delete":
            self.trace.append(("soft-delete", database, mailbox, db.epoch))
        return db.commit([("state", (mailbox, key, value))])

    async def roll_log(self, database: str) -> Rolled:
        db = self._call("roll_log", database)
        db.generation += 1
        db.durable = 512
        return Rolled(generation=db.generation - 1, epoch=db.epoch)

    async def log_position(self, database: str) -> LogPosition:
        db = self._call("log_position", database)
        return LogPosition(
            open_generation=db.generation,
            durable=db.durable,
            open_records=db.durable > 512,
            block_followers=db.block_followers,
            passive_copies=db.passive_copies,
            epoch=db.epoch,
        )

    async def digest(self, database: str, mailbox: str) -> Digest | None:
        db = self._call("digest", database)
        box = db.boxes.get(mailbox)
        if box is None:
            return None
        self._unreadable(database, box.items.values())
        d = mailbox_digest(mailbox, (asdict(i) for i in box.items.values()))
        self.trace.append(("digest", database, mailbox, db.epoch, d.digest))
        return Digest(
            mailbox=mailbox,
            item_count=d.item_count,
            digest=d.digest,
            last_change_number=d.last_change_number,
            epoch=db.epoch,
        )

    # -- for tests --

    def fill(self, database: str, mailbox: str, n: int, *, first: int = 0, body: str = "b") -> None:
        """Write a mailbox's items as its users would (one transaction per 10 items)."""
        db = self.dbs[database]
        if mailbox not in db.boxes:
            db.commit([("create", (mailbox, mailbox.title(), ("Inbox", "Projects"), False))])
        for start in range(first, first + n, 10):
            db.commit(
                [
                    (
                        "put",
                        (
                            mailbox,
                            Item(
                                f"m{i}",
                                "Projects" if i % 3 else "Inbox",
                                f"s{i}",
                                f"{body} {i}",
                                db.next_cn(),
                            ),
                        ),
                    )
                    for i in range(start, min(first + n, start + 10))
                ]
            )

    def delete(self, database: str, mailbox: str, item_id: str) -> None:
        db = self.dbs[database]
        db.commit([("delete", (mailbox, item_id, db.next_cn()))])


class FakeGuarantee:
    """Satisfied at once; the flush answer names the target's epoch if `knows_epochs`
    (False: a service that judges by generation alone, as before the epoch contract).
    `waits`: a service that honours a request's `wait` (issue 14): it judges again every
    0.1 s of the clock until Satisfied or the wait's end, and says how long it waited;
    otherwise it answers at once and does not say (a service from before)."""

    def __init__(self, nodes: FakeNodes, *, knows_epochs: bool = True) -> None:
        self.nodes = nodes
        self.knows_epochs = knows_epochs
        self.flushes: list[tuple[str, int, int]] = []  # (database, generation, epoch asked)
        self.flush_offsets: list[int | None] = []  # the offset each flush asked, if any
        self.on_flush: Callable[[str, int, int], GuaranteeAnswer | None] | None = None
        self.on_health: Callable[[str], GuaranteeAnswer | None] | None = None
        self.health_asked: list[datetime] = []  # when each CheckReplicationHealth came
        self.clock: ManualClock | None = None
        self.waits = False
        self.waits_asked: list[timedelta | None] = []

    async def _waiting(
        self, wait: timedelta | None, judge: Callable[[], GuaranteeAnswer]
    ) -> GuaranteeAnswer:
        self.waits_asked.append(wait)
        answer = judge()
        if not self.waits or not wait:
            return answer
        assert self.clock is not None
        start = self.clock.now()
        while answer.status is not GuaranteeStatus.SATISFIED and not answer.lost:
            if self.clock.now() - start >= wait:
                break
            await self.clock.sleep(0.1)
            answer = judge()
        return replace(answer, waited=self.clock.now() - start)

    async def check_health(
        self, database: str, caller_id: str, wait: timedelta | None = None
    ) -> GuaranteeAnswer:
        if self.clock is not None:
            self.health_asked.append(self.clock.now())

        def judge() -> GuaranteeAnswer:
            if self.on_health is not None:
                answer = self.on_health(database)
                if answer is not None:
                    return answer
            return GuaranteeAnswer(GuaranteeStatus.SATISFIED, timedelta(0), "healthy")

        return await self._waiting(wait, judge)

    async def check_flush(
        self,
        database: str,
        caller_id: str,
        lsn: Lsn,
        commit_time: datetime,
        wait: timedelta | None = None,
    ) -> GuaranteeAnswer:
        generation, epoch = lsn.generation, lsn.epoch
        self.flushes.append((database, generation, epoch))
        self.flush_offsets.append(lsn.record_offset)

        def judge() -> GuaranteeAnswer:
            if self.on_flush is not None:
                answer = self.on_flush(database, generation, epoch)
                if answer is not None:
                    return answer
            current = self.nodes.dbs[database].epoch if self.knows_epochs else 0
            return GuaranteeAnswer(GuaranteeStatus.SATISFIED, timedelta(0), "replayed", current)

        return await self._waiting(wait, judge)


class FakeDirectory:
    def __init__(self, entries: dict[str, str]) -> None:
        self.entries = dict(entries)

    async def mailbox_database(self, mailbox: str) -> str | None:
        return self.entries.get(mailbox)

    async def set_mailbox_database(
        self, mailbox: str, database: str, *, expected: str | None
    ) -> bool:
        if self.entries.get(mailbox) != expected:
            return False
        self.entries[mailbox] = database
        return True


def record(**changes: Any) -> MoveRecord:
    """A move's stored record (mv1: alice from DB1 to DB2), with `changes`."""
    now = datetime(2026, 1, 1, tzinfo=UTC)
    base = MoveRecord(
        id="mv1", mailboxes=("alice",), source_db="DB1", target_db="DB2", created=now, updated=now
    )
    return replace(base, **changes)


# ---- a mover over these fakes, on a ManualClock ------------------------------------------

MOVER_SETTINGS = MoveSettings(
    sync_batch=10,
    sync_page=17,  # every move of the tests reads its source in pages, each read ahead
    stall_retry_interval=timedelta(seconds=1),
    health_check_interval=timedelta(seconds=10),
)


class StoredMoves:
    """The move store as a test reads it between two turns of the clock: synchronously."""

    def __init__(self, store: EmbeddedMoveStore) -> None:
        self._store = store

    def get(self, move_id: str) -> MoveRecord | None:
        return self._store.call(self._store._get, move_id)

    def list(self) -> list[MoveRecord]:
        return self._store.call(self._store._list, None, None)

    def answers(self, move_id: str) -> list[AnswerRow]:
        return self._store.call(self._store._answers, move_id)

    def body(self, move_id: str) -> str:
        """The record's JSON as the store holds it."""
        query = "SELECT body FROM move_requests WHERE id=?"
        return self._store.call(lambda: self._store._conn.execute(query, (move_id,)).fetchone()[0])

    def stop_requested(self, move_id: str):
        return self._store.call(self._store._stop_requested, move_id)

    def request_stop(self, move_id, action, now) -> None:
        self._store.call(self._store._request_stop, move_id, action, now)

    def save(self, record: MoveRecord, now) -> MoveRecord:
        """Overwrite a record as an older version of the mover would have left it (under a
        lease of its own, as any writer must)."""
        lease = self._store.call(self._store._claim, record.id, "test", 60.0)
        assert isinstance(lease, MoveLease), "the move is running"
        record = replace(record, updated=now)
        self._store.call(self._store._save, record, lease)
        self._store.call(self._store._release, lease)
        return record


async def settle(store: EmbeddedMoveStore) -> None:
    """Wait until no call to the move store is in flight, and none follows within a few
    turns of the loop: a test's clock moves on only while the code under test waits on the
    clock, never while it waits on the store's thread or is on its way to its next call."""
    quiet = 0
    while quiet < 20:
        if store.in_flight:
            quiet = 0
            await asyncio.sleep(0.0005)  # a poll of the thread's answer, not a wait for time
        else:
            quiet += 1
            await asyncio.sleep(0)


class MoverEnv:
    """A source DB1 holding alice, an empty target DB2, and a mover over fakes."""

    def __init__(self, tmp_path, *, knows_epochs: bool = False, items: int = 120) -> None:
        self.nodes = FakeNodes("DB1", "DB2")
        self.nodes.fill("DB1", "alice", items)
        for i in range(0, items, 25):
            self.nodes.delete("DB1", "alice", f"m{i}")
        self.directory = FakeDirectory({"alice": "DB1"})
        self.guarantee = FakeGuarantee(self.nodes, knows_epochs=knows_epochs)
        self.requests = EmbeddedMoveStore(tmp_path / "cluster.db")
        self.stored = StoredMoves(self.requests)
        self.clock = ManualClock()
        self.guarantee.clock = self.clock
        self.lines: list[str] = []
        self.records: list[MoveRecord] = []  # the record of every progress call, in order
        self.on_line: list = []
        self.max_item_sizes: dict[str, int] = {}  # as the cluster config says (else 36 MiB)
        self.limits: dict[str, int] = {}  # large_item_limit, bad_item_limit of `start`
        self.budget = BodyBudget(MOVER_SETTINGS.memory_budget)  # the process's, every mover's

    def mover(self, settings: MoveSettings = MOVER_SETTINGS) -> Mover:
        def progress(record, line):
            self.records.append(record)
            if line:
                self.lines.append(line)
                for hook in list(self.on_line):
                    hook(line)

        return Mover(
            requests=self.requests,
            nodes=self.nodes,
            guarantee=self.guarantee,
            directory=self.directory,
            databases={"DB1", "DB2"},
            clock=self.clock,
            settings=settings,
            progress=progress,
            max_item_sizes=self.max_item_sizes,
            budget=self.budget,
        )

    async def move(self, settings: MoveSettings = MOVER_SETTINGS, move_id: str | None = None):
        task = await self.start(settings, move_id)
        await self.drive(task)
        return task.result()

    async def start(
        self, settings: MoveSettings = MOVER_SETTINGS, move_id: str | None = None
    ) -> asyncio.Task[Any]:
        """Submit (or take `move_id`) and run the move in a task the clock then drives."""
        mover = self.mover(settings)
        if move_id is None:
            move_id = (await mover.submit(await mover.request("alice", "DB2", **self.limits))).id
        return asyncio.create_task(mover.run(move_id))

    async def drive(self, task: asyncio.Task[Any], until: Callable[[], bool] | None = None) -> None:
        """Move the clock on, half a second at a time, until the task ends or `until()`."""
        for _ in range(100_000):
            await self.settle()
            if task.done() or (until is not None and until()):
                return
            await self.clock.advance(0.5)
        task.cancel()
        raise AssertionError("the move did not end")

    async def settle(self) -> None:
        await settle(self.requests)

    def at_step(self, step: int, action) -> None:
        """Run `action` once, when the mover starts `step`."""
        done = []

        def hook(line):
            if line.startswith(f"step {step}:") and not done:
                done.append(line)
                action()

        self.on_line.append(hook)

    def source(self):
        return self.nodes.dbs["DB1"].live("alice")

    def target(self):
        return self.nodes.dbs["DB2"].live("alice")

    def assert_completed_equal(self, record) -> None:
        assert record.state is MoveState.COMPLETED, record.failure
        assert self.target() == self.source() and self.source()
        assert not self.nodes.dbs["DB2"].boxes["alice"].locked
        assert self.nodes.dbs["DB1"].boxes["alice"].soft_deleted
        assert self.directory.entries["alice"] == "DB2"
        assert_soft_delete_only_after_matching_digests(self.nodes)


def assert_soft_delete_only_after_matching_digests(nodes: FakeNodes) -> None:
    """Every soft-delete of a source mailbox came after its digests were seen equal, with the
    target in the epoch it is in at the soft-delete."""
    for i, event in enumerate(nodes.trace):
        if event[0] != "soft-delete":
            continue
        _, _, mailbox, _ = event
        target_epoch = nodes.dbs["DB2"].epoch
        digests = [e for e in nodes.trace[:i] if e[0] == "digest" and e[2] == mailbox]
        source = [e for e in digests if e[1] == "DB1"]
        target = [e for e in digests if e[1] == "DB2" and e[3] == target_epoch]
        assert source and target, f"no digests in target epoch {target_epoch} before {event}"
        assert source[-1][4] == target[-1][4], "soft-deleted after digests that differ"


class SyncMoves(StoredMoves):
    """A move store a test fills and reads synchronously, as the CLI tests need: the
    embedded engine of the cluster store file `path`."""

    def __init__(self, path) -> None:
        super().__init__(EmbeddedMoveStore(path))

    def create(self, *, mailboxes, source_db, target_db, now, **fields) -> MoveRecord:
        record = MoveRecord(
            id=new_move_id(),
            mailboxes=tuple(mailboxes),
            source_db=source_db,
            target_db=target_db,
            created=now,
            updated=now,
            **fields,
        )
        self._store.call(self._store._create, [record], None)
        return record

    def add_answer(self, move_id, *, step, method, answer, now) -> None:
        self._store.call(self._store._add_answer, move_id, answer_row(step, method, answer, now))

    def claim(self, move_id, worker="test", ttl=60.0):
        return self._store.call(self._store._claim, move_id, worker, ttl)

    def close(self) -> None:
        self._store._conn.close()
