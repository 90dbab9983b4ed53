"""Items larger than a log generation: staged bodies, one commit, every stage reading them
whole (`replication_node/log/spanning.py`).  Real files, a real active copy; logs of 32 KiB
so a 300 KiB body spans ten generations."""

from __future__ import annotations

import asyncio
import threading
import uuid
from datetime import UTC, datetime

import pytest

from dag_common.clock import ManualClock
from dag_common.store_api import ItemIn
from replication_node.active.item_writes import stage_plan
from replication_node.active.mailbox_store import MailboxStore
from replication_node.errors import InspectionFailed, LogRecordError
from replication_node.log import logfile, logstream
from replication_node.log.body import BodyReader
from replication_node.log.inspector import inspect_generation
from replication_node.log.logdir import list_closed_generations
from replication_node.log.logfile import HEADER_SIZE, LogHeader, RecordType, encode_record
from replication_node.log.recovery import plan_recovery
from replication_node.log.spanning import (
    PART_OVERHEAD,
    BlobId,
    PendingBlob,
    decode_part,
    encode_abort,
    encode_part,
    track,
)
from replication_node.log.writer import CLOSE_SIZE
from tests.cluster_harness import wait_until
from tests.replication_node.disk import Op, Step, TestDisk
from tests.replication_node.helpers import (
    body_of,
    commit_staged,
    mount,
    passive,
    replayed_through,
    text_body,
)

SIZE = 32 * 1024


def generations(logs) -> list[logfile.ScanResult]:
    return [
        logfile.verify_closed((logs / logfile.closed_log_name(g)).read_bytes(), g)
        for g in list_closed_generations(logs)
    ]


def chained(results) -> list:
    """`track` over consecutive generations, each checked against its predecessor."""
    out, before = [], {}
    for result in results:
        spans = track(result, before)
        out.append(spans)
        before = spans.pending
    return out


@pytest.mark.parametrize(
    ("sizes", "staged"),
    [
        ([100, 200], []),
        ([5000], [0]),  # over an eighth of 32 KiB
        ([300_000, 10], [0]),
        ([3000] * 8, []),  # 24000 inline: fits in three quarters of a log file
        ([3000] * 10, [0, 1]),  # 30000 inline: the largest go until 24576 are left
        ([4000] * 8, [0, 1]),
    ],
)
def test_stage_plan_keeps_a_commit_record_within_three_quarters_of_a_log_file(sizes, staged):
    assert stage_plan(sizes, SIZE) == staged
    inline = sum(s for i, s in enumerate(sizes) if i not in staged)
    assert inline <= SIZE * 3 // 4


async def test_an_item_ten_times_a_log_file_commits_once_across_generations(tmp_path):
    copy = await mount(tmp_path, log_file_size=SIZE)
    store = MailboxStore(copy)
    await store.create_mailbox("m")
    text = text_body(300_000)
    result = await store.put_items("m", [ItemIn(item_id="big", body=text)])
    assert body_of(copy, "m", "big") == text
    await copy.roll()
    spans = chained(generations(copy.paths.logs))
    (begun,) = [b for s in spans for b in s.begun]
    (ended,) = [(s.generation, r) for s in spans for r in s.committed]
    assert ended[0] == result.lsn.generation and ended[0] - begun.generation >= 9
    assert ended[1].id == begun and ended[1].size == len(text)
    assert spans[-1].pending == {}
    # every generation between carried it, and said where its Logs Required begin
    for s in spans:
        if begun.generation <= s.generation < ended[0]:
            assert s.required_from == begun.generation
    # a crash: recovery reads the body back from the parts on disk, whole
    await copy.crash_close()
    copy = await mount(tmp_path, log_file_size=SIZE, create=False)
    assert body_of(copy, "m", "big") == text
    await copy.crash_close()


