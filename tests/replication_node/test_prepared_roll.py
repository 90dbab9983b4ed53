"""The roll into a hidden file and the settle of a span (`writer.py`, `logdir.install_span`):
what the writer leaves on disk, and what recovery makes of a crash at each step.

The roll of generation G: (1) the CLOSE record appended to E00.log (its writeback started); (2)
G + 1's header and CARRIED record written into a new file under a hidden name. The settle, at
the end of a batch that answers anything, of every generation rolled since the last: (3) each
file fsync'd; (4) each renamed in order (E00.log to G's name, each hidden one to its
generation's name, the open one to E00.log); (5) one directory fsync. A kill -9 leaves a prefix
of these steps; a power loss can also leave what was not fsync'd torn. Each state is built here
on the files of a real copy (its commits acknowledged) and mounted: every acknowledged write is
there, nothing that was not answered is, the stream goes on at the right generation, and a
state no writer leaves stops recovery, naming why. (An E00.log still carrying a prepared header
is a state earlier versions could leave, which named the file before fsyncing it; recovery
still replaces it.)
"""

from __future__ import annotations

import asyncio
import errno
import os
import random
import signal
import subprocess
import sys
import uuid
from datetime import timedelta
from pathlib import Path

import pytest

from dag_common.clock import ManualClock
from dag_common.store_api import ItemIn
from replication_node.active.handover import last_logs_on_disk
from replication_node.active.mailbox_store import MailboxStore
from replication_node.errors import LogHeaderError, RecoveryError
from replication_node.log import logdir, logfile, logstream
from replication_node.log.body import BodyReader
from replication_node.log.events import Transaction
from replication_node.log.files import OpenMode
from replication_node.log.logfile import (
    HEADER_SIZE,
    OPEN_LOG_NAME,
    PREPARED_PREFIX,
    LogHeader,
    PreparedHeader,
    RecordType,
)
from replication_node.log.span import SYNCER_THREAD
from tests.cluster_harness import wait_until
from tests.replication_node.disk import Op, Step, TestDisk
from tests.replication_node.helpers import commit_staged, mount, text_body

SIZE = 16 * 1024
ROOT = Path(__file__).resolve().parents[2]


def items(copy) -> set[str]:
    return {r.item_id for r in copy.items("m") if not r.deleted}


def prepared_files(logs) -> list[str]:
    return sorted(p.name for p in logs.iterdir() if p.name.startswith(PREPARED_PREFIX))


async def crashed_copy(tmp_path):
    """A copy with acknowledged items over a few generations, its E00.log holding some,
    stopped without a clean shutdown: (its logs, the acknowledged items, E00.log's header)."""
    copy = await mount(tmp_path, log_file_size=SIZE, llr_depth=2)
    store = MailboxStore(copy)
    await store.create_mailbox("m")
    i = 0
    while copy.stream.generation < 3 or copy.stream.open_commits < 3:
        await store.put_items("m", [ItemIn(item_id=f"i{i}", body="z" * 900)])
        i += 1
    acked, header = items(copy), copy.stream.open_header
    await copy.crash_close()
    logs = copy.paths.logs
    await wait_until("the writer's prepared file removed", lambda: not prepared_files(logs))
    return logs, acked, header


def next_header(header: LogHeader) -> LogHeader:
    """The header the roll of `header`'s generation writes for the next one."""
    return LogHeader(
        generation=header.generation + 1,
        database_signature=header.database_signature,
        log_signature=header.log_signature,
        creation_time=header.creation_time + timedelta(seconds=1),
        prev_creation_time=header.creation_time,
        log_file_size=header.log_file_size,
    )


def prepare(logs, header: LogHeader, generation: int | None = None, log_signature=None):
    """A hidden file for the generation after `header`'s, with the `PreparedHeader` earlier
    versions wrote there before the roll (states they could leave are still recovered)."""
    path = logs / f"{PREPARED_PREFIX}{uuid.uuid4().hex}"
    path.write_bytes(
        PreparedHeader(
            generation or header.generation + 1,
            header.database_signature,
            log_signature or header.log_signature,
        ).encode()
    )
    return path


