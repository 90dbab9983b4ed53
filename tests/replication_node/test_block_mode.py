"""Block mode in one process: a real active instance serving its log share and block
connection on a real aiohttp server, and a PassiveCopy following it over a real WebSocket.
Damage on the wire is made by wrapping the real channel (the bytes of a frame altered
before they are decoded), so the copy's checks are the ones that run in production."""

from __future__ import annotations

from typing import Any

import pytest

from dag_common.model import CopyMode, CopyRole, CopyStatus, CopyStatusReport, Position
from dag_common.store_api import ItemIn
from replication_node.cluster.mount_policy import synchronously_held
from replication_node.errors import SynchronousCopiesMissing
from replication_node.log.blocks import BlockFeed
from replication_node.log.logfile import closed_log_name
from replication_node.passive.blocks import Taken
from replication_node.shipping.frames import (
    BlockProtocolError,
    Frame,
    FrameKind,
    decode_frame,
    encode_frame,
)
from tests.cluster_harness import wait_until
from tests.replication_node.helpers import items_as_read, passive, replayed_through, text_body
from tests.replication_node.share import start_share


class CountingWire:
    """The real HTTP source, counting the closed generations fetched over HTTP."""

    def __init__(self, source: Any, tamper: Any = None) -> None:
        self._source = source
        self._tamper = tamper
        self.fetched: list[int] = []
        self.channels = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._source, name)

    async def fetch(self, generation: int) -> bytes:
        self.fetched.append(generation)
        return await self._source.fetch(generation)

    async def open_blocks(self, start: Position, node: str) -> Any:
        channel = await self._source.open_blocks(start, node)
        self.channels += 1
        if self._tamper is None:
            return channel
        return TamperedChannel(channel, self._tamper)

    def mend(self) -> None:
        """The wire is sound from now on."""
        self._tamper = None


class TamperedChannel:
    def __init__(self, channel: Any, tamper: Any) -> None:
        self._channel = channel
        self._tamper = tamper
        self.frames = 0

    async def receive(self) -> Frame | None:
        frame = await self._channel.receive()
        if frame is None:
            return None
        self.frames += 1
        return self._tamper(self.frames, frame)

    async def ack(self, position: Position) -> None:
        await self._channel.ack(position)

    async def close(self) -> None:
        await self._channel.close()


def in_block_mode(copy) -> bool:
    return copy.status().copy_mode is CopyMode.BLOCK


async def test_a_caught_up_copy_follows_in_block_mode_and_builds_each_generation(share, tmp_path):
    await share.write(0, 10)
    first = await share.roll()
    wire = CountingWire(share.source())
    copy = passive(share, tmp_path, source=wire)
    await copy.start()
    await wait_until("replayed", replayed_through(copy, first))
    await wait_until("block mode", lambda: in_block_mode(copy))
    await share.write(10, 20)
    status = copy.status()
    await wait_until(
        "the writes held in block mode",
        lambda: (
            copy.status().block.offset >= share.active.copy.stream.open_header.log_file_size
            or copy.status().block.offset == share.active.copy.stream.feed.durable
        ),
    )
    assert status.block.generation == first + 1
    rolled = await share.roll()
    await wait_until("replayed", replayed_through(copy, rolled))
    assert rolled not in wire.fetched, "built from the blocks, not fetched"
    mine = copy.paths.logs / closed_log_name(rolled)
    assert mine.read_bytes() == share.closed_file(rolled).read_bytes()
    assert copy.reader().items("m") == items_as_read(share.active.copy, "m")
    assert not list((copy.paths.root / "Blocks").glob("*.log")), "buffers released"
    await copy.stop()


