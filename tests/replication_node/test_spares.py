"""Spare log files (`replication_node/log/spares.py`) and log format version 2 (`logfile.py`):
generations written over files that exist already, records salted with their header, every
closed generation `log_file_size` bytes."""

import asyncio
import errno
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from dag_common.clock import ManualClock, SystemClock
from dag_common.store_api import ItemIn
from replication_node.active import truncator as truncator_module
from replication_node.active.mailbox_store import MailboxStore
from replication_node.active.truncator import ActiveTruncator
from replication_node.errors import Conflict
from replication_node.log import logfile, spares, truncation
from replication_node.log.files import OS_FILES
from replication_node.log.logdir import list_closed_generations
from replication_node.log.logfile import OPEN_LOG_NAME, PREPARED_PREFIX, RecordType
from replication_node.log.logstream import LogStream
from replication_node.log.spare_keeper import SpareKeeper
from replication_node.log.spares import SPARE_PREFIX, SparePool
from tests.cluster_harness import wait_until
from tests.replication_node.helpers import items_as_read, mount, passive, replayed_through
from tests.replication_node.share import start_share
from tests.replication_node.test_block_mode import CountingWire, in_block_mode

SIZE = 64 * 1024


@pytest.fixture(autouse=True)
def any_disk(monkeypatch):
    """Spares made whatever room the test machine's disk has left (the pool's own floor is
    1 GiB and 5% of the file system; `test_no_spare_is_made_without_room...` checks it)."""
    monkeypatch.setattr(spares, "FREE_FLOOR", 0)
    monkeypatch.setattr(spares, "FREE_FRACTION", 0)


def spare_names(logs):
    return sorted(n for n in os.listdir(logs) if n.startswith(SPARE_PREFIX))


def hidden_left(logs):
    return sorted(n for n in os.listdir(logs) if n.startswith(PREPARED_PREFIX))


async def test_the_pool_fills_while_idle_and_each_roll_writes_over_a_spare(tmp_path):
    copy = await mount(tmp_path, log_file_size=SIZE)
    store = MailboxStore(copy)
    await store.create_mailbox("m")
    logs = copy.paths.logs
    copy.stream.keep_spares(4)
    await wait_until("four spares", lambda: copy.stream.spares.count == 4, timeout=30)
    assert all(os.path.getsize(logs / n) == SIZE for n in spare_names(logs))
    inodes = {os.stat(logs / n).st_ino for n in spare_names(logs)}
    first = copy.stream.generation
    for i in range(3):
        await store.put_items("m", [ItemIn(item_id=f"i{i}", body="x" * 100)])
        await copy.roll()
    closed = [g for g in list_closed_generations(logs) if g >= first]
    assert len(closed) == 3
    for gen in closed:
        path = logs / logfile.closed_log_name(gen)
        # Exactly log_file_size: CLOSE ends the file, after a PAD record (format version 2).
        assert path.stat().st_size == SIZE
        result = logfile.verify_closed(path.read_bytes(), gen)
        kinds = [r.type for r in result.records]
        assert kinds[-3:] == [RecordType.PAD, RecordType.DIGEST, RecordType.CLOSE]
    used = {os.stat(logs / logfile.closed_log_name(g)).st_ino for g in closed[1:]}
    used.add(os.stat(logs / OPEN_LOG_NAME).st_ino)
    assert used <= inodes, "the rolls wrote over the spares, not new files"
    # The pool fills again once the stream is idle; nothing prepared is left about.
    await wait_until("the pool full again", lambda: copy.stream.spares.count == 4, timeout=30)
    await copy.dismount()
    assert hidden_left(logs) == []
    copy = await mount(tmp_path, log_file_size=SIZE, create=False)
    assert {r.item_id for r in copy.items("m")} == {"i0", "i1", "i2"}
    await copy.crash_close()


