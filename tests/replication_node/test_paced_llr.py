"""LLR writes of large bodies, paced (`Database._make_durable`, `storage/writebehind.py`):
the same rows and header as a plain commit; pauses between chunks only while small commits
flow and LLR is not far behind (`active/llr_pacing.py`); the header published only once
durable; a failure leaves the header where it was and the next apply of the same generations
makes it right; and every crash state of the paced sequence reopens at the old waypoint or
the new one, whole, never half of it (real SQLite files: the WAL as the commit left it, cut or
holed as a crash could leave it on disk, and the database file part-checkpointed)."""

from __future__ import annotations

import shutil
import sqlite3
import uuid
from datetime import UTC, datetime
from pathlib import Path

import pytest

from dag_common.clock import ManualClock
from dag_common.model import Position
from dag_common.store_api import ItemIn
from replication_node.active import llr_pacing
from replication_node.active.copy import ActiveCopy
from replication_node.active.mailbox_store import MailboxStore
from replication_node.errors import DatabaseError
from replication_node.log.body import BodyReader
from replication_node.log.events import Transaction
from replication_node.log.operations import CreateMailbox, PutItem
from replication_node.storage import database as database_module
from replication_node.storage import writebehind
from replication_node.storage.bodies import BODY_TEXT, ITEMS
from replication_node.storage.database import PACED_BYTES, PAGE_SIZE, Database
from replication_node.storage.paths import CopyPaths

T0 = datetime(2026, 11, 26, tzinfo=UTC)
BIG = "".join(chr(ord("a") + i % 26) for i in range(PACED_BYTES + 300_000))


def fresh(path: Path) -> Database:
    return Database.create(
        path, database_signature=uuid.UUID(int=1), log_signature=uuid.UUID(int=2)
    )


def mailbox_txn() -> Transaction:
    return Transaction(Position(1, 0), T0, (CreateMailbox(mailbox="m", cn=1),))


def big_txn(body: str = BIG) -> Transaction:
    op = PutItem(mailbox="m", cn=2, item_id="big", folder="Inbox", body=body)
    return Transaction(Position(2, 0), T0, (op,))


def apply(db: Database, txns: list[Transaction], through: int) -> None:
    db.apply(txns, waypoint=through, committed=through, last_log_time=T0)


def pragma(db: Database, name: str) -> int:
    return db._conn.execute(f"PRAGMA {name}").fetchone()[0]


def test_write_behind_writes_a_chunk_at_a_time_and_asks_before_each(tmp_path):
    path = tmp_path / "f"
    path.write_bytes(b"x" * (5 * 4096 + 10))
    pauses = []
    chunks = writebehind.write_behind(path, chunk=4096, pace=lambda: pauses.append(1))
    assert chunks == 6 and len(pauses) == 6
    assert path.read_bytes() == b"x" * (5 * 4096 + 10)
    assert writebehind.write_behind(path, chunk=4096, pace=lambda: 8192) == 3, "paced chunks"
    assert writebehind.write_behind(path, [(4096, 100), (8192, 8192)], chunk=4096) == 3


def test_a_large_body_is_paced_and_reads_as_a_plain_commit_would(tmp_path):
    paced, plain = fresh(tmp_path / "paced.sqlite"), fresh(tmp_path / "plain.sqlite")
    pauses = []
    paced.pace = lambda: pauses.append(1)
    apply(paced, [mailbox_txn()], 1)
    apply(plain, [mailbox_txn()], 1)
    apply(paced, [big_txn()], 2)
    # Below the threshold, as before: SQLite's own fsync at commit.
    small = big_txn(body="x" * 1000)
    plain.apply([small], waypoint=2, committed=2, last_log_time=T0)
    apply(plain, [big_txn()], 2)
    assert pauses, "a body of PACED_BYTES or more is written a chunk at a time"
    assert paced.item("m", "big").body == BIG
    assert paced.header.waypoint == 2 and paced.header.checkpoint == 3
    assert paced.content_digest == plain.content_digest
    assert paced.recompute_digest()[0] == paced.recompute_digest()[1]
    # The connection is back to what the other writes expect.
    assert pragma(paced, "synchronous") == 2  # FULL
    assert pragma(paced, "wal_autocheckpoint") == 16 * 1024 * 1024 // PAGE_SIZE
    # Checkpointed: the database file alone (no WAL) holds the body.
    alone = tmp_path / "alone.sqlite"
    shutil.copyfile(paced.path, alone)
    conn = sqlite3.connect(alone)
    query = f"SELECT length({BODY_TEXT}) FROM {ITEMS} WHERE item_id='big'"  # kept apart
    assert conn.execute(query).fetchone() == (len(BIG),)
    conn.close()
    paced.close()
    plain.close()