async def test_a_copy_joining_while_generations_were_written_without_blocks_gets_every_byte(
    share, tmp_path
):
    """No block is made while no copy follows (`log/blocks.py`): a copy that asks to follow
    while a large body's span, written without blocks, is still unsettled is given what
    the span wrote from the log's files, generation by generation with their CLOSED frames,
    then the blocks that follow: it holds every byte in order on one connection (a byte
    missed is a frame out of order, and block mode ends), each generation the active's file
    byte for byte."""
    await share.write(0, 10)
    first = await share.roll()
    copy = passive(share, tmp_path)  # caught up in file mode, then gone while the span is written
    await copy.start()
    await wait_until("replayed", replayed_through(copy, first))
    await copy.stop()
    stream = share.active.copy.stream
    await wait_until("no reader", lambda: not stream.feed.wanted)
    await wait_until("no commit flowing", lambda: not stream.commits_flowing)
    stager = share.active.store.message_stager(max_item_size=1 << 20, database="DB1")
    await stager.add(b"Subject: s\r\n\r\n" + text_body(150_000, seed=3).encode())
    await stager.finish()  # staged, over five 32 KiB generations; not committed
    assert stream._file.span_open, "the span is left unsettled (nothing answered needs it)"
    assert not stream._file._held_blocks[:-1] and stream._file._held_blocks[-1].gap
    assert stream.generation == first + 1, "nothing of the span is named yet"

    wire = CountingWire(share.source())
    copy = passive(share, tmp_path, source=wire)
    await copy.start()
    await wait_until("block mode", lambda: in_block_mode(copy))
    await share.write(10, 5)  # a commit settles the span: a gap, then the commit's blocks
    assert stream.generation > first + 4
    await wait_until(
        "the commit held in block mode",
        lambda: copy.status().block == (stream.generation, stream.feed.durable),
    )
    rolled = await share.roll()
    await wait_until("replayed", replayed_through(copy, rolled))
    assert in_block_mode(copy) and wire.channels == 1, "block mode never ended"
    for generation in range(first + 1, rolled + 1):
        mine = copy.paths.logs / closed_log_name(generation)
        assert mine.read_bytes() == share.closed_file(generation).read_bytes(), generation
    await copy.stop()


def _flip_a_bit(n: int, frame: Frame) -> Frame:
    if frame.kind is not FrameKind.DATA or n < 3:
        return frame
    raw = bytearray(encode_frame(frame))
    raw[-1] ^= 0x01
    return decode_frame(bytes(raw))  # raises: the CRC32C no longer matches


def _skip_one(n: int, frame: Frame) -> Frame:
    if frame.kind is FrameKind.DATA and n == 3:
        return Frame(FrameKind.DATA, frame.generation, frame.offset + 10, frame.payload)
    return frame


def _another_stream(n: int, frame: Frame) -> Frame:
    if frame.kind is FrameKind.HELLO:
        payload = frame.payload.replace(b'"log_signature":"', b'"log_signature":"0')
        return Frame(FrameKind.HELLO, payload=payload)
    return frame


def _old_epoch(n: int, frame: Frame) -> Frame:
    if frame.kind is FrameKind.HELLO:
        return Frame(FrameKind.HELLO, payload=frame.payload.replace(b'"epoch":1', b'"epoch":0'))
    return frame


def _forged_close(n: int, frame: Frame) -> Frame:
    if frame.kind is FrameKind.CLOSED:
        return Frame(FrameKind.CLOSED, frame.generation, frame.offset, crc=frame.crc ^ 1)
    return frame


@pytest.mark.parametrize(
    ("tamper", "words"),
    [
        (_flip_a_bit, "fails its CRC32C"),
        (_skip_one, "out of order"),
        (_another_stream, "not this copy's"),
        (_old_epoch, "at epoch 0"),
        (_forged_close, "differs from the active's closed file"),
    ],
    ids=["bit flip", "out of order", "another log stream", "old epoch", "forged close"],
)
async def test_a_bad_block_drops_the_copy_to_file_mode_and_nothing_wrong_is_replayed(
    share, tmp_path, tamper, words
):
    await share.write(0, 10)
    first = await share.roll()
    wire = CountingWire(share.source(), tamper)
    copy = passive(share, tmp_path, source=wire)
    await copy.start()
    await wait_until("replayed", replayed_through(copy, first))
    await wait_until("the block connection", lambda: wire.channels >= 1)
    await share.write(10, 5)
    await share.write(15, 5)
    rolled = await share.roll()

    def fell_back() -> bool:
        return words in (copy.status().copy_mode_reason or "")

    await wait_until(f"file mode ({words})", fell_back)
    await wait_until("replayed", replayed_through(copy, rolled))
    mine = copy.paths.logs / closed_log_name(rolled)
    assert mine.read_bytes() == share.closed_file(rolled).read_bytes()
    assert copy.reader().items("m") == items_as_read(share.active.copy, "m")
    # The wire mended and the copy caught up, it returns to block mode.
    wire.mend()
    await wait_until("block mode again", lambda: in_block_mode(copy))
    await copy.stop()