async def test_a_spare_holding_another_streams_records_never_lends_them_to_a_crashed_log(
    tmp_path,
):
    """The worst a reused file can hold: whole records of another stream, framed and
    checksummed, each exactly where this stream's next record would begin.  A crash after
    one commit leaves them past it in E00.log; recovery keeps the commit and none of them
    (each record's checksum is salted with its own header)."""
    ghost = await mount(tmp_path / "ghost", log_file_size=SIZE)
    ghosts = MailboxStore(ghost)
    await ghosts.create_mailbox("m")
    await ghost.roll()
    for i in range(5):
        await ghosts.put_items("m", [ItemIn(item_id=f"g{i}", body="x" * 300)])
    stale_gen = ghost.stream.generation
    await ghost.roll()
    stale = ghost.paths.logs / logfile.closed_log_name(stale_gen)
    stale_records = logfile.verify_closed(stale.read_bytes(), stale_gen).transactions
    await ghost.crash_close()

    copy = await mount(tmp_path / "real", log_file_size=SIZE)
    store = MailboxStore(copy)
    await store.create_mailbox("m")
    logs = copy.paths.logs
    shutil.copyfile(stale, logs / f"{SPARE_PREFIX}planted")
    copy.stream.keep_spares(1)  # the pool holds it: nothing to prepare
    await copy.roll()
    assert spare_names(logs) == [], "the roll took the planted spare"
    await store.put_items("m", [ItemIn(item_id="r0", body="x" * 300)])
    await copy.crash_close()

    data = (logs / OPEN_LOG_NAME).read_bytes()
    result = logfile.scan(data)
    assert [r.offset for r in result.records] == [stale_records[0].offset]
    # The ghost's second record begins exactly where ours ends: aligned, whole, and refused.
    assert result.valid_end == stale_records[1].offset
    assert "checksum mismatch" in result.tail_error
    copy = await mount(tmp_path / "real", log_file_size=SIZE, create=False)
    assert {r.item_id for r in copy.items("m")} == {"r0"}
    assert any("cut at offset" in n for n in copy.recovery_notes)
    await MailboxStore(copy).put_items("m", [ItemIn(item_id="r1", body="x")])
    await copy.crash_close()


async def test_a_crash_over_a_spare_of_zeros_keeps_every_commit_and_calls_nothing_torn(tmp_path):
    copy = await mount(tmp_path, log_file_size=SIZE)
    store = MailboxStore(copy)
    await store.create_mailbox("m")
    copy.stream.keep_spares(1)
    await wait_until("a spare", lambda: copy.stream.spares.count == 1, timeout=30)
    await copy.roll()
    for i in range(3):
        await store.put_items("m", [ItemIn(item_id=f"i{i}", body="x" * 100)])
    await copy.crash_close()
    e00 = copy.paths.logs / OPEN_LOG_NAME
    result = logfile.scan(e00.read_bytes())
    assert result.tail_error is None and result.unwritten == SIZE - result.valid_end
    copy = await mount(tmp_path, log_file_size=SIZE, create=False)
    assert {r.item_id for r in copy.items("m")} == {"i0", "i1", "i2"}
    assert not any("cut at offset" in n for n in copy.recovery_notes)
    assert e00.stat().st_size == SIZE, "the spare's room is kept, not cut"
    await MailboxStore(copy).put_items("m", [ItemIn(item_id="i3", body="x")])
    await copy.roll()
    gen = copy.stream.generation - 1
    closed = logfile.verify_closed((copy.paths.logs / logfile.closed_log_name(gen)).read_bytes())
    assert len(closed.transactions) == 4
    await copy.crash_close()


