"""Messages kept as they came (issue 49) over real node processes: a MIME message (multipart,
a base64 attachment, CRLF line ends, an RFC 2047 subject, an SMTPUTF8 header), an 8-bit
message that is not UTF-8 (Latin-1) and a message larger than a log file (3 MiB across
1 MiB generations) are written through the node API, and `GET …/items/{id}/message` gives
back the same bytes, the same SHA-256, on the active and, replayed, on the passive.  The
subject is the message's; a contradicting subject and an unknown format are refused with
nothing stored; a text item is listed and digested as before and presented as text/plain
mail."""

from __future__ import annotations

import base64
import email
import email.policy
import hashlib

import aiohttp
import pytest

from dag_common.rfc822 import body_of_message
from tests.cluster_harness import LocalCluster
from tests.replication_node.e2e import converged, two_nodes

pytestmark = pytest.mark.slow

MiB = 1024 * 1024
BOX = "/v1/databases/DB1/mailboxes/alice"


def mime_message(attachment: bytes, message_id: str = "<1@bücher.example>") -> bytes:
    """A real MIME message as an SMTPUTF8 client sends it: CRLF line ends, a UTF-8 From
    header, an RFC 2047 subject, a text part and a base64 attachment."""
    subject = "=?utf-8?b?" + base64.b64encode("Grüße — 测试".encode()).decode() + "?="
    lines = base64.encodebytes(attachment).decode().replace("\n", "\r\n")
    return (
        "Return-Path: <jörg@bücher.example>\r\n"
        "From: Jörg Müller <jörg@bücher.example>\r\n"
        "To: alice@example.org\r\n"
        f"Subject: {subject}\r\n"
        f"Message-ID: {message_id}\r\n"
        "Date: Mon, 30 Nov 2026 10:00:00 +0100\r\n"
        "MIME-Version: 1.0\r\n"
        'Content-Type: multipart/mixed; boundary="=_b1"\r\n'
        "\r\n"
        "This is a multi-part message in MIME format.\r\n"
        "--=_b1\r\n"
        "Content-Type: text/plain; charset=utf-8\r\n"
        "Content-Transfer-Encoding: 8bit\r\n"
        "\r\n"
        "Hallo Alice, schöne Grüße aus Köln.\r\n"
        "--=_b1\r\n"
        'Content-Type: application/octet-stream; name="daten.bin"\r\n'
        "Content-Transfer-Encoding: base64\r\n"
        'Content-Disposition: attachment; filename="daten.bin"\r\n'
        "\r\n"
        f"{lines}"
        "--=_b1--\r\n"
    ).encode()


ATTACHMENT = bytes(range(256)) * 64
MIME = mime_message(ATTACHMENT)
LATIN_1 = (
    b"From: Ren\xe9 <rene@example.fr>\r\n"
    b"To: alice@example.org\r\n"
    b"Subject: Caf\xe9 au lait\r\n"
    b"Content-Type: text/plain; charset=iso-8859-1\r\n"
    b"Content-Transfer-Encoding: 8bit\r\n"
    b"\r\n"
    b"Un caf\xe9 cr\xe8me, s'il vous pla\xeet.\r\n"
)


def entry(item_id: str, raw: bytes, **more: object) -> dict[str, object]:
    body, fmt = body_of_message(raw)
    return {"item_id": item_id, "body": body, "format": fmt.value, **more}


async def message(c: LocalCluster, node: str, item_id: str) -> tuple[int, bytes, dict[str, str]]:
    """GET …/items/{item_id}/message on `node`: status, bytes, headers."""
    assert c.session is not None
    url = f"{c.url(node)}{BOX}/items/{item_id}/message"
    async with c.session.get(url, timeout=aiohttp.ClientTimeout(total=120)) as resp:
        return resp.status, await resp.read(), dict(resp.headers)


async def assert_kept(c: LocalCluster, node: str, item_id: str, raw: bytes) -> None:
    status, got, headers = await message(c, node, item_id)
    assert status == 200, (node, item_id, got[:300])
    assert headers["Content-Type"] == "message/rfc822"
    assert got == raw, (node, item_id)
    assert headers["X-Message-SHA256"] == hashlib.sha256(raw).hexdigest()


@pytest.fixture
async def cluster(tmp_path):
    c = two_nodes(tmp_path, log_file_size="1MiB")
    await c.start()
    yield c
    await c.close()