def test_a_frame_is_refused_whole_or_not_at_all():
    frame = encode_frame(Frame(FrameKind.DATA, 3, 512, b"records"))
    assert decode_frame(frame) == Frame(FrameKind.DATA, 3, 512, b"records", decode_frame(frame).crc)
    with pytest.raises(BlockProtocolError, match="shorter than its header"):
        decode_frame(frame[:10])
    with pytest.raises(BlockProtocolError, match="bytes of payload"):
        decode_frame(frame[:-1])
    with pytest.raises(BlockProtocolError, match="unknown block frame kind"):
        decode_frame(bytes([99]) + frame[1:])


def test_a_data_frame_decoded_views_its_message_rather_than_copying_it():
    message = encode_frame(Frame(FrameKind.DATA, 3, 512, b"r" * 100_000))
    payload = decode_frame(message).payload
    assert isinstance(payload, memoryview) and payload.obj is message
    assert payload == b"r" * 100_000


async def test_a_follower_that_falls_behind_the_feed_is_told_so():
    from replication_node.log.blocks import Block, FeedBehind

    feed = BlockFeed(generation=1, durable=512, capacity=100)
    _, _, start = feed.position()
    for i in range(5):
        await feed.publish([Block(Position(1, 512 + 60 * i), b"x" * 60)])
    with pytest.raises(FeedBehind):
        async for _ in feed.follow(start, idle=0.01):
            pass


async def test_a_publish_larger_than_the_feed_is_kept_whole_for_a_follower_caught_up():
    """A settle of many generations publishes more than the feed keeps, at once: a follower
    that was caught up gets every block of it; the next publish drops what is too old."""
    from replication_node.log.blocks import Block, FeedBehind

    feed = BlockFeed(generation=1, durable=512, capacity=100)
    _, _, start = feed.position()
    blocks = [Block(Position(1, 512 + 60 * i), b"x" * 60) for i in range(5)]
    await feed.publish(blocks)
    got = []
    async for block in feed.follow(start, idle=0.01):
        if block is None:
            break
        got.append(block)
    assert got == blocks
    await feed.publish([Block(Position(1, 812), b"y" * 60)])
    with pytest.raises(FeedBehind):
        async for _ in feed.follow(start, idle=0.01):
            pass


async def test_a_synchronous_commit_is_answered_only_once_its_copy_holds_it(tmp_path):
    share = await start_share(tmp_path, synchronous_copies=1, synchronous_wait=0.3)
    try:
        active = share.active
        with pytest.raises(SynchronousCopiesMissing, match="0 of 1 synchronous copies follow"):
            await share.write(0, 1)
        assert active.copy.stream.open_record_count == 0, "nothing written"
        assert "0 of 1 synchronous copies" in active.status().note
        copy = passive(share, tmp_path)
        await copy.start()
        await wait_until("the copy follows", lambda: active.copy.stream.feed.followers == {"p"})
        await share.write(0, 5)
        stream = active.copy.stream
        position = Position(stream.generation, stream.feed.durable)
        assert stream.feed.holding(position) == ["p"], "held by the copy before the answer"
        assert copy.status().block.offset == stream.feed.durable
        assert active.status().note is None and active.status().block_followers == ["p"]
        await copy.stop()
    finally:
        await share.close()


def report(node, inspected, generation=0, offset=0):
    return CopyStatusReport(
        database="DB1", node=node, site="s", role=CopyRole.PASSIVE,
        status=CopyStatus.DISCONNECTED_AND_HEALTHY, activation_preference=2,
        last_log_inspected=inspected, block=Position(generation, offset),
    )  # fmt: skip


