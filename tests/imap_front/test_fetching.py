"""A FETCH's bodies read ahead (`fetching.Bodies`), parsed only when asked (`RawLoaded`),
and its values rendered as pymap renders them (`fetch_values.FrontAttributes`)."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

from pymap.fetch import MessageAttributes
from pymap.flags import PermanentFlags, SessionFlags
from pymap.message import BaseLoadedMessage
from pymap.mime import MessageContent
from pymap.parsing.response.specials import FetchResponse
from pymap.parsing.specials import FetchAttribute, FetchRequirement, ObjectId
from pymap.parsing.specials.flag import Flag

from imap_front.fetch_values import FrontAttributes
from imap_front.fetching import Bodies, RawLoaded, batches
from imap_front.selected import CompactSelected

RAW = (
    b"From: a@example.org\r\nSubject: hi\r\nContent-Type: multipart/mixed; boundary=b\r\n\r\n"
    b"--b\r\nContent-Type: text/plain\r\n\r\none\r\n--b\r\nContent-Type: text/html\r\n\r\n"
    b"<p>two</p>\r\n--b--\r\n"
)


def test_bodies_are_read_a_batch_at_a_time_a_bounded_window_ahead_and_let_go() -> None:
    asked: list[list[str]] = []
    singles: list[str] = []
    in_flight = 0
    most = 0

    async def get_many(items: list[str], max_bytes: int) -> dict[str, bytes | None]:
        nonlocal in_flight, most
        asked.append(list(items))
        in_flight += 1
        most = max(most, in_flight)
        await asyncio.sleep(0)
        in_flight -= 1
        # the node's byte bound: a batch of more than 3 is answered 3 at a time; i5 is gone
        return {i: None if i == "i5" else i.encode() for i in items[:3]}

    async def get(item: str) -> bytes:
        singles.append(item)
        return item.encode()

    async def run() -> list[bytes | None]:
        # sizes of 10 against batches of 40 bytes: four messages a batch
        bodies = Bodies([(f"i{n}", 10) for n in range(20)], get_many, get, batch_bytes=40,
                        ahead=2)  # fmt: skip
        first = await bodies.get("i0")
        # the batch needed and two more asked before needed (each asked again past 3)
        assert [a[0] for a in asked][:3] == ["i0", "i4", "i8"]
        rest = [await bodies.get(f"i{n}") for n in range(1, 20)]
        assert not bodies._pending  # every body handed over is let go
        again = await bodies.get("i3")  # asked again: read again, alone
        return [first, *rest, again]

    got = asyncio.run(run())
    want = [None if n == 5 else f"i{n}".encode() for n in range(20)]
    assert got == [*want, b"i3"]
    assert most <= 3
    assert singles == ["i3"]
    assert sorted(i for a in asked for i in a if a.index(i) < 3) == sorted(
        f"i{n}" for n in range(20)
    )
    assert ["i0", "i1", "i2", "i3"] in asked and ["i3"] in asked  # the rest asked again


def test_batches_are_cut_by_the_listed_sizes_and_a_count() -> None:
    items = [("a", 5), ("b", 100), ("c", 1), ("d", 1), ("e", 1), ("f", 50)]
    assert batches(items, 50, 10) == [["a", "b"], ["c", "d", "e", "f"]]
    assert batches(items, 1000, 4) == [["a", "b", "c", "d"], ["e", "f"]]
    assert batches([], 50, 10) == []


def test_raw_loaded_answers_the_stored_bytes_and_parses_only_for_parts() -> None:
    raw = RawLoaded(None, FetchRequirement.CONTENT, RAW)
    assert bytes(raw.get_body()) == RAW and raw.get_size() == len(RAW)
    assert raw._content is None  # BODY[] and RFC822.SIZE parsed nothing
    parsed = BaseLoadedMessage(None, FetchRequirement.CONTENT, MessageContent.parse(RAW))
    for section in ([1], [2]):
        assert bytes(raw.get_body(section)) == bytes(parsed.get_body(section))
        assert raw.get_size(section) == parsed.get_size(section)
    assert raw.get_header(b"subject") == ["hi"]
    assert bytes(raw.get_body_structure()) == bytes(parsed.get_body_structure())


def test_front_attributes_render_what_pymap_renders() -> None:
    from imap_front.folders import Message

    selected = CompactSelected(
        ObjectId(b"F1"), False, PermanentFlags([]), SessionFlags([]), lookup="INBOX"
    )
    msg = Message(7, datetime(2026, 11, 29, tzinfo=UTC), {Flag(b"\\Seen")}, item_id="x",
                  size=len(RAW), api=None)  # type: ignore[arg-type]  # fmt: skip
    body = FetchAttribute(b"BODY.PEEK", FetchAttribute.Section([]))
    attrs = [FetchAttribute(b"UID"), FetchAttribute(b"FLAGS"), FetchAttribute(b"INTERNALDATE"),
             FetchAttribute(b"RFC822.SIZE"), body]  # fmt: skip

    def rendered(cls: type[MessageAttributes]) -> bytes:
        values = cls(msg, selected, attrs)
        loaded = RawLoaded(msg, FetchRequirement.CONTENT, RAW)
        with values._get_loaded.apply(loaded):
            return bytes(FetchResponse(3, values))

    ours = rendered(FrontAttributes)
    assert ours == rendered(MessageAttributes)
    assert b"UID 7" in ours and b"RFC822.SIZE %d" % len(RAW) in ours and RAW in ours