async def test_small_commits_interleave_with_a_staged_body_and_keep_change_number_order(
    tmp_path,
):
    copy = await mount(tmp_path, log_file_size=SIZE)
    store = MailboxStore(copy)
    await store.create_mailbox("m")

    async def small(i: int):
        await asyncio.sleep(0.001 * i)
        return await store.put_items("m", [ItemIn(item_id=f"s{i}", body="x" * 100)])

    big, *smalls = await asyncio.gather(
        store.put_items("m", [ItemIn(item_id="big", body=text_body(6_000_000))]),
        *(small(i) for i in range(40)),
    )
    await copy.roll()
    spans = chained(generations(copy.paths.logs))
    (begun,) = [b for s in spans for b in s.begun]
    inside = [r for r in smalls if begun.generation < r.lsn.generation < big.lsn.generation]
    assert inside, "no small commit was written while the body was staged"
    by_lsn = sorted([big, *smalls], key=lambda r: (r.lsn.generation, r.lsn.offset))
    numbers = [r.change_number for r in by_lsn]
    assert numbers == sorted(numbers), "change numbers must follow log order"
    await copy.crash_close()


async def test_a_body_staged_while_no_commit_waits_is_settled_a_span_at_a_time(
    tmp_path, monkeypatch
):
    """Its generations are made durable a span at a time (each file fsync'd once there, one
    directory fsync for the span's renames), and nobody hears of one before: on disk the
    log's named generations end where the stream says; the commit settles the rest."""
    # a generation's worth of parts per batch, as the stream gives while no commit waits
    monkeypatch.setattr(logstream, "STAGE_SLICE_IDLE", SIZE)
    clock = ManualClock()
    disk = TestDisk()
    copy = await mount(tmp_path, log_file_size=SIZE, clock=clock, log_files=disk)
    store = MailboxStore(copy)
    await store.create_mailbox("m")  # the open log no longer empty: the body starts mid-file
    await clock.advance(1.0)  # no commit flows any more
    stream, writer, logs = copy.stream, copy.stream._file, copy.paths.logs
    writer.span_limit = 4  # ten generations: two settles of four before the commit's
    settles: list[Step] = []
    disk.watch(Op.FSYNC_DIR, settles.append)
    closed: list[int] = []
    stream.add_listener(lambda e: closed.append(e.generation) if hasattr(e, "close_time") else 0)
    fsyncs, generation = stream.fsyncs, stream.generation
    text = text_body(10 * SIZE)
    ref = await copy.stage(BodyReader(text.encode()))
    rolls = writer.header.generation - generation
    assert rolls >= 10
    assert list_closed_generations(logs)[-1] == stream.last_closed_generation
    assert closed == list(range(generation, stream.generation)), "heard of once settled"
    assert len(settles) == rolls // writer.span_limit
    big = await commit_staged(copy, text, ref)
    assert big.lsn.generation == stream.generation == writer.header.generation
    assert closed == list(range(generation, stream.generation))
    assert list_closed_generations(logs)[-1] == stream.generation - 1
    # every file of the body once, and the open one again at each settle after the first
    assert stream.fsyncs - fsyncs == rolls + len(settles)
    assert [r.item_id for r in copy.items("m")] == ["big"]
    await copy.crash_close()


async def test_a_request_waits_one_generation_at_most_behind_a_body_written_on_and_on(
    tmp_path, monkeypatch
):
    """While no commit flows, a batch of a body's parts goes on from generation to
    generation (up to its span's limit) instead of returning to the event loop at each.  A
    commit queued meanwhile stops it at the end of the generation being written: it lands
    mid-body, not behind the body's last part."""
    monkeypatch.setattr(logstream, "STAGE_SLICE_IDLE", SIZE)
    clock = ManualClock()
    copy = await mount(tmp_path, log_file_size=SIZE, clock=clock)
    store = MailboxStore(copy)
    await store.create_mailbox("m")
    await clock.advance(1.0)  # no commit flows any more
    stream, writer = copy.stream, copy.stream._file
    writer.span_limit = 100  # the body's twelve generations in one span
    loop = asyncio.get_running_loop()
    small: list[asyncio.Task] = []
    rolls: list[int] = []
    real_roll, real_put = writer.roll, stream._put
    commit_queued = threading.Event()

    def put(pending) -> None:
        real_put(pending)
        if pending.is_commit:
            commit_queued.set()

    async def queue_small() -> None:
        small.append(asyncio.create_task(store.put_items("m", [ItemIn(item_id="s", body="x")])))

    def roll(cause):  # on the writer thread
        closed = real_roll(cause)
        rolls.append(closed.generation)
        if len(rolls) == 2:  # mid-body: a commit comes, and is queued before the writer goes on
            asyncio.run_coroutine_threadsafe(queue_small(), loop).result(timeout=30)
            assert commit_queued.wait(timeout=30), "the commit was never queued"
        return closed

    monkeypatch.setattr(stream, "_put", put)
    monkeypatch.setattr(writer, "roll", roll)
    text = text_body(12 * SIZE)
    ref = await copy.stage(BodyReader(text.encode()))
    (task,) = small
    ack = await task
    assert ack.lsn.generation <= rolls[1] + 2, "one generation more at most"
    body_end = writer.header.generation
    assert body_end >= rolls[1] + 8, "the body went on after it"
    big = await commit_staged(copy, text, ref)
    assert big.lsn.generation >= body_end
    assert {r.item_id for r in copy.items("m")} == {"s", "big"}
    await copy.crash_close()