@pytest.mark.parametrize(
    ("mine", "others", "copies", "held", "words"),
    [
        # the furthest buffer, every other passive asked: it holds every acknowledged commit
        (report("b", 6, 7, 9000), {"c": report("c", 6, 7, 4000)}, 1, True, "holds the most"),
        (report("b", 6, 7, 9000), {"c": report("c", 6, 7, 9000)}, 2, True, "holds the most"),
        # another copy holds more: what it holds beyond may have been acknowledged
        (report("b", 6, 7, 4000), {"c": report("c", 6, 7, 9000)}, 1, False, "c hold(s) more"),
        # as many copies unreachable as a commit needed: they may hold what this one lacks
        (report("b", 6, 7, 9000), {"c": None}, 1, False, "cannot be asked (c)"),
        (report("b", 6, 7, 9000), {"c": None, "d": None}, 2, False, "cannot be asked (c, d)"),
        # one unreachable of two a commit needed: the other holder is reachable
        (report("b", 6, 7, 9000), {"c": None, "d": report("d", 6, 7, 100)}, 2, True, "the most"),
        # no buffer of the open generation, or no synchronous copies at all
        (report("b", 6), {"c": report("c", 6)}, 1, False, "does not hold the open generation"),
        (report("b", 6, 7, 9000), {"c": report("c", 6)}, 0, False, ""),
    ],
)
def test_when_a_block_buffer_holds_every_acknowledged_commit(mine, others, copies, held, words):
    reports = {"a": None, "b": mine, **others}  # "a": the lost active
    covered, why = synchronously_held(
        copy=mine, reports=reports, old_active="a", synchronous_copies=copies, open_generation=7
    )
    assert covered is held and words in why


async def test_the_buffer_outlives_the_copys_process_and_is_kept_when_the_active_is_lost(
    share, tmp_path
):
    await share.write(0, 10)
    first = await share.roll()
    copy = passive(share, tmp_path)
    await copy.start()
    await wait_until("replayed", replayed_through(copy, first))
    await wait_until("block mode", lambda: in_block_mode(copy))
    await share.write(10, 5)  # acknowledged: in the open log, and in the copy's buffer
    feed = share.active.copy.stream.feed
    await wait_until("held", lambda: copy.status().block.offset == feed.durable)
    held = feed.durable
    await copy.stop()  # the copy's process ends
    await share.runner.cleanup()  # and the active is lost
    again = passive(share, tmp_path)  # the copy's process starts again
    await again.start()
    await wait_until("its buffer found again", lambda: again.status().block.offset == held)
    assert again.status().block.generation == first + 1
    kept = await again.keep_block_buffer()
    assert kept.kept is not None
    assert (kept.kept.generation, kept.kept.kept_through) == (first + 1, held)
    items = {op.get("item_id") for t in read_transactions(again, first + 1) for op in t.ops}
    assert {f"i{i}" for i in range(10, 15)} <= items
    await again.stop()


def read_transactions(copy, generation):
    from replication_node.log.logfile import scan

    return scan((copy.paths.logs / closed_log_name(generation)).read_bytes()).transactions


async def test_a_kept_open_log_is_not_claimed_as_the_lost_actives_epoch(share, tmp_path):
    """An open log kept as a generation (Attempt Copy Last Logs, or a block-mode buffer) is
    sealed by the copy from what it holds, not the lost active's generation as it wrote it:
    the copy claims no epoch on it, so a flush by LSN past what it kept is not counted on
    it while it is being activated (found by the resilience scenario partition-node, where
    such a flush was answered Satisfied and the write was then lost)."""
    await share.write(0, 10)
    first = await share.roll()
    copy = passive(share, tmp_path)
    await copy.start()
    await wait_until("replayed", replayed_through(copy, first))
    assert copy.status().epoch == 1
    await share.write(10, 5)  # acknowledged, in the active's open log
    data = (share.active.copy.paths.logs / "E00.log").read_bytes()
    kept = await copy._copier.copy_open_log(data)
    assert kept is not None and kept.generation == first + 1
    assert copy.status().epoch == 0
    await copy.stop()


