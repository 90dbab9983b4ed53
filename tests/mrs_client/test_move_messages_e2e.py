"""End to end, over real node processes and the real guarantee API: a mailbox of messages
kept as they came (issue 49) moved to another database.  The initial copy carries a MIME
message, an 8-bit Latin-1 message and one larger than a log file; the incremental sync
carries a message written during the move and an item whose only change is its format
(the same body and subject, text become message): on the target's active and its passive
copy, `GET …/message` gives back the source's bytes, the same SHA-256, each item's format
as the source's."""

from __future__ import annotations

import asyncio
import hashlib

import aiohttp
import pytest

from dag_common.rfc822 import body_of_message
from tests.cluster_harness import THREE_NODES, LocalCluster
from tests.mrs_client.e2e import active_of, mover_in_process, outcome, shorten_guarantee_waits
from tests.mrs_client.test_move_e2e import databases
from tests.replication_node.e2e import converged
from tests.replication_node.test_messages_e2e import LATIN_1, MIME, mime_message

pytestmark = pytest.mark.slow

MiB = 1024 * 1024
SOURCE = "/v1/databases/DB1/mailboxes/alice"
TARGET = "/v1/databases/DB2/mailboxes/alice"


@pytest.fixture
async def cluster(tmp_path):
    c = LocalCluster(
        tmp_path,
        nodes=THREE_NODES,
        databases=databases(),
        defaults={"failover_after": None, "log_file_size": "1MiB"},
    )
    shorten_guarantee_waits(c)
    await c.start()
    api = await c.start_guarantee_api()
    yield c
    api.terminate()
    api.wait(timeout=20)
    await c.close()


def entry(item_id: str, raw: bytes) -> dict[str, object]:
    body, fmt = body_of_message(raw)
    return {"item_id": item_id, "body": body, "format": fmt.value}


async def message(c: LocalCluster, node: str, path: str) -> tuple[bytes, str]:
    assert c.session is not None
    long = aiohttp.ClientTimeout(total=120)
    async with c.session.get(f"{c.url(node)}{path}/message", timeout=long) as resp:
        assert resp.status == 200, (node, path, await resp.text())
        return await resp.read(), resp.headers["X-Message-SHA256"]


async def test_a_move_carries_messages_byte_for_byte_and_their_format(cluster):
    c = cluster
    big = mime_message(bytes(n % 253 for n in range(2 * MiB + 300_000)), "<big@example.org>")
    late = mime_message(b"late" * 5000, "<late@example.org>")
    plain = "Subject: plain\r\n\r\nthe same body, text then message\r\n"
    await c.ok("PUT", "mbx1", SOURCE, json={"display_name": "Alice"})
    first = {"items": [entry("mime", MIME), entry("latin", LATIN_1)]}
    await c.ok("POST", "mbx1", f"{SOURCE}/items", json=first)
    await c.ok("POST", "mbx1", f"{SOURCE}/items", json=entry("big", big),
               timeout=aiohttp.ClientTimeout(total=300))  # fmt: skip
    text = {"item_id": "plain", "subject": "plain", "body": plain}
    await c.ok("POST", "mbx1", f"{SOURCE}/items", json=text)
    async with mover_in_process(c) as (start, _):
        run = await start()
        first_read = run.nodes.pause(
            lambda method, db, n: (method, db) == ("items", "DB1") and n >= 2, after=False
        )
        await asyncio.wait_for(first_read.reached.wait(), timeout=240)
        # the initial copy is done: changes for the incremental sync
        await c.ok("POST", "mbx1", f"{SOURCE}/items", json=entry("late", late))
        await c.ok("POST", "mbx1", f"{SOURCE}/items", json=entry("plain", plain.encode()))
        first_read.release.set()
        _, source = await outcome(c, run)  # the target holds the source's live items
    assert "late" in source, run.lines
    kept = {"mime": MIME, "latin": LATIN_1, "big": big, "late": late, "plain": plain.encode()}
    target = await active_of(c, "DB2")
    passive = "mbx3" if target == "mbx2" else "mbx2"
    await converged(c, "DB2", target, [passive])
    for node in (target, passive):
        items = await c.items(node, "DB2", "alice")
        for item_id, raw in kept.items():
            got, sha = await message(c, node, f"{TARGET}/items/{item_id}")
            assert got == raw, (node, item_id)
            assert sha == hashlib.sha256(raw).hexdigest()
            assert items[item_id]["format"] == ("message-8bit" if item_id == "latin" else "message")
    digests = [await c.ok("GET", n, f"/v1/databases/{db}/mailboxes/alice/digest")
               for n, db in (("mbx1", "DB1"), (target, "DB2"))]  # fmt: skip
    assert digests[0]["digest"] == digests[1]["digest"]