def test_no_spare_is_made_without_the_room(tmp_path, monkeypatch):
    pool = SparePool(tmp_path, SIZE, 4)
    assert pool.prepare_one() and pool.count == 1
    st = os.statvfs(tmp_path)
    free = st.f_bavail * st.f_frsize
    monkeypatch.setattr(pool, "target", free // (spares.FREE_POOLS * SIZE) + 1)
    assert not pool.prepare_one(), "a pool that could take a quarter of the free space"
    monkeypatch.setattr(pool, "target", 4)
    monkeypatch.setattr(spares, "FREE_FLOOR", free)
    assert not pool.prepare_one(), "less than FREE_FLOOR would be left"
    monkeypatch.setattr(spares, "FREE_FLOOR", 0)
    monkeypatch.setattr(spares, "FREE_FRACTION", free / (st.f_blocks * st.f_frsize))
    assert not pool.prepare_one(), "less than FREE_FRACTION would be left"
    assert pool.count == 1 and hidden_left(tmp_path) == []


def test_a_spare_gone_from_under_the_pool_is_passed_over(tmp_path):
    pool = SparePool(tmp_path, SIZE, 2)
    assert pool.prepare_one() and pool.prepare_one()
    os.unlink(tmp_path / spare_names(tmp_path)[0])
    taken = pool.take()
    assert taken is not None and taken.name.startswith(PREPARED_PREFIX)
    assert pool.take() is None and pool.count == 0


def test_a_version_1_log_is_read_as_before():
    from tests.replication_node.test_logfile import T0, make_log

    header, _ = make_log()
    v1 = header.__class__(**{**{f: getattr(header, f) for f in header.__slots__}, "version": 1})
    assert v1.salt == 0
    data = v1.encode() + logfile.encode_transaction([{"op": "n"}], T0)
    data += logfile.encode_record(RecordType.CLOSE, T0)
    assert len(logfile.verify_closed(data).transactions) == 1
    with pytest.raises(logfile.LogRecordError, match="checksum mismatch"):
        # The same records under a version 2 header: unsalted, they are not its own.
        logfile.verify_closed(header.encode() + data[logfile.HEADER_SIZE :])


def test_spares_of_another_size_are_removed_when_the_pool_opens(tmp_path):
    """A spare made for another `log_file_size`: a generation written over a larger one would
    end before its file does, and no reader takes that for a closed generation."""
    (tmp_path / f"{SPARE_PREFIX}larger").write_bytes(bytes(2 * SIZE))
    (tmp_path / f"{SPARE_PREFIX}smaller").write_bytes(bytes(SIZE // 2))
    (tmp_path / f"{SPARE_PREFIX}right").write_bytes(bytes(SIZE))
    pool = SparePool(tmp_path, SIZE, 4)
    assert pool.count == 1 and spare_names(tmp_path) == [f"{SPARE_PREFIX}right"]


async def test_a_passive_copy_ships_inspects_and_replays_generations_written_over_spares(
    tmp_path,
):
    """The active's generations written over spares (padded, salted), pulled over HTTP in
    file mode and followed in block mode, inspected and replayed; the copy ends with every
    item, its generations byte for byte the active's."""
    share = await start_share(tmp_path / "a", spare_log_files=8)
    try:
        await share.write(0, 5)
        pool = share.active.copy.stream.spares
        await wait_until("the active's spares", lambda: pool.count == 8, timeout=30)
        copy = passive(share, tmp_path)
        await copy.start()
        try:
            for first in range(5, 65, 10):
                await share.write(first, 10, body=3000)
                last = await share.roll()
            await wait_until("replay", replayed_through(copy, last), timeout=60)
            assert pool.taken >= 6, "the active's rolls wrote over spares"
            assert copy.reader().items("m") == items_as_read(share.active.copy, "m")
            assert len(copy.reader().items("m")) == 65
            compared = 0
            for gen in range(last - 5, last + 1):
                theirs = share.closed_file(gen).read_bytes()
                assert len(theirs) == share.active.copy.stream.log_file_size
                ours = copy.paths.logs / logfile.closed_log_name(gen)
                if ours.exists():  # not truncated yet
                    assert ours.read_bytes() == theirs
                    compared += 1
            assert compared
        finally:
            await copy.stop()
    finally:
        await share.close()


def generations(logs, count, size=SIZE):
    """`count` files named as closed generations, each `size` bytes of its own."""
    paths = []
    for gen in range(1, count + 1):
        path = logs / logfile.closed_log_name(gen)
        path.write_bytes(bytes([gen]) * size)
        paths.append(path)
    return paths


def test_a_generation_nothing_holds_open_is_recycled_as_a_spare_and_one_held_open_is_unlinked(
    tmp_path,
):
    """`SparePool.retire`, what truncation removes a generation with: renamed to a spare (the
    same file: its blocks and cached pages) when nothing else has it open; unlinked as before
    when anything does, in another process too, whose view stays whole."""
    pool = SparePool(tmp_path, SIZE, 2)
    free, held, other_size, linked = generations(tmp_path, 4)
    other_size.write_bytes(bytes(SIZE + 1))
    os.link(linked, tmp_path / "second-name")
    inode = free.stat().st_ino
    reader = subprocess.Popen(
        [sys.executable, "-c", READER, str(held)], stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )
    try:
        assert reader.stdout.readline() == b"open\n"
        assert pool.retire(free) is True
        assert pool.retire(held) is False, "open in another process"
        assert pool.retire(other_size) is False
        assert pool.retire(linked) is False, "written over, its other name would change too"
        assert (tmp_path / "second-name").read_bytes() == bytes([4]) * SIZE
        os.unlink(tmp_path / "second-name")
        reader.stdin.close()
        assert reader.stdout.read() == f"{SIZE} {2}\n".encode(), "its view stayed whole"
    finally:
        reader.kill()
        reader.wait()
    assert list_closed_generations(tmp_path) == []
    assert [os.stat(tmp_path / n).st_ino for n in spare_names(tmp_path)] == [inode]
    assert (pool.count, pool.recycled) == (1, 1)
    taken = pool.take()
    assert taken is not None and taken.stat().st_ino == inode


# Opens the file named, says so, and once its stdin closes reads it whole: its size and
# first byte.
READER = """
import sys
f = open(sys.argv[1], "rb")
print("open", flush=True)
sys.stdin.read()
data = f.read()
print(len(data), data[0])
"""


def test_an_open_waiting_on_the_rename_keeps_the_generation_from_the_pool(tmp_path):
    """An open that found the generation under its name just before the rename waits for
    the pool's lease meanwhile: the file is not recycled, and the reader gets it whole."""
    (path,) = generations(tmp_path, 1)
    got = []
    opener_tid = []

    def opener():
        opener_tid.append(threading.get_native_id())
        with open(path, "rb") as f:
            got.append(f.read())

    class RaceAtRename(type(OS_FILES)):
        def replace(self, src, dst):
            thread.start()  # it looks the old name up, then waits on the lease
            wchan = lambda: Path(f"/proc/self/task/{opener_tid[0]}/wchan").read_text()  # noqa: E731
            spin_until(lambda: opener_tid and wchan() == "__break_lease")
            super().replace(src, dst)

    thread = threading.Thread(target=opener)
    pool = SparePool(tmp_path, SIZE, 2, RaceAtRename())
    assert pool.retire(path) is False
    thread.join()
    assert got == [bytes([1]) * SIZE]
    assert os.listdir(tmp_path) == [] and pool.count == 0


def spin_until(cond):
    deadline = time.monotonic() + 30
    while not cond():
        assert time.monotonic() < deadline, "the opener never waited on the lease"
        time.sleep(0.001)


def test_truncation_takes_spares_up_to_its_bound_and_the_rest_is_unlinked(tmp_path, monkeypatch):
    monkeypatch.setattr(spares, "RECYCLE_FACTOR", 3)
    pool = SparePool(tmp_path, SIZE, 2)
    paths = generations(tmp_path, 8)
    assert truncation.delete_through(tmp_path, 8, pool) == list(range(1, 9))
    assert list_closed_generations(tmp_path) == []
    assert (pool.count, pool.recycled) == (6, 6), "three times the target, the rest unlinked"
    assert len(os.listdir(tmp_path)) == 6
    assert not any(p.exists() for p in paths)
    assert [pool.trim_one() for _ in range(5)] == [True] * 4 + [False]
    assert pool.count == 2 == len(spare_names(tmp_path)) and pool.trimmed == 4
    empty = SparePool(tmp_path / "none", SIZE, 0)
    (tmp_path / "none").mkdir()
    (gen,) = generations(tmp_path / "none", 1)
    assert empty.retire(gen) is False and not gen.exists(), "no pool: unlinked as before"


async def test_the_keeper_trims_what_truncation_left_past_the_target_while_the_log_is_idle(
    tmp_path,
):
    pool = SparePool(tmp_path, SIZE, 2)
    for path in generations(tmp_path, 5):
        assert pool.retire(path)
    idle = False
    looks = 0

    def is_idle() -> bool:
        nonlocal looks
        looks += 1
        return idle

    clock = ManualClock()
    keeper = SpareKeeper(clock=clock, idle=is_idle, busy_pause=1.0)
    keeper.start(pool)
    try:
        for _ in range(5):  # the keeper looks once a busy pause, and finds the log busy
            await wait_until("the keeper waiting", lambda: clock.pending_sleeps() == [1.0])
            await clock.advance(1.0)
        await wait_until("its sixth look", lambda: looks == 6)
        assert pool.count == 5, "nothing removed while the log is busy"
        idle = True
        await clock.advance(1.0)
        await wait_until("trimmed to the target", lambda: pool.count == 2, timeout=30)
        assert len(spare_names(tmp_path)) == 2 and pool.made == 0
    finally:
        await keeper.close()


async def test_the_rolls_write_over_truncated_generations_and_the_log_keeps_every_commit(
    tmp_path, monkeypatch
):
    """The active's truncator hands its generations to the stream's pool, and the next rolls
    write over them (their inodes): the generations written so are whole and salted, a crash
    over one keeps every acknowledged commit, and a generation a reader holds open at the
    truncation is unlinked, its reader's view whole."""
    copy = await mount(tmp_path, log_file_size=SIZE)
    store = MailboxStore(copy)
    await store.create_mailbox("m")
    logs = copy.paths.logs
    # The pool changes only as the test says: the keeper (which makes and trims while the
    # stream is idle) never finds it idle.
    monkeypatch.setattr(LogStream, "idle", property(lambda self: False))
    copy.stream.keep_spares(4)
    pool = copy.stream.spares
    while pool.prepare_one():
        pass
    for i in range(6):  # four rolls take the spares, two make new files
        await store.put_items("m", [ItemIn(item_id=f"a{i}", body="a" * 3000)])
        await copy.roll()
    await copy._flush_llr(through=copy.stream.last_closed_generation)
    closed = list_closed_generations(logs)
    held = open(logs / logfile.closed_log_name(closed[0]), "rb")  # noqa: SIM115
    held_bytes = held.read()
    held.seek(0)
    truncator = ActiveTruncator(
        database="DB1", logs=logs, clock=SystemClock(), header=lambda: copy.merged_header,
        peer_progress=_no_peers, spares=lambda: copy.stream.spares,
    )  # fmt: skip
    limit = await truncator.truncate_once([])
    gone = [g for g in closed if g <= limit]
    assert len(gone) >= 4 and list_closed_generations(logs) == [g for g in closed if g > limit]
    assert pool.recycled == len(gone) - 1, "all but the one held open"
    assert held.read() == held_bytes
    held.close()
    recycled = {os.stat(logs / n).st_ino for n in spare_names(logs)}
    assert len(recycled) == pool.count >= len(gone) - 1
    first = copy.stream.generation
    for i in range(3):
        await store.put_items("m", [ItemIn(item_id=f"b{i}", body="b" * 3000)])
        await copy.roll()
    await store.put_items("m", [ItemIn(item_id="c0", body="c" * 100)])
    # The generation open at the truncation had its file already: the next ones, the
    # truncated generations' files.
    later = range(first + 1, first + 3)
    written = [logs / logfile.closed_log_name(g) for g in later]
    assert {p.stat().st_ino for p in [*written, logs / OPEN_LOG_NAME]} <= recycled
    for gen, path in zip(later, written, strict=True):
        assert len(logfile.verify_closed(path.read_bytes(), gen).transactions) == 1
    await copy.crash_close()
    copy = await mount(tmp_path, log_file_size=SIZE, create=False)
    want = {f"a{i}" for i in range(6)} | {f"b{i}" for i in range(3)} | {"c0"}
    assert {r.item_id for r in copy.items("m")} == want
    await copy.crash_close()


async def _no_peers() -> list:
    return []


SHARE_LOG = 32 * 1024  # the share's generations (`tests/replication_node/share.py`)


@pytest.mark.parametrize("block_mode", [False, True], ids=["file mode", "block mode"])
async def test_a_passive_writes_what_it_copies_over_the_generations_it_truncated(
    tmp_path, block_mode
):
    """A passive copy's truncation keeps its generations as spares (its target at most),
    and the generations it copies (file mode) or receives (block mode) next are written over
    them: each byte for byte the active's, every item replayed."""
    share = await start_share(tmp_path / "a")
    try:
        await share.write(0, 5)
        wire = CountingWire(share.source())
        copy = passive(
            share, tmp_path, source=wire,
            log_file_size=SHARE_LOG, spare_log_files=4, block_mode=block_mode,
        )  # fmt: skip
        await copy.start()
        pool = copy.spares
        # The active's truncation, its generations unlinked (the copy is the one asked of).
        truncator = ActiveTruncator(
            database="DB1", logs=share.active.paths.logs, clock=SystemClock(),
            header=lambda: share.active.copy.merged_header, peer_progress=_no_peers,
        )  # fmt: skip
        for first in range(5, 165, 20):
            if block_mode:  # caught up: it follows the writes (unless it falls behind)
                await wait_until("block mode", lambda: in_block_mode(copy), timeout=60)
            await share.write(first, 20, body=3000)
            last = await share.roll()
            await wait_until("replay", replayed_through(copy, last), timeout=60)
            # Replayed by the copy: the active lets them go, and the copy may then.
            active = share.active.copy
            await active._flush_llr(through=active.stream.last_closed_generation)
            await truncator.truncate_once([])
        await share.write(165, 1)
        last = await share.roll()
        await wait_until("replay", replayed_through(copy, last), timeout=60)
        assert pool.recycled >= 4 and pool.taken >= 4, (pool.recycled, pool.taken)
        assert pool.count <= 4
        if block_mode:
            received = set(range(1, last + 1)) - set(wire.fetched)
            assert received, "generations received in block mode, over spares or not"
        held = list_closed_generations(copy.paths.logs)
        assert held and held[-1] == last
        for gen in held:
            theirs = share.closed_file(gen)
            if theirs.exists():
                assert (copy.paths.logs / logfile.closed_log_name(gen)).read_bytes() == (
                    theirs.read_bytes()
                )
        assert copy.reader().items("m") == items_as_read(share.active.copy, "m")
        assert len(copy.reader().items("m")) == 166
        await copy.stop()
    finally:
        await share.close()


async def test_a_block_buffer_still_holding_an_old_generation_is_not_kept(tmp_path):
    """A buffer is written over a spare; a crash before its own header was on disk leaves
    the old generation's bytes under its name, a whole scan of another generation.  The
    copy's next start discards it: nothing is resumed from it, nor kept from it for an
    activation once the active is lost."""
    share = await start_share(tmp_path / "a")
    try:
        await share.write(0, 10)
        first = await share.roll()
        copy = passive(share, tmp_path, log_file_size=SHARE_LOG)
        await copy.start()
        await wait_until("replayed", replayed_through(copy, first))
        await wait_until("block mode", lambda: in_block_mode(copy))
        await share.write(10, 5)
        feed = share.active.copy.stream.feed
        await wait_until("held", lambda: copy.status().block.offset == feed.durable)
        await copy.stop()
        (buffer,) = (copy.paths.root / "Blocks").glob("*.partial")
        buffer.write_bytes(share.closed_file(first).read_bytes())  # a spare's old bytes
        await share.runner.cleanup()  # the active is lost
        again = passive(share, tmp_path, log_file_size=SHARE_LOG)
        await again.start()
        await wait_until("the buffer looked at", lambda: not buffer.exists())
        answers = []

        async def keep() -> bool:
            try:  # the pipeline starts again and again while its active is gone
                answers.append(await again.keep_block_buffer())
            except Conflict:
                return False
            return True

        await wait_until("an answer", keep)
        assert answers[0].kept is None
        assert again.status().block.offset == 0
        assert not buffer.exists()
        await again.stop()
    finally:
        await share.close()


def test_a_file_created_over_a_spare_is_that_spare_and_one_on_another_file_system_is_new(
    tmp_path,
):
    """`spares.new_file`, a passive's copied or received generation: renamed from the pool
    straight to its name (nothing left under a prepared name); where the rename cannot be
    made (its directory on another file system, EXDEV), a new file, the spare kept."""
    (path,) = generations(tmp_path, 1)
    pool = SparePool(tmp_path, SIZE, 2)
    assert pool.retire(path)
    inode = os.stat(tmp_path / spare_names(tmp_path)[0]).st_ino
    (tmp_path / "in").mkdir()
    fd = spares.new_file(tmp_path / "in" / "one", pool)
    try:
        os.write(fd, b"new")
        spares.fit(fd, 3)
    finally:
        os.close(fd)
    assert os.stat(tmp_path / "in" / "one").st_ino == inode
    assert (tmp_path / "in" / "one").read_bytes() == b"new"
    assert spare_names(tmp_path) == [] == hidden_left(tmp_path) and pool.taken == 1

    class OtherFileSystem(type(OS_FILES)):
        def replace(self, src, dst):
            raise OSError(errno.EXDEV, "Invalid cross-device link")

    (tmp_path / "in" / f"{SPARE_PREFIX}kept").write_bytes(bytes(SIZE))
    far = SparePool(tmp_path / "in", SIZE, 2, OtherFileSystem())
    fd = spares.new_file(tmp_path / "two", far)
    os.close(fd)
    assert (tmp_path / "two").stat().st_size == 0, "a new file"
    assert far.count == 1 and far.taken == 0


async def test_the_truncator_looks_every_interval_and_about_every_second_while_the_log_is_busy():
    clock = ManualClock()
    passes = 0

    async def progress() -> list:
        nonlocal passes
        passes += 1
        return []

    async def after(seconds: float) -> int:
        """The passes once the clock moved `seconds` and the loop ran what that woke."""
        await clock.advance(seconds)
        for _ in range(50):
            await asyncio.sleep(0)
        return passes

    truncator = ActiveTruncator(
        database="DB1", logs=Path("/nonexistent"), clock=clock, header=lambda: None,
        peer_progress=progress, interval=5.0,
    )  # fmt: skip
    task = asyncio.create_task(truncator.run())
    try:
        assert await after(0) == 0  # its first wait begun
        assert await after(4.9) == 0, "a quiet log: nothing before the interval"
        assert await after(0.1) == 1
        for _ in range(truncator_module.BUSY_GENERATIONS - 1):
            truncator.closed()
        assert await after(2.0) == 1, "fewer closes than a busy log's"
        truncator.closed()
        assert await after(0.0) == 2, "at the busy log's last close, past the second"
        for _ in range(truncator_module.BUSY_GENERATIONS):
            truncator.closed()
        assert await after(0.5) == 2, "never within a second of the last pass"
        assert await after(0.5) == 3
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