async def test_a_body_staged_while_commits_flow_is_settled_batch_by_batch(tmp_path, monkeypatch):
    """Beside small commits, a batch of parts is made durable when it ends, as a commit's
    is: the large writer goes at that pace, and the small commits' fsyncs do not find a
    span of unsettled generations in front of them."""
    monkeypatch.setattr(logstream, "STAGE_SLICE_IDLE", SIZE)
    clock = ManualClock()
    disk = TestDisk()
    copy = await mount(tmp_path, log_file_size=SIZE, clock=clock, log_files=disk)
    await MailboxStore(copy).create_mailbox("m")  # a commit: they flow (the clock stands)
    stream, writer = copy.stream, copy.stream._file
    generation = stream.generation
    settles: list[Step] = []
    disk.watch(Op.FSYNC_DIR, settles.append)
    await copy.stage(BodyReader(text_body(6 * SIZE).encode()))
    assert not writer.span_open
    assert stream.generation == writer.header.generation
    assert len(settles) == stream.generation - generation, "one settle a roll"
    await copy.crash_close()


async def test_a_body_staged_and_never_committed_is_aborted_by_recovery(tmp_path):
    copy = await mount(tmp_path, log_file_size=SIZE)
    store = MailboxStore(copy)
    await store.create_mailbox("m")
    # the crash comes before its commit
    ref = await copy.stage(BodyReader(text_body(100_000).encode()))
    await copy.crash_close()
    plan = plan_recovery(copy.paths.logs, copy.db.header)
    assert set(plan.pending) == {ref.id}
    copy = await mount(tmp_path, log_file_size=SIZE, create=False)
    assert any("never committed" in note for note in copy.recovery_notes)
    assert copy.stream.pending_bodies == []
    await store_after(copy).put_items("m", [ItemIn(item_id="next", body="y")])
    await copy.roll()
    spans = chained(generations(copy.paths.logs))
    assert [b for s in spans for b in s.aborted] == [ref.id]
    assert spans[-1].pending == {}
    assert [i.item_id for i in copy.items("m")] == ["next"]
    await copy.crash_close()


def store_after(copy) -> MailboxStore:
    return MailboxStore(copy)


