"""A large message written as its bytes is staged into the log as it arrives
(`replication_node/active/message_staging.py`, issue 52), over real node processes: UTF-8,
non-ASCII UTF-8, 8-bit found after a MiB of ASCII, 8-bit found after non-ASCII UTF-8 was
staged (staged again from the log), and a chunked upload come back byte for byte on the
active and the passive, and as the same items as a JSON write of them; a transfer cut short
and a body that inflates past max_item_size are refused with nothing written, and the next
try of the same item goes through."""

from __future__ import annotations

import asyncio
import gzip
import hashlib
from collections.abc import AsyncIterator

import crc32c
import pytest

from tests.replication_node.e2e import converged, two_nodes
from tests.replication_node.test_message_upload_e2e import RFC822, upload
from tests.replication_node.test_messages_e2e import BOX, MiB, assert_kept, entry

pytestmark = pytest.mark.slow

HEAD = b"From: a@example.org\r\nTo: alice@example.org\r\nSubject: %s\r\n\r\n"


def ascii_message(size: int, tag: bytes) -> bytes:
    line = b"%s " % tag * 10 + b"\r\n"
    return HEAD % tag + line * (size // len(line))


def utf8_message(size: int) -> bytes:
    line = "Grüße, 测试 ✓ — café crème\r\n".encode()
    return HEAD % b"utf8" + line * (size // len(line))


def late_latin_1(size: int, *, utf8_first: bool) -> bytes:
    """A message whose first byte past UTF-8 comes after 2 MiB: after ASCII alone, or after
    non-ASCII UTF-8 (a UTF-8 part, then a Latin-1 one)."""
    first = utf8_message(2 * MiB + 12345) if utf8_first else ascii_message(2 * MiB + 12345, b"a")
    latin = b"Caf\xe9 cr\xe8me br\xfbl\xe9e \xe0 la fran\xe7aise\r\n"
    return first + latin * ((size - len(first)) // len(latin))


@pytest.fixture
async def cluster(tmp_path):
    c = two_nodes(tmp_path, log_file_size="1MiB", max_item_size="8MiB")
    await c.start()
    yield c
    await c.close()


async def test_messages_staged_as_they_arrive_are_kept_byte_for_byte(cluster):
    c = cluster
    await c.ok("PUT", "mbx1", BOX)
    kept = {
        "ascii": ascii_message(6 * MiB, b"ascii"),
        "utf8": utf8_message(3 * MiB),
        "late8": late_latin_1(3 * MiB, utf8_first=False),
        "mixed": late_latin_1(3 * MiB, utf8_first=True),
    }
    for item_id, raw in kept.items():
        status, answer, headers = await upload(c, item_id, raw)
        assert status == 201, (item_id, answer)
        assert headers["X-Message-SHA256"] == hashlib.sha256(raw).hexdigest()
        assert headers["X-Message-CRC32C"] == f"{crc32c.crc32c(raw):08x}"  # the writer's check

    async def chunks() -> AsyncIterator[bytes]:  # no Content-Length: chunked
        raw = kept["ascii"]
        for at in range(0, len(raw), 300_000):
            yield raw[at : at + 300_000]

    status, answer, _ = await upload(c, "chunked", chunks())  # type: ignore[arg-type]
    assert status == 201, answer
    kept["chunked"] = kept["ascii"]
    items = await c.items("mbx1", "DB1", "alice")
    formats = {i: items[i]["format"] for i in kept}
    assert formats == {"ascii": "message", "utf8": "message", "late8": "message-8bit",
                       "mixed": "message-8bit", "chunked": "message"}  # fmt: skip
    assert items["ascii"]["subject"] == "ascii"
    assert items["mixed"]["size"] == len(kept["mixed"]) + sum(b > 0x7F for b in kept["mixed"])
    for item_id, raw in kept.items():
        await assert_kept(c, "mbx1", item_id, raw)
    await converged(c, "DB1", "mbx1", ["mbx2"])
    for item_id, raw in kept.items():
        await assert_kept(c, "mbx2", item_id, raw)
    digest = await c.ok("GET", "mbx1", f"{BOX}/digest")
    assert (await c.ok("GET", "mbx2", f"{BOX}/digest"))["digest"] == digest["digest"]
    # the same messages written as JSON: the same items, the same digest
    for item_id, raw in kept.items():
        await c.ok("POST", "mbx1", f"{BOX}/items", json=entry(item_id, raw))
    assert (await c.ok("GET", "mbx1", f"{BOX}/digest"))["digest"] == digest["digest"]


async def test_a_cut_transfer_or_a_body_past_max_item_size_writes_nothing(cluster):
    c = cluster
    await c.ok("PUT", "mbx1", BOX)
    before = await c.ok("GET", "mbx1", f"{BOX}/digest")
    raw = ascii_message(4 * MiB, b"cut")

    # Cut short: 4 MiB announced, 2 MiB sent (two parts staged), then the connection closed.
    reader, writer = await asyncio.open_connection("127.0.0.1", c.ports["mbx1"])
    writer.write(
        f"PUT {BOX}/items/cut/message HTTP/1.1\r\nHost: mbx1\r\nAuthorization: Bearer "
        f"{c.env()['DG_AUTH_TOKEN']}\r\nContent-Type: message/rfc822\r\n"
        f"Content-Length: {len(raw)}\r\n\r\n".encode()
        + raw[: 2 * MiB + 5000]
    )
    await writer.drain()
    writer.close()
    await writer.wait_closed()
    del reader

    # Longer than its Content-Length says: a gzip body of a few KiB that inflates past the
    # max_item_size (8 MiB), refused by the count as it is read.
    huge = ascii_message(9 * MiB, b"huge")
    headers = {**RFC822, "Content-Encoding": "gzip"}
    status, answer, _ = await upload(c, "huge", gzip.compress(huge), headers)
    assert status == 413, answer
    assert answer["max_item_size"] == 8 * MiB and "nothing written" in answer["error"]

    assert await c.items("mbx1", "DB1", "alice") == {}
    assert await c.ok("GET", "mbx1", f"{BOX}/digest") == before
    # The next try of the cut one goes through whole; the refused bodies left nothing that a
    # copy replays.
    status, answer, _ = await upload(c, "cut", raw)
    assert status == 201, answer
    assert sorted(await c.items("mbx1", "DB1", "alice")) == ["cut"]
    await converged(c, "DB1", "mbx1", ["mbx2"])
    await assert_kept(c, "mbx2", "cut", raw)
    assert await c.items("mbx2", "DB1", "alice") == await c.items("mbx1", "DB1", "alice")
