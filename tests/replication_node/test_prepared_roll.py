"""The roll into a prepared file (`writer.py`, `logdir.install_prepared`): what the writer
leaves on disk, and what recovery makes of a crash at each step of the roll.

The roll of generation G, once the file for G + 1 is prepared (its `PreparedHeader`,
fsync'd): (1) the CLOSE record appended to E00.log and fsync'd; (2) G + 1's header and
CARRIED record written over the prepared header; (3) E00.log renamed to G's name; (4) the
prepared file renamed E00.log; (5) one directory fsync; the header is made durable by the
next fsync of the new E00.log.  A kill -9 leaves a prefix of these steps; a power loss can
also leave (4) without (2) on disk.  Each state is built here on the files of a real copy
(its commits acknowledged) and mounted: every acknowledged write is there, the stream goes
on at the right generation, and a state no roll leaves stops recovery, naming why.
"""

from __future__ import annotations

import asyncio
import os
import random
import signal
import subprocess
import sys
import uuid
from datetime import timedelta
from pathlib import Path

import pytest

from dag_common.store_api import ItemIn
from replication_node.active.handover import last_logs_on_disk
from replication_node.active.mailbox_store import MailboxStore
from replication_node.errors import LogHeaderError, RecoveryError
from replication_node.log import logdir, logfile, logstream
from replication_node.log.events import Transaction
from replication_node.log.logfile import (
    HEADER_SIZE,
    OPEN_LOG_NAME,
    PREPARED_PREFIX,
    LogHeader,
    PreparedHeader,
    RecordType,
)
from tests.cluster_harness import wait_until
from tests.replication_node.helpers import mount, text_body

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
    """Step 0, the helper thread's: a file prepared for the generation after `header`'s."""
    fd, path = logdir.prepare_open_log(
        logs,
        PreparedHeader(
            generation or header.generation + 1,
            header.database_signature,
            log_signature or header.log_signature,
        ),
    )
    os.close(fd)
    return path


def close_open_log(logs, header: LogHeader) -> None:
    """Step 1: the CLOSE record appended to E00.log (durable)."""
    close = logfile.encode_record(RecordType.CLOSE, header.creation_time + timedelta(seconds=1))
    with open(logs / OPEN_LOG_NAME, "ab") as f:
        f.write(close)


def write_header(path, header: LogHeader) -> None:
    """Step 2: the next generation's header (no staged body pending: no CARRIED record)."""
    with open(path, "r+b") as f:
        f.write(next_header(header).encode())


def stray_removed(copy, stray) -> bool:
    """`stray` is gone, and any prepared file left is the new writer's own, for the
    generation after its open one."""
    logs = copy.paths.logs
    helper = copy.stream._file._prepared
    if helper is not None:
        helper.result(timeout=10)  # the writer's own, whole
    for name in prepared_files(logs):
        with open(logs / name, "rb") as f:
            prepared = PreparedHeader.decode(f.read(HEADER_SIZE))
        assert prepared is not None and prepared.generation == copy.stream.generation + 1
    return not stray.exists()


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


async def test_the_next_generation_is_prepared_beside_the_open_log_and_removed_at_close(
    tmp_path,
):
    copy = await mount(tmp_path, log_file_size=SIZE)
    logs = copy.paths.logs
    await MailboxStore(copy).create_mailbox("m")
    await copy.roll()
    gen = copy.stream.generation
    await wait_until("the next file prepared", lambda: len(prepared_files(logs)) == 1)
    (name,) = prepared_files(logs)
    prepared = PreparedHeader.decode((logs / name).read_bytes())
    assert prepared is not None and prepared.generation == gen + 1
    assert prepared.log_signature == copy.stream.open_header.log_signature
    assert logdir.list_closed_generations(logs)[-1] == gen - 1, "never taken for a generation"
    # the E00.log the roll installed has its real header, chained to the closed generation
    header = logfile.read_header(logs / OPEN_LOG_NAME)
    assert header == copy.stream.open_header and header.generation == gen
    await copy.crash_close()
    await wait_until("the prepared file removed at close", lambda: not prepared_files(logs))


