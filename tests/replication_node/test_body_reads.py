"""A body kept apart in `bodies` read a part at a time (`storage/body_reads.py`, issue 52): the
bytes written, whatever falls on a part's edge, and never two versions of a row mixed.  In
process, over real SQLite files."""

from __future__ import annotations

import hashlib
import json
import tracemalloc
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web

from dag_common.rfc822 import BodyFormat
from dag_common.store_api import ItemsAnswer
from replication_node.errors import BodyChanged
from replication_node.http.items_stream import Listing, stream_items
from replication_node.log import operations as ops
from replication_node.storage import body_reads
from replication_node.storage.body_reads import (
    blob_head,
    message_parts,
    parts,
    parts_apart,
    text_parts,
)
from tests.replication_node.test_body_in_place import apply, fresh, from_log

MIB = 1 << 20
# 3 MB of UTF-8 of 1 to 4 bytes a character, an emoji across each 1 MiB edge.
TEXT = "abcde" + "caf\xe9 \u20ac \U0001f600 " * 200_000


def split(data: bytes, size: int) -> list[bytes]:
    return [data[i : i + size] for i in range(0, len(data), size)]


@pytest.mark.parametrize("size", [1, 2, 3, 5, 7, 4096])
def test_text_and_8bit_messages_come_whole_across_every_edge(size: int) -> None:
    text = TEXT[:3000]
    assert "".join(text_parts(split(text.encode(), size))) == text
    raw = bytes(range(256)) * 8  # an 8-bit message, kept as its Latin-1 text
    utf8 = raw.decode("latin-1").encode()
    assert b"".join(message_parts(split(utf8, size), BodyFormat.MESSAGE_8BIT)) == raw
    assert b"".join(message_parts(split(utf8, size), BodyFormat.MESSAGE)) == utf8
    with pytest.raises(ValueError):
        list(message_parts([utf8], BodyFormat.TEXT))


def test_a_body_in_its_blob_reads_back_exactly_and_one_in_body_is_not_read_so(
    tmp_path: Path,
) -> None:
    db = fresh(tmp_path / "db.sqlite")
    big = ops.PutItem("m", 2, "big", "Inbox", "s", from_log(TEXT))
    apply(db, 1, ops.CreateMailbox("m", 1), big, ops.PutItem("m", 3, "small", "Inbox", "t", "x"))
    with db.reading_apart() as conn:
        head = blob_head(conn, "m", "big")
        assert head is not None and head.size == len(TEXT.encode()) > 2 * MIB
        assert head.body_hash == hashlib.sha256(TEXT.encode()).hexdigest()
        assert blob_head(conn, "m", "small") is None  # in `body`: read whole, as before
        assert blob_head(conn, "m", "nope") is None
        assert TEXT.encode()[MIB - 1 : MIB + 3] == "\U0001f600".encode()  # across the edge
        assert b"".join(parts(conn, head)) == TEXT.encode()
    assert "".join(text_parts(parts_apart(db, head))) == TEXT
    db.close()


@pytest.mark.parametrize("change", ["put again", "put the same size", "expunge"])
def test_a_row_replaced_between_two_parts_is_never_mixed_into_the_read(
    tmp_path: Path, change: str
) -> None:
    db = fresh(tmp_path / "db.sqlite")
    apply(
        db, 1, ops.CreateMailbox("m", 1), ops.PutItem("m", 2, "big", "Inbox", "s", from_log(TEXT))
    )
    with db.reading_apart() as conn:
        head = blob_head(conn, "m", "big")
    assert head is not None
    other = TEXT.replace("caf", "tea")  # the same size, other bytes
    replaced = {
        "put again": ops.PutItem("m", 3, "big", "Inbox", "s", from_log(TEXT + "more")),
        "put the same size": ops.PutItem("m", 3, "big", "Inbox", "s", from_log(other)),
        "expunge": ops.DeleteItem("m", 3, "big", 2),
    }[change]
    read = parts_apart(db, head)  # each part in a read transaction of its own
    first = next(read)
    assert first == TEXT.encode()[: body_reads.PART]
    apply(db, 2, replaced)
    with pytest.raises(BodyChanged):
        next(read)
    db.close()


def test_a_read_inside_one_transaction_sees_its_snapshot_whatever_is_written_meanwhile(
    tmp_path: Path,
) -> None:
    db = fresh(tmp_path / "db.sqlite")
    apply(
        db, 1, ops.CreateMailbox("m", 1), ops.PutItem("m", 2, "big", "Inbox", "s", from_log(TEXT))
    )
    with db.reading_apart() as conn:
        head = blob_head(conn, "m", "big")
        assert head is not None
        read = parts(conn, head)
        got = [next(read)]
        apply(db, 2, ops.PutItem("m", 3, "big", "Inbox", "s", from_log(TEXT.replace("caf", "tea"))))
        got.extend(read)
    assert b"".join(got) == TEXT.encode()
    db.close()


async def test_the_listing_writes_a_body_in_its_blob_a_part_at_a_time(tmp_path: Path) -> None:
    # Python's own allocations traced (SQLite's are not, and are fewer now too): before,
    # each row's body was read whole as its text (2 bytes a character here), beside its
    # JSON slices; now a part, its text and its slice.
    db = fresh(tmp_path / "db.sqlite")
    bodies = {f"i{i}": "\u20ac" * (4 * MIB) + f" {i}" for i in range(3)}  # 12 MiB of UTF-8
    puts = [
        ops.PutItem("m", i + 2, k, "Inbox", "s", from_log(b))
        for i, (k, b) in enumerate(bodies.items())
    ]
    apply(db, 1, ops.CreateMailbox("m", 1), *puts, ops.PutItem("m", 9, "small", "Inbox", "t", "x"))
    bodies["small"] = "x"

    async def listing(request: web.Request) -> web.StreamResponse:
        def answer(page) -> ItemsAnswer:  # type: ignore[no-untyped-def]
            return ItemsAnswer(mailbox="m", items=[], last_change_number=page.through)

        return await stream_items(request, Listing(db, "m", 0, None, None, answer))

    app = web.Application()
    app.router.add_get("/items", listing)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        async with aiohttp.ClientSession() as session:
            tracemalloc.start()
            try:
                async with session.get(f"http://127.0.0.1:{port}/items") as resp:
                    assert resp.status == 200
                    digest, received = hashlib.sha256(), 0
                    async for chunk in resp.content.iter_chunked(64 * 1024):
                        digest.update(chunk)
                        received += len(chunk)
                _, peak = tracemalloc.get_traced_memory()
            finally:
                tracemalloc.stop()
        assert peak < 0.75 * len(bodies["i0"].encode()), peak / len(bodies["i0"].encode())
        async with (
            aiohttp.ClientSession() as session,
            session.get(f"http://127.0.0.1:{port}/items") as resp,
        ):
            got = await resp.read()
        assert hashlib.sha256(got).digest() == digest.digest() and len(got) == received
        listed = {i["item_id"]: i["body"] for i in json.loads(got)["items"]}
        assert {k: hashlib.sha256(v.encode()).hexdigest() for k, v in listed.items()} == {
            k: hashlib.sha256(v.encode()).hexdigest() for k, v in bodies.items()
        }
    finally:
        await runner.cleanup()
        db.close()