async def test_a_synchronous_copy_holds_every_part_of_a_large_item_before_it_is_answered(
    tmp_path,
):
    """Block mode with a synchronous copy: a large item's body spans generations; its
    commit is answered once the copy holds every byte through it (its parts included), the
    copy builds each generation from the blocks, and the item replays whole there."""
    share = await start_share(tmp_path, synchronous_copies=1, synchronous_wait=5)
    try:
        copy = passive(share, tmp_path)
        await copy.start()
        active = share.active
        await wait_until("the copy follows", lambda: active.copy.stream.feed.followers == {"p"})
        await share.write(0, 1)
        text = text_body(150_000, seed=13)
        result = await active.store.put_items("m", [ItemIn(item_id="big", body=text)])
        stream = active.copy.stream
        assert stream.feed.holding(Position(stream.generation, stream.feed.durable)) == ["p"]
        assert result.lsn.generation >= 5, "the body spans generations (32 KiB logs)"
        last = await share.roll()
        await wait_until("replayed", replayed_through(copy, last))
        assert copy.reader().item("m", "big").body == text
        for gen in range(result.lsn.generation - 3, last + 1):
            assert (copy.paths.logs / closed_log_name(gen)).read_bytes() == (
                share.closed_file(gen).read_bytes()
            )
        await copy.stop()
    finally:
        await share.close()


async def test_a_copy_may_follow_a_generation_nothing_of_which_is_durable_yet(tmp_path):
    """While a staged body fills generation after generation, the roll that opens each holds
    its header's block back until the next batch makes it durable: the feed stands at the
    new generation with nothing durable.  A copy connecting then is taken, and gets the
    generation from its header on."""
    share = await start_share(tmp_path)
    try:
        stream = share.active.copy.stream
        with stream.feed.reader():  # a copy asking to follow: the writer makes the blocks
            await share.write(0, 1)
            await share.roll()
        feed, generation = stream.feed, stream.generation
        (header_seq,) = [n for n, b in feed._blocks if (b.generation, b.offset) == (generation, 0)]
        # the feed as it stands between the roll and the batch that publishes the header
        feed.position = lambda: (generation, 0, header_seq)
        channel = await share.source().open_blocks(Position(generation, 0), "t")
        try:
            assert (await channel.receive()).kind is FrameKind.HELLO
            first = await channel.receive()
            assert (first.kind, first.generation, first.offset) == (FrameKind.DATA, generation, 0)
            on_disk = share.active.paths.logs / "E00.log"
            assert first.payload == on_disk.read_bytes()[: len(first.payload)]
        finally:
            await channel.close()
    finally:
        await share.close()


def test_a_generation_taken_from_block_mode_is_linked_into_inspector_not_written_again(tmp_path):
    """The copier gives block mode's closed file a second name (its bytes fsync'd block by
    block already) rather than writing a megabyte again; a file released or replaced since
    it was read is not linked (the copier then writes the bytes it read)."""
    blocks, inspector = tmp_path / "Blocks", tmp_path / "Inspector"
    blocks.mkdir()
    inspector.mkdir()
    received = blocks / closed_log_name(7)
    received.write_bytes(b"generation 7 as received")
    taken = Taken.read(received)
    assert taken.data == b"generation 7 as received"
    assert taken.link(inspector / "a")
    assert (inspector / "a").stat().st_ino == received.stat().st_ino
    assert (inspector / "a").read_bytes() == taken.data
    assert not taken.link(inspector / "a"), "a name taken is not replaced"

    replaced = tmp_path / "other"
    replaced.write_bytes(b"another file")
    replaced.replace(received)
    assert not taken.link(inspector / "b") and not (inspector / "b").exists()
    received.unlink()
    assert not taken.link(inspector / "c") and not (inspector / "c").exists()


async def test_a_group_commit_is_framed_in_the_writers_own_buffer_not_copied(share):
    """The writer joins a group commit's records once, with room in front of them for a
    frame's header: the DATA frame block mode sends is a view of that buffer, the same
    bytes as a frame made by copying them."""
    feed = share.active.copy.stream.feed
    block = None
    with feed.reader():  # a copy following: the writer makes blocks
        _, _, sequence = feed.position()
        await share.write(0, 3)
        async for block in feed.follow(sequence, idle=0.5):
            if block is None or block.room is not None:
                break
    assert block is not None, "a group commit's block was published"
    copied = encode_frame(Frame(FrameKind.DATA, block.generation, block.offset, bytes(block.data)))
    frame = encode_frame(
        Frame(FrameKind.DATA, block.generation, block.offset, block.data), room=block.room
    )
    assert isinstance(frame, memoryview) and frame.obj is block.room
    assert frame == copied
    assert decode_frame(bytes(frame)).payload == block.data