async def test_a_roll_whose_prepared_file_failed_prepares_it_itself(tmp_path, monkeypatch):
    copy = await mount(tmp_path, log_file_size=SIZE)
    store = MailboxStore(copy)
    await store.create_mailbox("m")
    real = logdir.prepare_open_log
    calls = []

    def flaky(log_dir, prepared):
        calls.append(prepared.generation)
        if len(calls) == 1:
            raise OSError(28, "No space left on device (for a moment)")
        return real(log_dir, prepared)

    monkeypatch.setattr("replication_node.log.writer.prepare_open_log", flaky)
    gen = copy.stream.generation
    await copy.roll()  # its roll starts the helper for gen + 2, which fails
    await wait_until("the helper ran", lambda: calls)
    await store.put_items("m", [ItemIn(item_id="x", body="y")])
    assert await copy.roll() == gen + 1  # the roll prepares the file itself
    assert calls[:2] == [gen + 2, gen + 2]
    assert copy.stream.generation == gen + 2
    await copy.crash_close()
    copy = await remount(tmp_path)
    assert "x" in items(copy)
    await copy.crash_close()


def watch_durability(monkeypatch, copy) -> dict[str, set[int]]:
    """Which generations' headers an fsync of E00.log, and whose installs (the renames of
    the roll that opened them) a directory fsync, made durable, as the writer goes."""
    writer = copy.stream._file
    seen = {"header": {writer.header.generation}, "installed": {writer.header.generation}}
    waiting: set[int] = set()
    real_fsync, real_fsync_dir, real_open_next = writer.fsync, writer.fsync_dir, writer._open_next

    def fsync() -> None:
        real_fsync()
        seen["header"].add(writer.header.generation)

    def fsync_dir() -> None:
        real_fsync_dir()
        seen["installed"].update(waiting)
        waiting.clear()

    def open_next(closed: int, carried: bytes) -> None:
        real_open_next(closed, carried)
        waiting.add(writer.header.generation)

    monkeypatch.setattr(writer, "fsync", fsync)
    monkeypatch.setattr(writer, "fsync_dir", fsync_dir)
    monkeypatch.setattr(writer, "_open_next", open_next)
    return seen


async def test_block_mode_gets_a_new_generation_only_once_it_is_durable(tmp_path, monkeypatch):
    """A staged body that fills a generation ends its batch with the roll, and the next
    batch goes on in the new one: its header and renames are not made durable by the first,
    so its header's block waits for the second; a batch that answers a request leaves it
    all durable."""
    monkeypatch.setattr(logstream, "STAGE_SLICE_IDLE", SIZE)
    copy = await mount(tmp_path, log_file_size=SIZE)
    await MailboxStore(copy).create_mailbox("m")
    stream = copy.stream
    seen = watch_durability(monkeypatch, copy)
    published: list[tuple[int, int]] = []
    real_publish = stream.feed.publish

    async def publish(blocks):
        for block in blocks:
            assert block.generation in seen["installed"], f"{block.generation}'s renames"
            if block.offset == 0:
                assert block.generation in seen["header"], f"header of {block.generation}"
            published.append((block.generation, block.offset))
        await real_publish(blocks)

    monkeypatch.setattr(stream.feed, "publish", publish)
    first = stream.generation
    await copy.stage(text_body(5 * SIZE).encode())
    headers = [g for g, offset in published if offset == 0]
    assert headers == list(range(first + 1, stream.generation + 1))
    assert published == sorted(published), "blocks in log order"
    await copy.roll(force=True)  # a roll alone answers: the new generation is durable at once
    assert (stream.generation, 0) in published
    assert stream.generation in seen["installed"]
    await copy.crash_close()


async def test_commits_beside_a_staged_body_are_answered_only_in_durable_generations(
    tmp_path, monkeypatch
):
    copy = await mount(tmp_path, log_file_size=SIZE)
    store = MailboxStore(copy)
    await store.create_mailbox("m")
    seen = watch_durability(monkeypatch, copy)
    answered: list[int] = []

    def on_event(event) -> None:  # before any commit of the batch is answered
        if isinstance(event, Transaction):
            assert event.generation in seen["installed"] and event.generation in seen["header"]
            answered.append(event.generation)

    copy.stream.add_listener(on_event)
    big = asyncio.create_task(copy.stage(text_body(12 * SIZE).encode()))
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
    ghost = logfile.encode_transaction(
        [{"op": "put_item", "mailbox": "m", "cn": 10_000, "item_id": "ghost", "folder": "Inbox"}],
        header.creation_time + timedelta(seconds=2),
    )
    with open(stray, "r+b") as f:
        f.write(next_header(header).encode() + ghost)
        f.write(logfile.encode_record(RecordType.CLOSE, header.creation_time + timedelta(3)))
    if open_log == "renamed":
        os.replace(logs / OPEN_LOG_NAME, logs / logfile.closed_log_name(header.generation))
    copy = await remount(tmp_path)
    assert stray_removed(copy, stray)
    assert "ghost" not in items(copy)
    await goes_on(copy, acked, header.generation + 1)


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
