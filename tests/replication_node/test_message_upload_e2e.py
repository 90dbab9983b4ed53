"""A message written as its bytes (`PUT …/items/{id}/message`, issues 49 and 52) over real
node processes: UTF-8 and 8-bit messages, small and staged across 1 MiB generations, come
back byte for byte from `GET …/message` on the active and, replayed, on the passive, with the
SHA-256 the write answered; the same item written as JSON is the same item (same listing,
same digest); a second upload of the same id replaces it; bad input (a wrong content type, a
message over max_item_size, bytes that are no message, an id or folder a node refuses) is
refused with nothing written."""

from __future__ import annotations

import hashlib

import aiohttp
import crc32c
import pytest

from tests.cluster_harness import LocalCluster
from tests.replication_node.e2e import converged, two_nodes
from tests.replication_node.test_messages_e2e import (
    BOX,
    LATIN_1,
    MIME,
    MiB,
    assert_kept,
    entry,
    mime_message,
)

pytestmark = pytest.mark.slow

RFC822 = {"Content-Type": "message/rfc822"}
LONG = aiohttp.ClientTimeout(total=300)


@pytest.fixture
async def cluster(tmp_path):
    c = two_nodes(tmp_path, log_file_size="1MiB", max_item_size="4MiB")
    await c.start()
    yield c
    await c.close()


async def upload(
    c: LocalCluster, item_id: str, raw: bytes, headers: dict[str, str] = RFC822, **query: str
) -> tuple[int, object, dict[str, str]]:
    assert c.session is not None
    url = f"{c.url('mbx1')}{BOX}/items/{item_id}/message"
    async with c.session.put(url, data=raw, headers=headers, params=query, timeout=LONG) as r:
        return r.status, await r.json(), dict(r.headers)


def eight_bit(size: int) -> bytes:
    """An 8-bit (Latin-1) message of about `size` bytes: not UTF-8, every line with bytes past
    0x7f (each two in UTF-8, so the log holds more than the message)."""
    line = b"Caf\xe9 cr\xe8me br\xfbl\xe9e, \xe0 la fran\xe7aise " * 2 + b"\r\n"
    return LATIN_1 + line * (size // len(line))


async def test_uploaded_messages_come_back_byte_for_byte_on_both_copies(cluster):
    c = cluster
    await c.ok("PUT", "mbx1", BOX)
    big = mime_message(bytes(n % 251 for n in range(2 * MiB)), "<big@example.org>")
    kept = {"mime": MIME, "latin": LATIN_1, "big": big, "big8": eight_bit(3 * MiB // 2)}
    for item_id, raw in kept.items():
        status, answer, headers = await upload(c, item_id, raw, flags="\\Seen $Junk")
        assert status == 201, (item_id, answer)
        assert headers["X-Message-SHA256"] == hashlib.sha256(raw).hexdigest()
        assert headers["X-Message-CRC32C"] == f"{crc32c.crc32c(raw):08x}"  # the writer's check
        assert answer["item_id"] == item_id
    for item_id, raw in kept.items():
        await assert_kept(c, "mbx1", item_id, raw)
    items = await c.items("mbx1", "DB1", "alice")
    assert (items["big"]["format"], items["big8"]["format"]) == ("message", "message-8bit")
    assert items["latin"]["subject"] == "Caf\ufffd au lait"  # as the JSON write derives it
    assert items["big8"]["size"] == len(kept["big8"]) + sum(b > 0x7F for b in kept["big8"])
    assert items["mime"]["flags"] == ["$Junk", "\\Seen"]

    await converged(c, "DB1", "mbx1", ["mbx2"])
    for item_id, raw in kept.items():
        await assert_kept(c, "mbx2", item_id, raw)
    assert await c.items("mbx2", "DB1", "alice") == await c.items("mbx1", "DB1", "alice")
    # the digest the active counted from the upload's hashes is the passive's, hashed from
    # the bodies it replayed
    digest = await c.ok("GET", "mbx1", f"{BOX}/digest")
    assert (await c.ok("GET", "mbx2", f"{BOX}/digest"))["digest"] == digest["digest"]

    # the same messages written as JSON: the same items, the same digest
    for item_id, raw in kept.items():
        flags = ["\\Seen", "$Junk"]
        await c.ok("POST", "mbx1", f"{BOX}/items", json=entry(item_id, raw, flags=flags),
                   timeout=LONG)  # fmt: skip
    assert (await c.ok("GET", "mbx1", f"{BOX}/digest"))["digest"] == digest["digest"]
    # and uploaded again: replaced, nothing added
    status, _, _ = await upload(c, "big8", kept["big8"], flags="\\Seen $Junk")
    assert status == 201
    again = await c.ok("GET", "mbx1", f"{BOX}/digest")
    assert (again["digest"], again["item_count"]) == (digest["digest"], digest["item_count"])
    await converged(c, "DB1", "mbx1", ["mbx2"])
    for item_id, raw in kept.items():
        await assert_kept(c, "mbx2", item_id, raw)


async def test_bad_uploads_are_refused_with_nothing_written(cluster):
    c = cluster
    await c.ok("PUT", "mbx1", BOX)
    before = await c.ok("GET", "mbx1", f"{BOX}/digest")
    too_big = mime_message(bytes(4 * MiB), "<huge@example.org>")
    refused = [
        ("m1", MIME, {"Content-Type": "application/octet-stream"}, {}, 400),
        ("m2", MIME, {"Content-Type": "application/json"}, {}, 400),
        ("m3", too_big, RFC822, {}, 413),
        ("m4", b"\x89PNG\r\n\x1a\n" + bytes(500), RFC822, {}, 400),  # no message
        ("m5", b"", RFC822, {}, 400),
        ("m6", b"just a line of text\r\n\r\nand a body\r\n", RFC822, {}, 400),
        ("x" * 65, MIME, RFC822, {}, 400),  # an id no node gives
        ("bad.id", MIME, RFC822, {}, 400),
        ("m7", MIME, RFC822, {"folder": "Nowhere"}, 404),
        ("m8", MIME, RFC822, {"flags": "\\Recent"}, 400),
        ("m9", MIME, RFC822, {"received": "yesterday"}, 400),
    ]
    for item_id, raw, headers, query, code in refused:
        status, answer, _ = await upload(c, item_id, raw, headers, **query)
        assert status == code, (item_id, answer)
        assert "error" in answer, answer
    assert await c.items("mbx1", "DB1", "alice") == {}
    assert await c.ok("GET", "mbx1", f"{BOX}/digest") == before
    # a mailbox locked by a move refuses it too (409), and the mover may write it
    await c.ok("POST", "mbx1", f"{BOX}/lock")
    status, _, _ = await upload(c, "m1", MIME)
    assert status == 409
    assert await c.items("mbx1", "DB1", "alice") == {}