def close_open_log(logs, header: LogHeader) -> None:
    """Step 1: the CLOSE record appended to E00.log (durable)."""
    when = header.creation_time + timedelta(seconds=1)
    close = logfile.encode_record(RecordType.CLOSE, when, salt=header.salt)
    with open(logs / OPEN_LOG_NAME, "ab") as f:
        f.write(close)


def write_header(path, header: LogHeader) -> None:
    """Step 2: the next generation's header (no staged body pending: no CARRIED record)."""
    with open(path, "r+b") as f:
        f.write(next_header(header).encode())


def stray_removed(copy, stray) -> bool:
    """`stray` is gone, and no hidden file is left (a writer that has not rolled has none)."""
    return not stray.exists() and not prepared_files(copy.paths.logs)


async def remount(tmp_path):
    return await mount(tmp_path, log_file_size=SIZE, llr_depth=2, create=False)


async def goes_on(copy, acked: set[str], generation: int) -> None:
    """Every acknowledged write is there, the open log is `generation`, chained to the
    closed one below it, and the stream takes writes."""
    assert acked <= items(copy)
    assert copy.stream.generation == generation
    below = logfile.read_header(copy.paths.logs / logfile.closed_log_name(generation - 1))
    assert copy.stream.open_header.prev_creation_time == below.creation_time
    ack = await MailboxStore(copy).put_items("m", [ItemIn(item_id="after", body=".")])
    assert ack.lsn.generation == generation
    await copy.crash_close()
    copy = await remount(copy.paths.root)
    assert acked | {"after"} <= items(copy)
    await copy.crash_close()


# ---- the writer ----------------------------------------------------------------------------


async def test_a_settled_roll_leaves_no_hidden_file_and_a_real_header(tmp_path):
    copy = await mount(tmp_path, log_file_size=SIZE)
    logs = copy.paths.logs
    await MailboxStore(copy).create_mailbox("m")
    await copy.roll()
    gen = copy.stream.generation
    assert prepared_files(logs) == []
    assert logdir.list_closed_generations(logs)[-1] == gen - 1
    # the E00.log the roll named has its real header, chained to the closed generation
    header = logfile.read_header(logs / OPEN_LOG_NAME)
    assert header == copy.stream.open_header and header.generation == gen
    below = logfile.read_header(logs / logfile.closed_log_name(gen - 1))
    assert header.prev_creation_time == below.creation_time
    await copy.crash_close()


async def test_a_roll_that_cannot_create_the_next_file_stops_the_stream_losing_nothing(tmp_path):
    """A full disk at the roll: the roll request fails, the stream stops (nothing more is
    answered), and a remount finds every acknowledged write and goes on."""
    disk = TestDisk()
    copy = await mount(tmp_path, log_file_size=SIZE, log_files=disk)
    store = MailboxStore(copy)
    await store.create_mailbox("m")
    await store.put_items("m", [ItemIn(item_id="x", body="y")])
    gen = copy.stream.generation

    full = OSError(errno.ENOSPC, "No space left on device")
    disk.fail(Op.OPEN, full, when=lambda step: step.mode == OpenMode.NEW)  # the next file
    with pytest.raises(OSError, match="No space left"):
        await copy.roll()
    assert [s.op for s in disk.failed] == [Op.OPEN]
    assert copy.stream.failed.is_set()
    with pytest.raises(Exception, match="closed"):
        await store.put_items("m", [ItemIn(item_id="z", body="y")])
    await copy.crash_close()
    copy = await remount(tmp_path)
    assert {"x"} <= items(copy) and "z" not in items(copy)
    await goes_on(copy, items(copy), gen + 1)


