"""A staged body's text is encoded a part at a time by the writer (`replication_node/log/
body.py`): the parts are its UTF-8 bytes exactly, whatever the characters and wherever a
part ends, and the write holds no whole encoded copy of it beside the text."""

from __future__ import annotations

import random
import tracemalloc

import crc32c
import pytest

from dag_common.store_api import ItemIn
from replication_node.active.mailbox_store import MailboxStore
from replication_node.log.body import BodyReader
from tests.replication_node.helpers import body_of, mount, text_body

MIB = 1 << 20
# One to four bytes a character in UTF-8, mixed.
ALPHABET = "aé€𝄞"


def mixed_text(n: int, seed: int) -> str:
    rng = random.Random(seed)
    return "".join(rng.choice(ALPHABET) for _ in range(n))


@pytest.mark.parametrize(
    "body",
    [
        text_body(100_000),
        mixed_text(100_000, seed=1),
        "é" * 70_000 + "x",  # every part boundary splits a character (or not) by parity
        mixed_text(100_000, seed=2).encode(),
    ],
    ids=["ascii", "mixed", "two-byte", "bytes"],
)
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_reads_of_any_size_give_the_bodys_utf8_bytes_in_order(body, seed):
    want = body.encode() if isinstance(body, str) else body
    reader = BodyReader(body)
    assert reader.size == len(want)
    rng = random.Random(seed)
    got = []
    while sum(map(len, got)) < reader.size:
        got.append(bytes(reader.read(rng.choice([1, 3, 1000, 65_537, 300_000]))))
    assert b"".join(got) == want
    assert len(reader.read(10)) == 0


def test_a_size_given_with_bytes_or_an_ascii_text_must_be_theirs():
    with pytest.raises(ValueError, match="a body of 3 bytes said to be of 4"):
        BodyReader(b"abc", 4)
    with pytest.raises(ValueError, match="a text of 3 bytes said to be of 2"):
        BodyReader("abc", 2)
    assert BodyReader("é", 2).size == 2


async def test_a_text_not_ascii_spanning_generations_commits_its_utf8_bytes(tmp_path):
    copy = await mount(tmp_path, log_file_size=32 * 1024)
    store = MailboxStore(copy)
    await store.create_mailbox("m")
    text = mixed_text(120_000, seed=5)  # about 300 KB: ten generations
    ref = await copy.stage(BodyReader(text))
    data = text.encode()
    assert (ref.size, ref.crc) == (len(data), crc32c.crc32c(data))
    await copy.abort_staged([ref])
    await store.put_items("m", [ItemIn(item_id="big", body=text)])
    assert body_of(copy, "m", "big") == text
    await copy.dismount()


async def test_writing_an_8_mib_item_holds_less_than_one_and_a_half_more_copies_of_it(tmp_path):
    """Beside the text the request brought: the blocks held for the copies until the span
    settles, and a part or two in the making (1.25 times the item measured).  Encoding the
    text whole before staging it held twice the item (2.01 measured)."""
    copy = await mount(tmp_path, log_file_size=MIB)
    store = MailboxStore(copy)
    await store.create_mailbox("m")
    size = 8 * MIB
    text = text_body(size, seed=8)
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        await store.put_items("m", [ItemIn(item_id="big", body=text)])
        peak = (tracemalloc.get_traced_memory()[1] - base) / size
    finally:
        tracemalloc.stop()
    assert peak < 1.5, f"the write held {peak:.2f} times the item"
    assert body_of(copy, "m", "big") == text
    await copy.dismount()
