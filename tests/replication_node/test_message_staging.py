"""A message staged into the log as its bytes arrive (`active/message_staging.py`): real
files, a real active copy, logs of 256 KiB so that a 3 MiB message spans a dozen
generations and several parts.  The body committed is what the message's bytes make of it
(`rfc822.counted_message`), for UTF-8, 8-bit after ASCII and 8-bit after non-ASCII UTF-8
(staged again from the log), and survives a crash; a refused one is aborted; a part that
goes on with a body aborted meanwhile is refused (`LogStream.stage(continues=)`).  Messages
staged at once reuse the part buffers the ones before them used, until the node goes quiet
(`storage/idle_memory.py`)."""

from __future__ import annotations

import asyncio
import hashlib

import pytest

from dag_common.clock import ManualClock
from dag_common.errors import BadRequest, RequestTooLarge
from dag_common.rfc822 import BodyFormat, body_of_message
from dag_common.store_api import ItemIn
from replication_node.active.mailbox_store import MailboxStore
from replication_node.active.message_staging import PART, PART_BUFFERS
from replication_node.errors import StagedBodyLost
from replication_node.log.body import BodyReader
from replication_node.storage.idle_memory import Holders, IdleMemory
from tests.cluster_harness import wait_until
from tests.replication_node.helpers import body_of, mount

MiB = 1 << 20
LOGS = 256 * 1024
HEAD = b"Subject: =?utf-8?q?caf=C3=A9?=\r\nTo: a@example.org\r\n\r\n"
UTF8 = "Grüße, 测试 ✓ café\r\n".encode()
LATIN = b"cr\xe8me br\xfbl\xe9e\r\n"