def last_write_synced(disk: TestDisk) -> bool:
    """Whether the file the writer wrote last was fsync'd after it."""
    steps = list(disk.steps)
    last = max(i for i, s in enumerate(steps) if s.op == Op.WRITE)
    syncs = (Op.FDATASYNC, Op.FSYNC)
    return any(s.op in syncs and s.path == steps[last].path for s in steps[last + 1 :])


def watch_durability(disk: TestDisk, copy) -> dict[str, set[int]]:
    """Which generations' files an fsync made durable, and which generations a directory
    fsync made durably named (a closed generation's name, or E00.log), as the writer goes."""
    logs = copy.paths.logs
    generation = copy.stream.generation
    seen = {"fsynced": {generation}, "installed": {generation}}

    def fsynced(step: Step) -> None:  # on the writer thread, or early on the syncer's
        seen["fsynced"].add(logfile.read_header(step.path).generation)

    def installed(step: Step) -> None:
        seen["installed"].update(logdir.list_closed_generations(logs))
        seen["installed"].add(logfile.read_header(logs / OPEN_LOG_NAME).generation)

    disk.watch(Op.FDATASYNC, fsynced)
    disk.watch(Op.FSYNC_DIR, installed)
    return seen


async def test_block_mode_gets_a_new_generation_only_once_it_is_durable(tmp_path, monkeypatch):
    """A staged body's parts fill generation after generation, and the batches that write
    them answer nothing: their generations are settled a span at a time, and block mode
    gets a byte of one only once its file is fsync'd and named; a batch that answers a
    request leaves it all durable."""
    monkeypatch.setattr(logstream, "STAGE_SLICE_IDLE", SIZE)
    disk = TestDisk()
    copy = await mount(tmp_path, log_file_size=SIZE, log_files=disk)
    await MailboxStore(copy).create_mailbox("m")
    stream = copy.stream
    seen = watch_durability(disk, copy)
    published: list[tuple[int, int]] = []
    real_publish = stream.feed.publish

    async def publish(blocks):
        if blocks:  # nothing published that a power loss could take back
            assert last_write_synced(disk)
        for block in blocks:
            assert block.generation in seen["installed"], f"{block.generation}'s renames"
            assert block.generation in seen["fsynced"], f"{block.generation}'s file"
            published.append((block.generation, block.offset))
        await real_publish(blocks)

    monkeypatch.setattr(stream.feed, "publish", publish)
    reading = stream.feed.reader()  # a copy following to the end: the writer makes blocks
    reading.__enter__()
    first = stream.generation
    await copy.stage(BodyReader(text_body(5 * SIZE).encode()))
    headers = [g for g, offset in published if offset == 0]
    assert headers == list(range(first + 1, stream.generation + 1))
    assert published == sorted(published), "blocks in log order"
    await copy.roll(force=True)  # a roll alone answers: the new generation is durable at once
    assert (stream.generation, 0) in published
    assert stream.generation in seen["installed"]
    await copy.crash_close()


async def test_commits_beside_a_staged_body_are_answered_only_in_durable_generations(tmp_path):
    disk = TestDisk()
    copy = await mount(tmp_path, log_file_size=SIZE, log_files=disk)
    store = MailboxStore(copy)
    await store.create_mailbox("m")
    seen = watch_durability(disk, copy)
    answered: list[int] = []

    def on_event(event) -> None:  # before any commit of the batch is answered
        if isinstance(event, Transaction):
            assert event.generation in seen["installed"] and event.generation in seen["fsynced"]
            answered.append(event.generation)

    copy.stream.add_listener(on_event)
    big = asyncio.create_task(copy.stage(BodyReader(text_body(12 * SIZE).encode())))
    i = 0
    while not big.done():
        await store.put_items("m", [ItemIn(item_id=f"s{i}", body="x" * 300)])
        i += 1
    await big
    assert len(set(answered)) > 3, "commits in several generations the body crossed"
    await copy.crash_close()


# ---- recovery: a crash at each step of the roll -------------------------------------------


