"""A FETCH of whole bodies written from the read-ahead (`imap_front.fetch_bodies`) against
pymap's own path for the same messages: the same bytes, for any mix of `BODY.PEEK[]` with
UID, FLAGS, INTERNALDATE and MODSEQ, bodies under and over `DIRECT_AT` (those handed to the
transport as they are), messages gone from the node and expunged, and an unsolicited FETCH
merged into a line."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

from hypothesis import given, settings
from hypothesis import strategies as st
from pymap.flags import PermanentFlags, SessionFlags
from pymap.parsing.primitives import List
from pymap.parsing.response.specials import FetchResponse
from pymap.parsing.specials import FetchAttribute, FetchValue, ObjectId
from pymap.parsing.specials.flag import Deleted, Flag, Flagged, Seen

from imap_front.condstore import ModseqAttributes, ModseqFetchAttribute
from imap_front.fetch_bodies import DIRECT_AT, WRITE_AT, BodiesLines, streamable
from imap_front.folders import Message
from imap_front.protocol import _Gathered
from imap_front.selected import CompactSelected

BODY = FetchAttribute(b"BODY.PEEK", FetchAttribute.Section(()))


class _Bodies:
    """The read-ahead's `get`: each message's bytes (None: gone from the node)."""

    def __init__(self, raw: dict[str, bytes | None]) -> None:
        self.raw = raw

    async def get(self, item_id: str) -> bytes | memoryview | None:
        raw = self.raw[item_id]
        return None if raw is None else memoryview(raw)


def _attr(name: bytes) -> FetchAttribute:
    if name == b"BODY.PEEK[]":
        return BODY
    return ModseqFetchAttribute(name) if name == b"MODSEQ" else FetchAttribute(name)


def _messages(spec: list[tuple[int, bool, bool]]) -> tuple[list, dict[str, bytes | None]]:
    raw: dict[str, bytes | None] = {}
    out = []
    for i, (size, gone, expunged) in enumerate(spec, 1):
        item = f"id{i}"
        body = (b"Subject: m%d\r\n\r\n" % i + bytes(range(256)) * (size // 256 + 1))[:size]
        raw[item] = None if gone else body
        msg = Message(i * 3, datetime.fromtimestamp(i * 1000, UTC), [Seen] if i % 2 else [],
                      item_id=item, size=size, api=None, expunged=expunged, modseq=i)  # type: ignore[arg-type]  # fmt: skip
        out.append((i, msg))
    bodies = _Bodies(raw)
    for _, msg in out:
        msg.bodies = bodies  # type: ignore[assignment]
    return out, raw


def _pymaps(messages: list, attrs: list, selected, merged: dict) -> bytes:
    async def run() -> bytes:
        out = _Gathered()
        for seq, msg in messages:
            values = ModseqAttributes(msg, selected, attrs)
            response = FetchResponse(seq, values, writing_hook=values.load_hook())
            if seq in merged:
                response = response.merge(FetchResponse(seq, merged[seq]))
            await response.async_write(out)
        return bytes(out.data)

    return asyncio.run(run())


def _ours(lines: BodiesLines) -> tuple[bytes, list[int]]:
    """The bytes `stream` hands on, in order, and the size of each hand-over."""
    sent: list[bytes] = []

    async def send(out: _Gathered, data: bytes | memoryview | None = None) -> None:
        if out.data:
            sent.append(bytes(out.take()))
        if data is not None:
            sent.append(bytes(data))

    async def run() -> bytes:
        out = _Gathered()
        await lines.stream(out, send)
        await send(out)
        return b"".join(sent)

    whole = asyncio.run(run())
    return whole, [len(s) for s in sent]


items_st = st.lists(
    st.sampled_from([b"UID", b"FLAGS", b"INTERNALDATE", b"MODSEQ", b"BODY.PEEK[]"]),
    min_size=1, max_size=5,
).map(lambda items: [b"BODY.PEEK[]", *items])  # fmt: skip
SIZES = [0, 1, 300, DIRECT_AT - 1, DIRECT_AT, 3 * DIRECT_AT]
spec_st = st.lists(st.tuples(st.sampled_from(SIZES), st.booleans(), st.booleans()), max_size=8)


@settings(max_examples=150, deadline=None)
@given(spec_st, items_st, st.sets(st.integers(1, 8)))
def test_the_lines_are_pymaps(spec, items, flagged) -> None:
    selected = CompactSelected(
        ObjectId(b"F1"), False, PermanentFlags([Seen, Flagged, Deleted]), SessionFlags([])
    )
    attrs = [_attr(name) for name in items]
    assert streamable(attrs)
    messages, _ = _messages(spec)
    # another session's flag change, told in the same command: merged into the line
    merged = {
        seq: [FetchValue.of(FetchAttribute(b"FLAGS"), List([Flagged, Flag(b"work")], sort=True))]
        for seq in flagged if seq <= len(messages)
    }  # fmt: skip
    lines = BodiesLines(messages, attrs, selected)
    left = lines.absorb([FetchResponse(seq, values) for seq, values in merged.items()])
    assert left == []
    ours, _ = _ours(lines)
    assert ours == _pymaps(messages, attrs, selected, merged)


def test_large_bodies_are_handed_on_apart_and_the_lines_in_bounded_writes() -> None:
    selected = CompactSelected(ObjectId(b"F1"), False, PermanentFlags([Seen]), SessionFlags([]))
    spec = [(4096, False, False)] * 40 + [(3 * DIRECT_AT, False, False)] + [(4096, False, False)]
    messages, _ = _messages(spec)
    attrs = [BODY, FetchAttribute(b"UID")]
    ours, writes = _ours(BodiesLines(messages, attrs, selected))
    assert ours == _pymaps(messages, attrs, selected, {})
    assert 3 * DIRECT_AT in writes  # the large body as it is, not copied into the buffer
    assert max(writes) < WRITE_AT + 2 * 4096 or max(writes) == 3 * DIRECT_AT


def test_only_whole_bodies_peeked_beside_listing_items_are_streamed() -> None:
    section = FetchAttribute.Section
    assert streamable([BODY, FetchAttribute(b"UID")])
    assert not streamable([FetchAttribute(b"UID"), FetchAttribute(b"FLAGS")])  # fetch_lines'
    assert not streamable([FetchAttribute(b"BODY", section(()))])  # sets \Seen
    assert not streamable([FetchAttribute(b"BODY.PEEK", section((1,)))])
    assert not streamable([FetchAttribute(b"BODY.PEEK", section((), b"HEADER"))])
    assert not streamable([BODY, FetchAttribute(b"RFC822.SIZE")])
    assert not streamable([BODY, FetchAttribute(b"ENVELOPE")])
    assert not streamable([FetchAttribute(b"BINARY.PEEK", section(()))])