async def test_messages_come_back_byte_for_byte_on_the_active_and_the_passive(cluster):
    c = cluster
    await c.ok("PUT", "mbx1", BOX)
    big = mime_message(bytes(n % 251 for n in range(2 * MiB + 300_000)), "<big@example.org>")
    assert len(big) > 3 * MiB  # past three 1 MiB generations: staged across them
    two = {"items": [entry("mime", MIME), entry("latin", LATIN_1)]}
    await c.ok("POST", "mbx1", f"{BOX}/items", json=two)
    long = aiohttp.ClientTimeout(total=300)
    await c.ok("POST", "mbx1", f"{BOX}/items", json=entry("big", big), timeout=long)
    text = {"item_id": "text", "subject": "Hi", "body": "plain text\n"}
    await c.ok("POST", "mbx1", f"{BOX}/items", json=text)
    kept = {"mime": MIME, "latin": LATIN_1, "big": big}
    for item_id, raw in kept.items():
        await assert_kept(c, "mbx1", item_id, raw)  # from the LLR overlay, or the file

    # what the bytes are: the attachment and the text part read back by a MIME parser
    parsed = email.message_from_bytes(MIME, policy=email.policy.default)
    parts = list(parsed.iter_attachments())
    assert [p.get_content() for p in parts] == [ATTACHMENT]

    items = await c.items("mbx1", "DB1", "alice")
    assert items["mime"]["subject"] == "Grüße — 测试"
    assert items["latin"]["subject"] == "Caf\ufffd au lait"  # an 8-bit header, as it reads
    assert (items["mime"]["format"], items["latin"]["format"]) == ("message", "message-8bit")
    assert "format" not in items["text"]  # a text item is listed as it always was
    assert items["latin"]["size"] == len(LATIN_1) + sum(b > 0x7F for b in LATIN_1)

    await converged(c, "DB1", "mbx1", ["mbx2"])
    for item_id, raw in kept.items():
        await assert_kept(c, "mbx2", item_id, raw)
        await assert_kept(c, "mbx1", item_id, raw)  # from the file by now, if not before
    assert await c.items("mbx2", "DB1", "alice") == await c.items("mbx1", "DB1", "alice")

    # a text item as mail: text/plain with its subject, on either copy
    for node in ("mbx1", "mbx2"):
        status, got, headers = await message(c, node, "text")
        assert status == 200 and headers["Content-Type"] == "message/rfc822"
        mail = email.message_from_bytes(got, policy=email.policy.default)
        assert mail["Subject"] == "Hi" and mail.get_content_type() == "text/plain"
        assert mail.get_content() == "plain text\r\n"  # as mail goes: CRLF
        assert headers["X-Message-SHA256"] == hashlib.sha256(got).hexdigest()

    # no such item, a deleted one, no such mailbox: 404
    await c.ok("DELETE", "mbx1", f"{BOX}/items/latin")
    for item_id in ("nope", "latin"):
        assert (await message(c, "mbx1", item_id))[0] == 404
    await converged(c, "DB1", "mbx1", ["mbx2"])
    assert (await message(c, "mbx2", "latin"))[0] == 404
    status, _ = await c.call("GET", "mbx1", "/v1/databases/DB1/mailboxes/bob/items/x/message")
    assert status == 404


async def test_a_subject_the_message_contradicts_or_an_unknown_format_is_refused(cluster):
    c = cluster
    await c.ok("PUT", "mbx1", BOX)
    before = await c.ok("GET", "mbx1", f"{BOX}/digest")
    refused = [
        entry("m1", MIME, subject="Something else"),
        {"item_id": "m2", "body": "Subject: x\r\n\r\ny\r\n", "format": "mbox"},
        {"item_id": "m3", "body": "Subject: x\r\n\r\n\u20ac\r\n", "format": "message-8bit"},
    ]
    for item in refused:
        status, answer = await c.call("POST", "mbx1", f"{BOX}/items", json=item)
        assert status == 400, (item["item_id"], answer)
        status, answer = await c.call(
            "POST", "mbx1", f"{BOX}/items", json={"items": [entry("ok", LATIN_1), item]}
        )
        assert status == 400, (item["item_id"], answer)
    status, answer = await c.call("POST", "mbx1", f"{BOX}/items", json=refused[0])
    assert "not the message's" in answer["error"], answer
    assert await c.items("mbx1", "DB1", "alice") == {}  # nothing stored, not even "ok"
    assert await c.ok("GET", "mbx1", f"{BOX}/digest") == before

    # the subject the message has, given: taken; none given: derived
    await c.ok("POST", "mbx1", f"{BOX}/items", json=entry("m1", MIME, subject="Grüße — 测试"))
    await c.ok("POST", "mbx1", f"{BOX}/items", json=entry("m2", MIME))
    items = await c.items("mbx1", "DB1", "alice")
    assert items["m1"]["subject"] == items["m2"]["subject"] == "Grüße — 测试"

    # the same body and subject as a text item: another item, another digest
    with_message = await c.ok("GET", "mbx1", f"{BOX}/digest")
    text = {"item_id": "m2", "subject": "Grüße — 测试", "body": MIME.decode()}
    await c.ok("POST", "mbx1", f"{BOX}/items", json=text)
    with_text = await c.ok("GET", "mbx1", f"{BOX}/digest")
    assert with_text["digest"] != with_message["digest"]
    await c.ok("POST", "mbx1", f"{BOX}/items", json=entry("m2", MIME))
    assert (await c.ok("GET", "mbx1", f"{BOX}/digest"))["digest"] == with_message["digest"]