async def test_a_prepared_file_beside_the_open_log_is_removed(tmp_path):
    logs, acked, header = await crashed_copy(tmp_path)
    stray = prepare(logs, header)
    copy = await remount(tmp_path)
    assert stray_removed(copy, stray)
    assert copy.stream.open_header == header, "E00.log kept as it was"
    await goes_on(copy, acked, header.generation)


@pytest.mark.parametrize("header_written", [False, True])
async def test_a_crash_after_the_close_record_finishes_the_roll(tmp_path, header_written):
    logs, acked, header = await crashed_copy(tmp_path)
    stray = prepare(logs, header)
    close_open_log(logs, header)
    if header_written:
        write_header(stray, header)
    copy = await remount(tmp_path)
    assert stray_removed(copy, stray)
    assert logfile.verify_closed(
        (logs / logfile.closed_log_name(header.generation)).read_bytes(), header.generation
    )
    await goes_on(copy, acked, header.generation + 1)


async def test_a_crash_after_the_closed_generation_is_renamed(tmp_path):
    logs, acked, header = await crashed_copy(tmp_path)
    stray = prepare(logs, header)
    close_open_log(logs, header)
    write_header(stray, header)
    os.replace(logs / OPEN_LOG_NAME, logs / logfile.closed_log_name(header.generation))
    copy = await remount(tmp_path)
    assert stray_removed(copy, stray)
    await goes_on(copy, acked, header.generation + 1)


async def test_a_crash_after_both_renames_keeps_the_installed_open_log(tmp_path):
    logs, acked, header = await crashed_copy(tmp_path)
    stray = prepare(logs, header)
    close_open_log(logs, header)
    write_header(stray, header)
    os.replace(logs / OPEN_LOG_NAME, logs / logfile.closed_log_name(header.generation))
    os.replace(stray, logs / OPEN_LOG_NAME)
    copy = await remount(tmp_path)
    assert copy.stream.open_header == next_header(header), "the installed E00.log is used"
    assert not copy.recovery_notes
    await goes_on(copy, acked, header.generation + 1)


@pytest.mark.parametrize("torn_tail", [0, 3000])
async def test_an_open_log_whose_header_never_reached_the_disk_is_replaced(tmp_path, torn_tail):
    """A power loss after the renames, the new header not written back: E00.log still has
    the prepared header (and perhaps records written after it, never fsync'd, so never
    acknowledged: the first fsync would have written the header too)."""
    logs, acked, header = await crashed_copy(tmp_path)
    stray = prepare(logs, header)
    close_open_log(logs, header)
    with open(stray, "ab") as f:
        f.write(os.urandom(torn_tail))
    os.replace(logs / OPEN_LOG_NAME, logs / logfile.closed_log_name(header.generation))
    os.replace(stray, logs / OPEN_LOG_NAME)
    copy = await remount(tmp_path)
    (note,) = [n for n in copy.recovery_notes if "prepared header" in n]
    assert f"generation {header.generation + 1}" in note and f"{torn_tail} bytes" in note
    assert logfile.read_header(logs / OPEN_LOG_NAME).generation == header.generation + 1
    await goes_on(copy, acked, header.generation + 1)


async def test_a_prepared_open_log_for_another_generation_stops_recovery(tmp_path):
    logs, _, header = await crashed_copy(tmp_path)
    stray = prepare(logs, header, generation=header.generation + 2)
    close_open_log(logs, header)
    os.replace(logs / OPEN_LOG_NAME, logs / logfile.closed_log_name(header.generation))
    os.replace(stray, logs / OPEN_LOG_NAME)
    with pytest.raises(RecoveryError, match=f"prepared for generation {header.generation + 2}"):
        await remount(tmp_path)


async def test_a_prepared_open_log_of_another_stream_stops_recovery(tmp_path):
    logs, _, header = await crashed_copy(tmp_path)
    stray = prepare(logs, header, log_signature=uuid.uuid4())
    close_open_log(logs, header)
    os.replace(logs / OPEN_LOG_NAME, logs / logfile.closed_log_name(header.generation))
    os.replace(stray, logs / OPEN_LOG_NAME)
    with pytest.raises(RecoveryError, match="prepared for log stream"):
        await remount(tmp_path)


