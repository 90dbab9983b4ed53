"""The mover's page read (issue 52): a listing's large bodies come as their UTF-8 bytes,
unescaped in place in the answer's own buffer, byte for byte what the node listed (escapes
and characters of two to four bytes wherever a 1 MiB slice ends), written on as the same
JSON; a page holds its large body once, not twice (its bytes, then its text)."""

from __future__ import annotations

import gc
import hashlib
import json
import random
import tracemalloc

import pytest

from dag_common.counted_text import held_utf8, is_bytes_only
from dag_common.items_payload import ItemsPayload
from dag_common.items_query import ItemsQuery
from dag_common.node_client import NodeStoreClient
from tests.mrs_client.test_node_client import broken_node, row  # noqa: F401 (a fixture)

ALPHABET = 'abc\n\r"\\/\té€😀\x01\u2028'
MIB = 1 << 20


def as_bytes(client: NodeStoreClient) -> NodeStoreClient:
    """The fixture's client as the mover makes it (`bodies_as_bytes`)."""
    return NodeStoreClient(client._config, token="t", session=client._session, bodies_as_bytes=True)


@pytest.mark.parametrize("seed", range(4))
async def test_large_bodies_come_as_the_bytes_the_node_listed(broken_node, seed):  # noqa: F811
    state, client = broken_node
    rng = random.Random(seed)
    big = "".join(rng.choices(ALPHABET, k=3 * MIB // 2 + rng.randint(0, 4096)))
    second = "é" * (MIB // 2 + 1) + "😀" * 5  # two- and four-byte characters at slice edges
    rows = [
        row("m1", 1, body="small"),
        row("m2", 2, body=big, format="message"),
        row("m3", 3, body=second),
    ]
    ascii_only = rng.random() < 0.5
    state["listing"] = json.dumps(
        {"items": rows, "last_change_number": 3, "epoch": 2}, ensure_ascii=ascii_only
    ).encode()
    listed = await as_bytes(client).items("DB2", "alice", ItemsQuery(0, 10))
    assert [i.item_id for i in listed.items] == ["m1", "m2", "m3"]
    assert not any(i.unreadable for i in listed.items)
    assert listed.items[0].body == "small"
    for item, text in zip(listed.items[1:], [big, second], strict=True):
        assert is_bytes_only(item.body)
        assert bytes(held_utf8(item.body)) == text.encode()
        assert item.hashed_body() == hashlib.sha256(text.encode()).hexdigest()
        assert item.size == len(text.encode()) + 1  # the subject "s"
    # written on as the same JSON as the page read as text
    as_text = await client.items("DB2", "alice", ItemsQuery(0, 10))
    assert ItemsPayload(list(listed.items)).decode() == ItemsPayload(list(as_text.items)).decode()


async def test_a_large_body_that_is_not_utf8_text_is_read_again_as_text(broken_node):  # noqa: F811
    """A large body with a lone surrogate (the node's standard library may list one): the
    page is asked again and read as text, where that item alone comes back unreadable."""
    state, client = broken_node
    rows = [row("m1", 1, body="x" * (2 * MIB) + "\ud800"), row("m2", 2, body="y" * MIB * 2)]
    state["listing"] = json.dumps({"items": rows, "last_change_number": 2, "epoch": 2}).encode()
    listed = await as_bytes(client).items("DB2", "alice", ItemsQuery(0, 10))
    assert "lone surrogate" in listed.items[0].unreadable
    assert listed.items[1].body == "y" * MIB * 2  # read as text, this time


async def test_a_page_holds_its_large_body_once(broken_node, tmp_path):  # noqa: F811
    """The page's bytes are the body's only copy: unescaped in place, not decoded to text
    beside them (on main: its bytes, the chunks they were joined from, then its text)."""
    state, client = broken_node
    size = 24 * MIB
    page = tmp_path / "page.json"  # served from a file, a slice at a time (no copy here)
    page.write_bytes(
        json.dumps({"items": [row("m1", 1, body="\n" * size)], "last_change_number": 1}).encode()
    )
    mover = as_bytes(client)
    with page.open("rb") as state["listing"]:
        await mover.items("DB2", "alice", ItemsQuery(0, 1))  # the connection made, the server warm
    state["listing"] = page.open("rb")
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        listed = await mover.items("DB2", "alice", ItemsQuery(0, 1))
        peak = tracemalloc.get_traced_memory()[1] - before
    finally:
        tracemalloc.stop()
        state["listing"].close()
    assert listed.items[0].size == size + 1
    # the answer (size x 2 bytes as JSON escapes) unescaped in place: once, and a slice
    assert peak < 1.3 * 2 * size, f"peak {peak / MIB:.0f} MiB for a {size / MIB:.0f} MiB page"