def test_a_failure_to_make_it_durable_leaves_the_header_and_the_next_apply_mends_it(tmp_path):
    db = fresh(tmp_path / "db.sqlite")
    apply(db, [mailbox_txn()], 1)

    def failing() -> None:
        raise OSError(5, "Input/output error")

    db.pace = failing
    with pytest.raises(DatabaseError, match="durable"):
        apply(db, [big_txn()], 2)
    assert db.header.waypoint == 1, "a waypoint not known durable is not published"
    assert pragma(db, "synchronous") == 2
    db.pace = None
    apply(db, [big_txn()], 2)  # LLR's retry: the same generation again
    assert db.header.waypoint == 2
    stored, rows = db.recompute_digest()
    assert stored == rows
    assert db.item("m", "big").body == BIG
    db.close()


@pytest.fixture
def crash_material(tmp_path, monkeypatch):
    """(database file before the paced apply, its WAL as the commit left it, the database
    file after the checkpoint, the page ranges the checkpoint wrote)."""
    db = fresh(tmp_path / "db.sqlite")
    apply(db, [mailbox_txn()], 1)
    db._conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    before = db.path.read_bytes()
    seen: dict[str, bytes] = {}
    real = writebehind.write_behind

    def watching(path, ranges=None, **kwargs):
        if path.name.endswith("-wal") and "wal" not in seen:
            seen["wal"] = path.read_bytes()  # the commit's frames, none fsync'd yet
        return real(path, ranges, **kwargs)

    monkeypatch.setattr(database_module, "write_behind", watching)
    apply(db, [big_txn()], 2)
    after = db.path.read_bytes()
    ranges = writebehind.wal_page_ranges(Path(str(db.path) + "-wal"), PAGE_SIZE)
    db.close()
    return before, seen["wal"], after, ranges


def reopen(tmp_path: Path, name: str, db_bytes: bytes, wal: bytes | None) -> tuple[int, str | None]:
    """Open a crash state as recovery would; (waypoint, the big body or None)."""
    root = tmp_path / name
    root.mkdir()
    path = root / "db.sqlite"
    path.write_bytes(db_bytes)
    if wal is not None:
        (root / "db.sqlite-wal").write_bytes(wal)
    db = Database.open(path)
    try:
        (check,) = db._conn.execute("PRAGMA integrity_check").fetchone()
        assert check == "ok", name
        stored, rows = db.recompute_digest()
        assert stored == rows, name
        item = db.item("m", "big")
        return db.header.waypoint, None if item is None else item.body
    finally:
        db.close()