async def test_a_second_rename_durable_without_the_first_is_never_taken_silently(tmp_path):
    """No journaling file system does this; were one to, the closed generation would be
    gone from under E00.log, with acknowledged commits in it: recovery must stop."""
    logs, _, header = await crashed_copy(tmp_path)
    stray = prepare(logs, header)
    close_open_log(logs, header)
    os.replace(stray, logs / OPEN_LOG_NAME)  # the old E00.log (generation G) is gone
    with pytest.raises(RecoveryError, match="prepared for generation"):
        await remount(tmp_path)


async def test_a_torn_prepared_header_stops_recovery(tmp_path):
    logs, _, header = await crashed_copy(tmp_path)
    stray = prepare(logs, header)
    close_open_log(logs, header)
    data = bytearray(stray.read_bytes())
    data[20] ^= 0x04
    stray.write_bytes(bytes(data))
    os.replace(logs / OPEN_LOG_NAME, logs / logfile.closed_log_name(header.generation))
    os.replace(stray, logs / OPEN_LOG_NAME)
    with pytest.raises(RecoveryError, match=r"E00\.log is unusable: prepared log file"):
        await remount(tmp_path)


@pytest.mark.parametrize("open_log", ["closed", "renamed"])
async def test_a_prepared_file_holding_a_generation_nobody_was_told_of_is_removed(
    tmp_path, open_log
):
    """A power loss after a roll whose renames were not yet durable (the writer defers the
    directory fsync while a staged body goes on into the new generation, and answers
    nothing of it meanwhile): the prepared file may hold that generation's header, records,
    even its CLOSE record, fsync'd.  Nothing of it was answered or sent to a copy."""
    logs, acked, header = await crashed_copy(tmp_path)
    stray = prepare(logs, header)
    close_open_log(logs, header)
    nxt = next_header(header)
    ghost = logfile.encode_transaction(
        [{"op": "put_item", "mailbox": "m", "cn": 10_000, "item_id": "ghost", "folder": "Inbox"}],
        header.creation_time + timedelta(seconds=2),
        salt=nxt.salt,
    )
    with open(stray, "r+b") as f:
        f.write(nxt.encode() + ghost)
        when = header.creation_time + timedelta(3)
        f.write(logfile.encode_record(RecordType.CLOSE, when, salt=nxt.salt))
    if open_log == "renamed":
        os.replace(logs / OPEN_LOG_NAME, logs / logfile.closed_log_name(header.generation))
    copy = await remount(tmp_path)
    assert stray_removed(copy, stray)
    assert "ghost" not in items(copy)
    await goes_on(copy, acked, header.generation + 1)


# ---- recovery: a crash in the settle of a span -------------------------------------------


async def staged_span(tmp_path, monkeypatch, disk: TestDisk):
    """A copy with acknowledged items, then a body staged across four generations, none of
    them settled: (copy, acknowledged items, E00.log's generation, the body, its reference,
    E00.log's length when the body began)."""
    monkeypatch.setattr(logstream, "STAGE_SLICE_IDLE", SIZE)
    clock = ManualClock()
    copy = await mount(tmp_path, log_file_size=SIZE, llr_depth=2, clock=clock, log_files=disk)
    store = MailboxStore(copy)
    await store.create_mailbox("m")
    for i in range(4):
        await store.put_items("m", [ItemIn(item_id=f"i{i}", body="z" * 900)])
        if i == 1:
            await copy.roll()
    await clock.advance(1.0)  # no commit flows any more: the parts are left unsettled
    copy.stream._file.span_limit = 100
    first, begun = copy.stream.generation, copy.stream._file.offset
    text = text_body(4 * SIZE)
    ref = await copy.stage(BodyReader(text.encode()))
    assert copy.stream._file.span_open and copy.stream.generation == first
    return copy, items(copy), first, text, ref, begun