def made(first: bytes, size: int, then: bytes = b"") -> bytes:
    out = HEAD + first * ((size - len(HEAD)) // len(first))
    return out + then * (MiB // max(1, len(then))) if then else out


MESSAGES = {
    "ascii": made(b"0123456789abcdef" * 4 + b"\r\n", 3 * MiB),
    "utf8": made(UTF8, 3 * MiB),
    "late8": made(b"x" * 70 + b"\r\n", 2 * MiB + 777, LATIN),
    "mixed": made(UTF8, 2 * MiB + 777, LATIN),
    "small": HEAD + LATIN,
}


async def staged_write(
    store: MailboxStore, item_id: str, raw: bytes, step: int, size: int | None = None
) -> str:
    stager = store.message_stager(max_item_size=36 * MiB, database="DB1", size=size)
    for at in range(0, len(raw), step):
        await stager.add(raw[at : at + step])
    staged = await stager.finish()
    item = ItemIn(item_id=item_id).model_copy(
        update={"body": staged.body, "format": staged.format, "subject": staged.subject}
    )
    await store.put_items("m", [item], staged={0: staged.ref})
    return staged.sha256


@pytest.mark.parametrize("name", sorted(MESSAGES))
async def test_a_message_staged_as_it_arrives_is_its_bytes(tmp_path, name):
    copy = await mount(tmp_path, log_file_size=LOGS)
    store = MailboxStore(copy)
    await store.create_mailbox("m")
    raw = MESSAGES[name]
    sha256 = await staged_write(store, "m1", raw, step=65_536 + 13)
    assert sha256 == hashlib.sha256(raw).hexdigest()
    text, fmt = body_of_message(raw)
    row = copy.item("m", "m1")
    assert (body_of(copy, "m", "m1") == text, row.format, row.subject) == (True, fmt, "café")
    eight_bit = name in ("late8", "mixed", "small")
    assert fmt is (BodyFormat.MESSAGE_8BIT if eight_bit else BodyFormat.MESSAGE)
    await copy.roll()
    assert copy.stream.pending_bodies == []  # the first staging of "mixed" was aborted
    await copy.crash_close()
    copy = await mount(tmp_path, log_file_size=LOGS, create=False)
    assert body_of(copy, "m", "m1") == text
    await copy.crash_close()


async def test_messages_one_after_another_reuse_buffers_and_stay_their_bytes(tmp_path):
    """Buffers kept from one message serve the next (what a longer one left in them never
    reaches a shorter one's body), and a declared size, right or wrong, sizes a short last
    part's buffer without changing a byte staged."""
    copy = await mount(tmp_path, log_file_size=LOGS)
    store = MailboxStore(copy)
    await store.create_mailbox("m")
    tail = made(b"y" * 70 + b"\r\n", MiB + 300)  # its last part: 300 bytes
    writes = [
        ("long", MESSAGES["utf8"], None),
        ("exact", tail, len(tail)),
        ("under", tail.replace(b"y", b"u"), len(tail) - 200),  # the last part's buffer grows
        ("over", tail.replace(b"y", b"o"), len(tail) + 5000),
        ("none", MESSAGES["ascii"][: 2 * MiB + 5], None),
    ]
    for item_id, raw, size in writes:
        sha256 = await staged_write(store, item_id, raw, step=65_536 + 13, size=size)
        assert sha256 == hashlib.sha256(raw).hexdigest(), item_id
    for item_id, raw, _ in writes:
        assert body_of(copy, "m", item_id) == body_of_message(raw)[0], item_id
    await copy.crash_close()


async def test_a_refused_message_is_aborted_and_a_lost_body_takes_no_more_parts(tmp_path):
    copy = await mount(tmp_path, log_file_size=LOGS)
    store = MailboxStore(copy)
    await store.create_mailbox("m")
    stager = store.message_stager(max_item_size=2 * MiB, database="DB1")
    await stager.add(MESSAGES["ascii"][: MiB + 10])  # one part staged
    with pytest.raises(RequestTooLarge):
        await stager.add(MESSAGES["ascii"][MiB + 10 :])
    await stager.abort()
    stager = store.message_stager(max_item_size=2 * MiB, database="DB1")
    with pytest.raises(BadRequest):
        await stager.add(b"no header here" * 100_000)
    await stager.abort()
    assert copy.stream.pending_bodies == []

    ref = await copy.stage(BodyReader(b"x" * 100_000))
    await copy.abort_staged([ref])
    with pytest.raises(StagedBodyLost):
        await copy.stage(BodyReader(b"y" * 1000), continues=ref.id)
    part = await copy.stage(BodyReader(b"z" * 50_000))
    whole = await copy.stage(BodyReader(b"z" * 70_000), continues=part.id)
    assert (whole.id, whole.size) == (part.id, 120_000)
    await copy.abort_staged([whole])
    await copy.roll()
    assert copy.stream.pending_bodies == [] and copy.items("m") == []
    await copy.crash_close()


async def test_messages_staged_at_once_reuse_every_buffer_until_the_node_goes_quiet(tmp_path):
    """16 messages staged at once, as 16 LMTP sessions stage them, take a buffer of PART
    each; the next 16 take those again and make none (a stager that kept four made a dozen
    more each round); the node quiet for an interval lets every kept one go."""
    copy = await mount(tmp_path, log_file_size=4 * MiB)
    store = MailboxStore(copy)
    await store.create_mailbox("m")
    PART_BUFFERS.let_go()
    lines = [made(f"{i:02d}".encode() * 35 + b"\r\n", MiB) for i in range(16)]
    raw = [m + b"z" * (MiB + 3 - len(m)) for m in lines]  # as the bench's: 3 bytes past PART

    async def round_of(tag: str) -> None:
        writes = [
            staged_write(store, f"{tag}{i}", r, step=65_536 + 13, size=len(r))
            for i, r in enumerate(raw)
        ]
        shas = await asyncio.gather(*writes)
        assert shas == [hashlib.sha256(r).hexdigest() for r in raw]

    made_before = PART_BUFFERS.made
    await round_of("a")
    first = PART_BUFFERS.made - made_before
    assert 4 < first <= 16  # more at once than four: each its own, none for the 3-byte tail
    assert PART_BUFFERS.kept == first * PART  # every one given back is kept while busy
    await round_of("b")
    assert PART_BUFFERS.made - made_before == first  # the second round made none
    for i, r in enumerate(raw):
        assert body_of(copy, "m", f"b{i}") == body_of_message(r)[0]

    clock = ManualClock()
    holders = Holders(databases=[copy.db], feeds=[copy.stream.feed],
                      let_go=(PART_BUFFERS.let_go,))  # fmt: skip
    idle = IdleMemory(holders=lambda: holders, clock=clock, interval=5.0)
    task = asyncio.create_task(idle.run())
    try:
        for _ in range(2):  # quiet: a tick to mark, the next to release
            await wait_until("the idle task asleep", lambda: bool(clock.pending_sleeps()))
            await clock.advance(5.0)
        await wait_until("the node's idle release", lambda: idle.releases == 1)
        assert PART_BUFFERS.kept == 0
    finally:
        task.cancel()
    await copy.crash_close()