async def test_a_torn_part_at_the_end_of_the_open_log_is_cut_and_its_body_aborted(tmp_path):
    copy = await mount(tmp_path, log_file_size=SIZE)
    store = MailboxStore(copy)
    await store.create_mailbox("m")
    await copy.stage(BodyReader(text_body(100_000).encode()))
    await copy.crash_close()
    open_log = copy.paths.logs / logfile.OPEN_LOG_NAME
    data = open_log.read_bytes()
    last = logfile.scan(data).records[-1]
    assert last.type is RecordType.PART
    open_log.write_bytes(data[: last.offset + last.size // 2])  # kill -9 mid-write
    copy = await mount(tmp_path, log_file_size=SIZE, create=False)
    assert copy.stream.pending_bodies == []
    result = await store_after(copy).put_items("m", [ItemIn(item_id="after", body="z")])
    assert result.change_number > 0 and copy.item("m", "after") is not None
    await copy.crash_close()


def _parts_of(results):
    return [(res, r) for res in results for r in res.records if r.type is RecordType.PART]


async def _spanning_log(tmp_path):
    copy = await mount(tmp_path, log_file_size=SIZE)
    store = MailboxStore(copy)
    await store.create_mailbox("m")
    await store.put_items("m", [ItemIn(item_id="big", body=text_body(120_000))])
    await copy.roll()
    results = generations(copy.paths.logs)
    await copy.crash_close()
    return copy, results


def _inspect(copy, data, gen, prev_pending):
    prev = logfile.read_header(copy.paths.logs / logfile.closed_log_name(gen - 1))
    return inspect_generation(
        data,
        generation=gen,
        log_signature=copy.db.header.log_signature,
        database_signature=copy.db.header.database_signature,
        prev=prev,
        highest_known=10**6,
        prev_pending=prev_pending,
    )


async def test_inspection_refuses_a_bit_flip_in_a_continuation_naming_it(tmp_path):
    copy, results = await _spanning_log(tmp_path)
    spans = chained(results)
    res, rec = next((res, r) for res, r in _parts_of(results) if decode_part(r)[1] > 0)
    gen = res.header.generation
    path = copy.paths.logs / logfile.closed_log_name(gen)
    data = bytearray(path.read_bytes())
    data[rec.offset + rec.size - 10] ^= 0x01
    before = spans[gen - 2].pending
    with pytest.raises(InspectionFailed, match=f"generation {gen}: record checksum mismatch"):
        _inspect(copy, bytes(data), gen, before)
    assert _inspect(copy, path.read_bytes(), gen, before).pending == spans[gen - 1].pending


async def test_inspection_refuses_a_forged_continuation_with_a_valid_checksum(tmp_path):
    copy, results = await _spanning_log(tmp_path)
    spans = chained(results)
    res, rec = next((res, r) for res, r in _parts_of(results) if decode_part(r)[1] > 1)
    gen = res.header.generation
    blob, index, chunk = decode_part(rec)
    salt = res.header.salt  # a valid checksum in this generation
    forged = encode_part(blob, index + 1, chunk, rec.commit_time, salt=salt)  # a part skipped
    data = bytearray((copy.paths.logs / logfile.closed_log_name(gen)).read_bytes())
    data[rec.offset : rec.offset + rec.size] = forged
    with pytest.raises(InspectionFailed, match=f"part {index + 1} of body {blob} follows"):
        _inspect(copy, bytes(data), gen, spans[gen - 2].pending)


async def test_inspection_refuses_a_generation_that_carries_other_than_its_predecessor_left(
    tmp_path,
):
    copy, results = await _spanning_log(tmp_path)
    spans = chained(results)
    gen = next(s.generation for s in spans if s.carried)
    data = (copy.paths.logs / logfile.closed_log_name(gen)).read_bytes()
    with pytest.raises(InspectionFailed, match=f"generation {gen} carries staged bodies"):
        _inspect(copy, data, gen, {})  # as if the generation before had nothing pending


def test_a_commit_naming_a_body_of_another_size_is_refused():
    """A forged commit record: its body reference does not match what the parts hold."""
    now = datetime.now(UTC)
    header = LogHeader(1, uuid.uuid4(), uuid.uuid4(), now, None, SIZE)
    blob = BlobId(1, HEADER_SIZE)
    salt = header.salt
    part = encode_part(blob, 0, b"hello", now, salt=salt)
    state = PendingBlob(blob).add(b"hello")
    bad = [blob.generation, blob.offset, state.size + 1, state.crc]
    commit = logfile.encode_transaction([{"op": "x", "body_blob": 0}], now, [bad], salt=salt)
    data = header.encode() + part + commit + encode_record(RecordType.CLOSE, now, salt=salt)
    with pytest.raises(LogRecordError, match="commits body 1:512 of 6 bytes"):
        track(logfile.verify_closed(data, 1), {})


async def test_a_passive_replays_a_spanning_item_whole_and_keeps_its_parts_until_the_commit(
    share, tmp_path
):
    await share.write(0, 5)
    copy = passive(share, tmp_path)
    await copy.start()
    active = share.active.copy
    text = text_body(150_000, seed=7)
    ref = await active.stage(BodyReader(text.encode()))  # staged; its commit comes later
    last = await share.roll()
    await wait_until("replay of the parts", replayed_through(copy, last))
    header = copy._db.header
    assert header.required_from == ref.id.generation, "Logs Required begin at the first part"
    assert (copy.paths.logs / logfile.closed_log_name(ref.id.generation)).exists()
    # the passive restarts (it keeps no part in memory), then the commit arrives
    await copy.stop()
    copy = passive(share, tmp_path)
    await copy.start()
    await commit_staged(active, text, ref)
    last = await share.roll()
    await wait_until("replay of the commit", replayed_through(copy, last))
    assert copy.reader().item("m", "big").body == text
    assert copy._db.header.required_from == 0
    await copy.stop()


async def test_a_copy_seeded_while_a_body_is_staged_fetches_the_logs_required_below_its_waypoint(
    share, tmp_path
):
    await share.write(0, 5)
    active = share.active.copy
    text = text_body(100_000, seed=3)
    ref = await active.stage(BodyReader(text.encode()))
    for i in range(4):  # the active's database file moves past the parts (LLR depth 2)
        await share.write(10 + i, 1)
        await share.roll()
    await wait_until("the LLR flush", lambda: active.db.header.waypoint > ref.id.generation + 2)
    header = active.db.header
    assert header.required_from == ref.id.generation
    assert header.as_dict()["log_required"] == [ref.id.generation, header.waypoint]
    copy = passive(share, tmp_path)  # seeded from the active's file: waypoint above the parts
    await copy.start()
    last = share.active.last_log_generated
    await wait_until("replay", replayed_through(copy, last))
    for gen in range(ref.id.generation, header.waypoint + 1):
        assert (copy.paths.logs / logfile.closed_log_name(gen)).exists()
    await commit_staged(active, text, ref)
    last = await share.roll()
    await wait_until("replay of the commit", replayed_through(copy, last))
    assert copy.reader().item("m", "big").body == text
    await copy.stop()


@pytest.mark.parametrize("short", [0, 12, 24])
async def test_a_recovered_open_log_left_full_by_a_part_carries_the_body_its_abort_rolls_to(
    tmp_path, short
):
    """Killed between a part's write and the roll it made due, the active recovers an open
    log with no room for the ABORT of the body it never committed: that record rolls first,
    and the generation it lands in must carry the body (found by CI: generation 10 began
    with an ABORT it did not carry, and every copy's inspection refused it)."""
    copy = await mount(tmp_path, log_file_size=SIZE)
    ref = await copy.stage(BodyReader(text_body(40_000).encode()))  # ends in the open log
    await copy.crash_close()
    open_log = copy.paths.logs / logfile.OPEN_LOG_NAME
    data = open_log.read_bytes()
    scan = logfile.scan(data)
    last = scan.records[-1]
    blob, index, _ = decode_part(last)
    assert blob == ref.id
    # the part the killed writer wrote last: it ends `short` bytes before the room kept for
    # the close, less than an ABORT needs
    abort = len(encode_abort(blob, last.commit_time))
    assert short < abort
    end = SIZE - CLOSE_SIZE - short
    chunk = b"y" * (end - len(data) - PART_OVERHEAD)
    part = encode_part(blob, index + 1, chunk, last.commit_time, salt=scan.header.salt)
    open_log.write_bytes(data + part)
    copy = await mount(tmp_path, log_file_size=SIZE, create=False)
    assert any("never committed" in note for note in copy.recovery_notes)
    await MailboxStore(copy).create_mailbox("m")
    await copy.roll()
    spans = chained(generations(copy.paths.logs))  # refuses an ABORT of a body not carried
    assert [b for s in spans for b in s.aborted] == [ref.id]
    assert spans[-1].pending == {}
    await copy.crash_close()


async def test_a_dismount_aborting_more_bodies_than_the_open_log_has_room_for_carries_each(
    tmp_path,
):
    """The ABORTs a dismount writes for the bodies still staged may need a roll half-way:
    the generation it opens carries the bodies not aborted yet, and no other."""
    copy = await mount(tmp_path, log_file_size=SIZE)
    await copy.roll(force=True)
    refs = [await copy.stage(BodyReader(text_body(400).encode())) for _ in range(39)]
    writer = copy.stream._file
    # the last body leaves 700 bytes before the room kept for the close: 28 ABORTs' worth
    room = SIZE - CLOSE_SIZE - writer._offset - PART_OVERHEAD
    refs.append(await copy.stage(BodyReader(b"z" * (room - 700))))
    assert SIZE - CLOSE_SIZE - writer._offset == 700
    assert 40 * len(encode_abort(refs[0].id, datetime.now(UTC))) > 700
    await copy.dismount()
    spans = chained(generations(copy.paths.logs))
    assert sorted(b for s in spans for b in s.aborted) == sorted(r.id for r in refs)
    assert spans[-1].pending == {}