@pytest.mark.parametrize("renamed", [0, 1, 3])
async def test_a_crash_among_a_span_s_renames_loses_only_what_was_never_answered(
    tmp_path, monkeypatch, renamed
):
    """Every file of the span fsync'd, then `renamed` of its closed generations renamed
    (E00.log first), then the crash: the commit that ended the body (in a hidden file) was
    never answered, and is nowhere after recovery; the body is aborted."""
    disk = TestDisk()
    copy, acked, first, text, ref, _ = await staged_span(tmp_path, monkeypatch, disk)
    logs = copy.paths.logs
    before = len(disk.done(Op.REPLACE))
    disk.crash(Op.REPLACE, skip=renamed)
    with pytest.raises(OSError, match="the power went"):
        await commit_staged(copy, text, ref)
    await copy.crash_close()
    assert len(disk.done(Op.REPLACE)) - before == renamed
    assert (logs / OPEN_LOG_NAME).exists() == (renamed == 0)
    hidden = prepared_files(logs)
    assert len(hidden) >= 4 - renamed
    copy = await remount(tmp_path)
    assert items(copy) == acked, "the unanswered commit is nowhere"
    assert any("staged bodies never committed" in n for n in copy.recovery_notes)
    assert all(stray_removed(copy, logs / name) for name in hidden)
    await goes_on(copy, acked, first + max(renamed, 1))


@pytest.mark.parametrize("kept", [0.0, 0.5, 1.0])
async def test_a_power_loss_before_a_span_is_fsync_d_tears_only_its_unanswered_tail(
    tmp_path, monkeypatch, kept
):
    """The settle fails at its first fsync (nothing of the span durable), and the power loss
    keeps `kept` of what E00.log got after the last answered batch: its CLOSE record may be
    gone, or the parts before it torn.  The hidden files are removed, the tail is cut or the
    roll finished, and the acknowledged items are all there."""
    disk = TestDisk()
    copy, acked, first, text, ref, begun = await staged_span(tmp_path, monkeypatch, disk)
    logs = copy.paths.logs
    disk.crash(Op.FDATASYNC)
    with pytest.raises(OSError, match="the power went"):
        await commit_staged(copy, text, ref)
    await copy.crash_close()
    assert disk.crashed_at is not None and disk.crashed_at.op == Op.FDATASYNC
    hidden = prepared_files(logs)
    assert len(hidden) >= 4, "the span's generations, hidden"
    size = (logs / OPEN_LOG_NAME).stat().st_size
    os.truncate(logs / OPEN_LOG_NAME, begun + int((size - begun) * kept))
    copy = await remount(tmp_path)
    assert items(copy) == acked
    assert all(stray_removed(copy, logs / name) for name in hidden)
    assert logdir.list_closed_generations(logs)[-1] == first - (kept < 1)
    await goes_on(copy, acked, first + (kept == 1))


