"""Many messages in one answer (`POST …/items/messages`, issue 50) over real node processes:
the bytes of each message exactly as written (the same SHA-256 as `GET …/message`'s), in the
order asked, from the LLR overlay and from the file, on the active and on the passive; a
missing or deleted item answered missing; the answer cut after the message reaching
`max_bytes` (a message larger than a read part whole); bad requests answered 400 with
nothing done; no such mailbox 404."""

from __future__ import annotations

import hashlib

import aiohttp
import pytest

from dag_common.message_batch import CONTENT_TYPE, MAX_IDS, parse_answer
from tests.cluster_harness import LocalCluster
from tests.replication_node.e2e import converged, two_nodes
from tests.replication_node.test_messages_e2e import BOX, LATIN_1, MIME, entry, mime_message

pytestmark = pytest.mark.slow

MiB = 1024 * 1024


async def batch(c: LocalCluster, node: str, body: object) -> tuple[int, bytes, str]:
    """POST …/items/messages on `node`: status, bytes, content type."""
    assert c.session is not None
    url = f"{c.url(node)}{BOX}/items/messages"
    async with c.session.post(url, json=body, timeout=aiohttp.ClientTimeout(total=120)) as resp:
        return resp.status, await resp.read(), resp.headers.get("Content-Type", "")


async def messages(c: LocalCluster, node: str, ids: list[str], **more: object) -> dict:
    status, data, kind = await batch(c, node, {"item_ids": ids, **more})
    assert status == 200, data[:300]
    assert kind == CONTENT_TYPE
    return parse_answer(data)


@pytest.fixture
async def cluster(tmp_path):
    c = two_nodes(tmp_path, log_file_size="1MiB")
    await c.start()
    yield c
    await c.close()


def sha(raw: bytes | None) -> str | None:
    return None if raw is None else hashlib.sha256(raw).hexdigest()


async def test_many_messages_come_back_exactly_in_the_order_asked(cluster):
    c = cluster
    await c.ok("PUT", "mbx1", BOX)
    big = mime_message(bytes(n % 251 for n in range(MiB + 300_000)), "<big@example.org>")
    assert len(big) > 1.5 * MiB  # larger than a part the node reads at a time
    small = {
        f"m{i}": mime_message(bytes([i]) * (4000 + i), f"<m{i}@example.org>") for i in range(40)
    }
    kept = {"mime": MIME, "latin": LATIN_1, **small}
    await c.ok(
        "POST", "mbx1", f"{BOX}/items", json={"items": [entry(k, v) for k, v in kept.items()]}
    )
    await c.ok("POST", "mbx1", f"{BOX}/items", json=entry("big", big),
               timeout=aiohttp.ClientTimeout(total=300))  # fmt: skip
    kept["big"] = big
    await c.ok(
        "POST", "mbx1", f"{BOX}/items", json={"item_id": "text", "subject": "Hi", "body": "x\n"}
    )
    await c.ok("POST", "mbx1", f"{BOX}/items", json=entry("gone", LATIN_1))
    await c.ok("DELETE", "mbx1", f"{BOX}/items/gone")
    status, text_message = await c.call("GET", "mbx1", f"{BOX}/items/text/message")
    assert status == 200

    ids = ["latin", "nope", *small, "big", "gone", "mime", "text"]
    want = {**kept, "text": text_message, "nope": None, "gone": None}
    for node in ("mbx1",):  # the overlay's rows (the log not rolled yet)
        got = await messages(c, node, ids)
        assert list(got) == ids
        assert {k: sha(v) for k, v in got.items()} == {k: sha(want[k]) for k in ids}

    await converged(c, "DB1", "mbx1", ["mbx2"])  # in the file by now, and on the passive
    for node in ("mbx1", "mbx2"):
        got = await messages(c, node, ids)
        assert list(got) == ids and all(got[k] == want[k] for k in ids), node

    # cut after the message that reaches max_bytes; a message over it comes whole
    got = await messages(c, "mbx1", ["m0", "m1", "m2", "m3"], max_bytes=len(small["m0"]) + 1)
    assert got == {"m0": small["m0"], "m1": small["m1"]}
    got = await messages(c, "mbx1", ["big", "m0"], max_bytes=1)
    assert got == {"big": big}


async def test_a_bad_request_is_refused_with_nothing_done(cluster):
    c = cluster
    await c.ok("PUT", "mbx1", BOX)
    await c.ok("POST", "mbx1", f"{BOX}/items", json=entry("m", MIME))
    before = await c.ok("GET", "mbx1", f"{BOX}/digest")
    bad = [
        {},
        {"item_ids": []},
        {"item_ids": "m"},
        {"item_ids": ["m", "not/an id"]},
        {"item_ids": ["m", 7]},
        {"item_ids": ["m"] * (MAX_IDS + 1)},
        {"item_ids": ["m"], "max_bytes": 0},
        {"item_ids": ["m"], "max_bytes": "10"},
        {"item_ids": ["m"], "max_bytes": 16 * MiB + 1},
        {"item_ids": ["m"], "folder": "Inbox"},
        ["m"],
    ]
    for body in bad:
        status, data, _ = await batch(c, "mbx1", body)
        assert status == 400, (body, status, data[:200])
        assert b"error" in data
    assert c.session is not None
    url = f"{c.url('mbx1')}{BOX}/items/messages"
    async with c.session.post(url, data=b"{not json") as resp:
        assert resp.status == 400
    assert await c.ok("GET", "mbx1", f"{BOX}/digest") == before
    assert (await messages(c, "mbx1", ["m"])) == {"m": MIME}
    status, _ = await c.call("POST", "mbx1", "/v1/databases/DB1/mailboxes/bob/items/messages",
                             json={"item_ids": ["m"]})  # fmt: skip
    assert status == 404