def test_every_crash_state_reopens_at_the_old_waypoint_or_the_new_whole(tmp_path, crash_material):
    before, wal, after, ranges = crash_material
    frame = 24 + PAGE_SIZE
    frames = (len(wal) - 32) // frame
    assert frames > PACED_BYTES // PAGE_SIZE
    outcomes = set()
    # Before the WAL's fdatasync: any prefix of it on disk (cut at frame boundaries and
    # inside frames), or a hole (a frame the writeback had not reached).
    cuts = sorted({0, 16, 32, *(32 + k * frame for k in range(frames + 1)), 32 + frame // 2,
                   len(wal) - 10})  # fmt: skip
    for cut in cuts:
        state = reopen(tmp_path, f"cut{cut}", before, wal[:cut])
        outcomes.add(state)
        assert state in {(1, None), (2, BIG)}, cut
    for k in (0, frames // 2, frames - 1):
        holed = bytearray(wal)
        start = 32 + k * frame
        holed[start : start + frame] = bytes(frame)
        state = reopen(tmp_path, f"hole{k}", before, bytes(holed))
        assert state == (1, None), k
    assert reopen(tmp_path, "whole", before, wal) == (2, BIG)
    # After the WAL's fdatasync, during the checkpoint: the WAL whole, any part of the pages
    # the checkpoint writes in the file.
    pages = [p for offset, length in ranges for p in range(offset, offset + length, PAGE_SIZE)]
    assert len(pages) > PACED_BYTES // PAGE_SIZE
    for part in sorted({1, len(pages) // 2, len(pages) - 1, len(pages)}):
        mixed = bytearray(before.ljust(len(after), b"\0"))
        for offset in pages[:part]:
            mixed[offset : offset + PAGE_SIZE] = after[offset : offset + PAGE_SIZE]
        assert reopen(tmp_path, f"ckpt{part}", bytes(mixed), wal) == (2, BIG)
    # After the database file's fdatasync: it alone is the new state.
    assert reopen(tmp_path, "done", after, None) == (2, BIG)
    assert outcomes == {(1, None), (2, BIG)}


@pytest.mark.parametrize(
    ("commits_flowing", "backlog", "expected", "chunk"),
    [
        (False, 0, 0.0, None),  # nothing to give way to: the write-behind's own chunks
        (False, 50, 0.0, None),
        (True, 0, llr_pacing.PAUSE, llr_pacing.PACED_CHUNK),
        # one generation due: the steady state beside large items
        (True, 1, llr_pacing.PAUSE, llr_pacing.PACED_CHUNK),
        (True, llr_pacing.MAX_BACKLOG, llr_pacing.PAUSE, llr_pacing.PACED_CHUNK),
        # too far behind: catch up at the disk's pace
        (True, llr_pacing.MAX_BACKLOG + 1, 0.0, None),
    ],
)
def test_llr_pauses_in_small_chunks_only_while_commits_flow_and_it_is_not_behind(
    commits_flowing, backlog, expected, chunk
):
    pause = llr_pacing.llr_pause(commits_flowing=commits_flowing, backlog=backlog)
    assert pause == expected
    assert llr_pacing.llr_chunk(pause) == chunk


async def paced_active(tmp_path, clock: ManualClock, paused: list[float]) -> ActiveCopy:
    """An active copy on `clock` whose LLR records its waits in `paused` (none slept)."""
    return await ActiveCopy.mount(
        paths=CopyPaths(tmp_path, "DB1"),
        log_file_size=256 * 1024,
        llr_depth=1,
        clock=clock,
        create=True,
        pause=paused.append,
    )


async def test_the_active_paces_a_large_body_while_small_commits_flow(tmp_path):
    clock, paused = ManualClock(), []
    copy = await paced_active(tmp_path, clock, paused)
    try:
        assert copy.db.pace() is None
        assert paused == [], "no commit has flowed yet"
        store = MailboxStore(copy)
        await store.create_mailbox("m")
        await store.put_items("m", [ItemIn(item_id="small", body="s" * 100)])
        assert copy.db.pace() == llr_pacing.PACED_CHUNK
        assert paused == [llr_pacing.PAUSE]
        await clock.advance(1.0)
        assert copy.db.pace() is None
        assert paused == [llr_pacing.PAUSE], "a second without commits: no pause"
        # A small commit, then a large body (its own commit does not count) written by LLR.
        await store.put_items("m", [ItemIn(item_id="small2", body="s" * 100)])
        await store.put_items("m", [ItemIn(item_id="big", body=BIG)])
        for _ in range(3):
            await copy.roll(force=True)
        await copy.llr_settled()
        assert copy.db.item("m", "big").body == BIG  # in the database file, not the overlay
        assert len(paused) > 2, "the large body's chunks gave way to the flowing commits"
    finally:
        await copy.crash_close()


@pytest.mark.parametrize(
    ("staging", "commits_flowing", "backlog", "expected"),
    [
        (False, False, 0, False),  # no large commit on its way: nothing to yield to
        (True, False, 0, True),
        (True, False, llr_pacing.YIELD_BACKLOG, True),
        (True, False, llr_pacing.YIELD_BACKLOG + 1, False),  # too far behind: LLR writes
        (True, True, 0, False),  # small commits flow: LLR paces for them instead
    ],
)
def test_llr_yields_only_to_a_large_body_staged_alone_and_while_not_too_far_behind(
    staging, commits_flowing, backlog, expected
):
    assert (
        llr_pacing.yields(staging=staging, commits_flowing=commits_flowing, backlog=backlog)
        is expected
    )


async def test_the_active_holds_llr_back_while_a_large_body_is_staged(tmp_path):
    """Before each chunk of an LLR write, the active waits while a large body goes into the
    log (at most YIELD_STEPS waits a chunk: the clock here stands still), not once the
    staging has stopped, and not once LLR is more than YIELD_BACKLOG generations behind."""
    clock, paused = ManualClock(), []
    copy = await paced_active(tmp_path, clock, paused)
    try:
        await clock.advance(1.0)  # nothing written within the last second
        copy.db.pace()
        assert paused == []
        await copy.stage(BodyReader(BIG.encode()))
        assert copy.stream.staging
        copy.db.pace()
        assert paused == [llr_pacing.YIELD_STEP] * llr_pacing.YIELD_STEPS
        paused.clear()
        copy._closed_seen += llr_pacing.YIELD_BACKLOG + 1  # as if that many rolls were due
        copy.db.pace()
        assert paused == [], "too far behind: LLR writes"
        copy._closed_seen -= llr_pacing.YIELD_BACKLOG + 1
        await clock.advance(1.0)
        assert not copy.stream.staging
        copy.db.pace()
        assert paused == [], "the staging stopped: LLR writes"
    finally:
        await copy.crash_close()


def test_each_paced_commit_writes_back_its_own_frames_not_the_whole_wal(tmp_path, monkeypatch):
    """A reader's snapshot keeps SQLite from restarting the WAL, which grows commit after
    commit (the active's, 34-42 MiB in a 1 MiB phase, issue 49): each paced commit writes
    back the WAL's frames since the last one's and the file's pages its checkpoint copied,
    not every frame the WAL holds; once the WAL restarts (its salts change), from its first
    frame.  Every row is in the file whole all the same."""
    db = fresh(tmp_path / "db.sqlite")
    apply(db, [mailbox_txn()], 1)
    written: list[tuple[str, list[tuple[int, int]]]] = []
    real = writebehind.write_behind

    def watching(path, ranges=None, **kwargs):
        whole = [(0, path.stat().st_size)]  # None: the whole file
        written.append((path.name, whole if ranges is None else list(ranges)))
        return real(path, ranges, **kwargs)

    monkeypatch.setattr(database_module, "write_behind", watching)
    frame = 24 + PAGE_SIZE
    reader = sqlite3.connect(db.path)
    reader.execute("BEGIN")
    reader.execute("SELECT count(*) FROM items").fetchone()  # a snapshot held: no restart
    wal_ends = []
    for gen in range(2, 6):
        op = PutItem(mailbox="m", cn=gen, item_id=f"big{gen}", folder="Inbox", body=BIG)
        written.clear()
        apply(db, [Transaction(Position(gen, 0), T0, (op,))], gen)
        (wal_name, wal_ranges), (db_name, db_ranges) = written
        assert (wal_name, db_name) == ("db.sqlite-wal", "db.sqlite")
        [(start, length)] = wal_ranges
        wal_ends.append(start + length)
        if gen > 2:  # the first: the WAL whole (no mark yet)
            assert start == wal_ends[-2], "from where the last paced commit's frames ended"
            assert length < 2 * PACED_BYTES, "the commit's frames, not the WAL's"
            assert sum(n for _, n in db_ranges) < 2 * PACED_BYTES, "the pages just copied"
    size = (tmp_path / "db.sqlite-wal").stat().st_size
    assert size >= 4 * PACED_BYTES and wal_ends[-1] == size, "the WAL grew, every frame seen"
    reader.rollback()
    reader.close()

    starts = []
    for gen in (6, 7):  # 6's checkpoint copies the WAL whole; 7 restarts it
        op = PutItem(mailbox="m", cn=gen, item_id=f"big{gen}", folder="Inbox", body=BIG)
        written.clear()
        apply(db, [Transaction(Position(gen, 0), T0, (op,))], gen)
        [(start, length)] = written[0][1]
        starts.append(start)
        assert length < 2 * PACED_BYTES and frame * (length // frame) == length
    assert starts == [size, 32], "appended, then from the restarted WAL's first frame"
    assert (tmp_path / "db.sqlite-wal").stat().st_size > size, "written over, not cut"
    for gen in range(2, 8):
        assert db.item("m", f"big{gen}").body == BIG
    (check,) = db._conn.execute("PRAGMA integrity_check").fetchone()
    assert check == "ok"
    db.close()