async def test_an_early_fsync_that_fails_stops_the_stream_before_its_span_is_named(
    tmp_path, monkeypatch
):
    """The generations a body crosses while no commit flows are fsync'd early, on the
    syncer thread, while the writer goes on.  One of those fsyncs fails (the disk's EIO):
    the commit that ends the body is refused, the stream stops, no generation of the span
    ever got its name, and a remount finds every acknowledged item and nothing of the body."""
    monkeypatch.setattr(logstream, "STAGE_SLICE_IDLE", SIZE)
    clock = ManualClock()
    disk = TestDisk()
    copy = await mount(tmp_path, log_file_size=SIZE, llr_depth=2, clock=clock, log_files=disk)
    store = MailboxStore(copy)
    await store.create_mailbox("m")
    await store.put_items("m", [ItemIn(item_id="acked", body="z" * 900)])
    await copy.roll()
    await clock.advance(1.0)  # no commit flows any more
    writer, logs = copy.stream._file, copy.paths.logs
    writer.span_limit = 100

    def early(step: Step) -> bool:
        return step.thread.startswith(SYNCER_THREAD)

    disk.fail(Op.FDATASYNC, OSError(errno.EIO, "Input/output error"), when=early, skip=1)
    named = logdir.list_closed_generations(logs)
    text = text_body(6 * SIZE)
    ref = await copy.stage(BodyReader(text.encode()))
    with pytest.raises(OSError, match="Input/output error"):
        await commit_staged(copy, text, ref)
    (failed,) = disk.failed
    assert early(failed), "the span's generations fsync'd early, off the writer thread"
    assert [s for s in disk.done(Op.FDATASYNC) if early(s)], "and one before it"
    assert copy.stream.failed.is_set()
    assert logdir.list_closed_generations(logs) == named, "nothing of the span named"
    await copy.crash_close()
    copy = await remount(tmp_path)
    assert items(copy) == {"acked"}
    assert any("staged bodies never committed" in n for n in copy.recovery_notes)
    await goes_on(copy, {"acked"}, named[-1] + 2)


# ---- the other readers of a log directory --------------------------------------------------


def test_a_prepared_header_is_never_a_log_header():
    header = PreparedHeader(7, uuid.uuid4(), uuid.uuid4())
    data = header.encode()
    assert len(data) == HEADER_SIZE and PreparedHeader.decode(data) == header
    with pytest.raises(LogHeaderError, match="prepared ahead of a roll"):
        LogHeader.decode(data)
    assert logfile.seal_open_log(data + b"\0" * 100) is None, "holds no transaction"
    assert logfile.parse_closed_log_name(f"{PREPARED_PREFIX}{uuid.uuid4().hex}") is None


async def test_the_last_logs_of_a_node_whose_open_log_is_a_prepared_file(tmp_path):
    """Attempt Copy Last Logs reads the files before any recovery: an E00.log that is still
    a prepared file holds no commit, and the open generation is the next one."""
    logs, _, header = await crashed_copy(tmp_path)
    stray = prepare(logs, header)
    close_open_log(logs, header)
    os.replace(logs / OPEN_LOG_NAME, logs / logfile.closed_log_name(header.generation))
    os.replace(stray, logs / OPEN_LOG_NAME)
    info = await asyncio.to_thread(last_logs_on_disk, logs, database="DB1", node="n", epoch=1)
    assert info.open_generation == header.generation + 1 and info.open_commits == 0
    assert info.last_generation == header.generation


# ---- over a real process: kill -9 while nearly every commit rolls --------------------------


def test_kill_9_while_every_commit_rolls_a_generation_loses_no_acknowledged_write(tmp_path):
    """Bodies larger than a 16 KiB generation, four writers: the log rolls all the time, so
    the kills land in rolls (and in prepared files being made) as often as anywhere.  Six
    kills on the same directory, each recovery starting from the last one's state."""
    acked: list[str] = []
    body = 20_000
    rng = random.Random(29)
    for _ in range(6):
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tests.replication_node.crash_writer",
                str(tmp_path),
                "4",
                str(SIZE),
                str(body),
            ],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert proc.stdout is not None
        want = rng.randint(5, 60)
        for got, line in enumerate(proc.stdout, 1):
            acked.append(line.split()[1])
            if got >= want:
                break
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        acked += [line.split()[1] for line in proc.stdout if line.startswith("ACK ")]

    async def check() -> None:
        copy = await remount(tmp_path)
        present = {r.item_id: r for r in copy.items("m") if not r.deleted}
        missing = [a for a in acked if a not in present]
        assert not missing, f"{len(missing)} acknowledged writes lost, e.g. {missing[:3]}"
        for row in present.values():  # nothing half-applied
            assert row.subject == row.item_id and row.body == "y" * body
        await MailboxStore(copy).put_items("m", [ItemIn(item_id="after", body=".")])
        await copy.crash_close()

    asyncio.run(check())
