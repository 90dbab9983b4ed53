"""End to end, over a real cluster and a real `transport serve`: the transport's memory while
large messages are posted as they are (`message/rfc822`) for a mailbox that is locked, so
they wait in its queue, then delivered once it is unlocked (issue 52).  The peak is the
transport's `VmHWM`; the bound is generous (rest and 5x the message) so that it does not
flake, and below what a submission cost when the queue kept a message as text: its bytes,
a copy of them, their text, and SQLite's copy as it stored them (5-6x the message)."""

from __future__ import annotations

import contextlib
import hashlib
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from dag_common.api_types import item_id_for
from dag_common.memory import resident_memory
from tests.cluster_harness import LocalCluster, wait_until
from tests.replication_node.e2e import two_nodes
from tests.transport.harness import Hubs

pytestmark = pytest.mark.slow

MIB = 1 << 20
SIZE = 24 * MIB
MESSAGES = 4
BOX = "/v1/databases/DB1/mailboxes/carol"


def message(n: int) -> bytes:
    line = (b"%02d" % n) * 38 + b"\r\n"  # 78 octets
    head = f"Message-ID: <big{n}@example>\r\nSubject: big {n}\r\n\r\n".encode()
    return head + line * (SIZE // len(line))


@contextlib.asynccontextmanager
async def carol_locked(root: Path) -> AsyncIterator[tuple[LocalCluster, Hubs]]:
    """DB1 on two nodes with carol's mailbox, locked (what is sent to her waits in the
    queue), and hub1 serving; all stopped after."""
    cluster = two_nodes(root, log_file_size="4MiB", max_item_size="36MiB")
    hubs = Hubs(cluster, "hub1", max_dumpster_size_per_database="1GB")
    await cluster.start()
    try:
        await cluster.wait_status("mbx1", "DB1", "Mounted")
        await cluster.ok("PUT", "mbx1", BOX, json={})
        await cluster.ok("POST", "mbx1", BOX + "/lock")
        await hubs.start("hub1")
        yield cluster, hubs
    finally:
        hubs.stop_all()
        await cluster.close()


async def post_messages(hubs: Hubs) -> None:
    """MESSAGES messages of SIZE for carol, posted as they are (`message/rfc822`)."""
    for n in range(MESSAGES):
        status, answer = await hubs.call(
            "POST", "hub1", "/v1/messages", params={"to": "carol"}, data=message(n),
            headers={"Content-Type": "message/rfc822"},
        )  # fmt: skip
        assert status == 201, answer


async def test_a_large_message_costs_the_transport_about_its_size_once(tmp_path):
    async with carol_locked(tmp_path) as (cluster, hubs):
        pid = hubs.procs["hub1"].pid
        rest = resident_memory(pid).resident
        await post_messages(hubs)
        queued = resident_memory(pid).peak
        await cluster.ok("POST", "mbx1", BOX + "/unlock")
        await hubs.drained("hub1", timeout=300)
        delivered = resident_memory(pid).peak
        for n in range(MESSAGES):  # byte for byte on the active, behind the trace header
            status, raw = await cluster.call(
                "GET", "mbx1", f"{BOX}/items/{item_id_for(f'<big{n}@example>')}/message"
            )
            sent = message(n)
            assert status == 200 and raw.startswith(b"Received: ")
            assert hashlib.sha256(raw[-len(sent) :]).digest() == hashlib.sha256(sent).digest()
    bound = rest + 5 * SIZE
    mb = 1e6
    assert queued <= bound, f"peak {queued / mb:.0f} MB queueing, over {bound / mb:.0f} MB"
    assert delivered <= bound, f"peak {delivered / mb:.0f} MB delivering, over {bound / mb:.0f}"


async def test_a_delivery_sends_a_large_message_from_its_file_and_memory_goes_back(tmp_path):
    """What delivering costs alone: the messages queued, the transport restarted (its VmHWM
    starts over; the queue keeps them), then delivered.  A delivery streams the body's file
    to the node a slice at a time (`dag_common/message_body.py`): it held the body read
    whole, and for a node that did not take it at once asyncio's copy of the rest, 1-2x the
    message.  Once drained the transport is back near its rest (issue 52: within 25 %)."""
    async with carol_locked(tmp_path) as (cluster, hubs):
        await post_messages(hubs)
        hubs.stop_all()
        await hubs.start("hub1")
        pid = hubs.procs["hub1"].pid
        rest = resident_memory(pid).resident
        await cluster.ok("POST", "mbx1", BOX + "/unlock")
        await hubs.drained("hub1", timeout=300)
        delivered = resident_memory(pid).peak
        for n in range(MESSAGES):
            status, raw = await cluster.call(
                "GET", "mbx1", f"{BOX}/items/{item_id_for(f'<big{n}@example>')}/message"
            )
            assert status == 200 and raw.endswith(message(n))

        async def given_back() -> bool:
            return resident_memory(pid).resident <= 1.25 * rest

        await wait_until("the transport back near its rest", given_back, timeout=60)
    bound = rest + SIZE // 2
    mb = 1e6
    assert delivered <= bound, f"peak {delivered / mb:.0f} MB delivering, over {bound / mb:.0f}"


async def test_a_large_message_posted_as_json_is_held_once(tmp_path):
    """`POST /v1/messages` as JSON: a large body is unescaped in place in the request's bytes
    and queued as them (`transport/json_message.py`).  Parsed whole, it was held three times
    at once (the bytes, their text, the body's str).  Measured over messages (each delivery
    to the locked mailbox is sent from its file a slice at a time, and refused before the
    node reads it); then a text item (whose delivery, as JSON items, is not bounded yet)
    and an 8-bit message (its Latin-1 characters turned back into its bytes in the same
    buffer); all delivered byte for byte."""
    latin = b"Subject: caf\xe9\r\nMessage-ID: <latin@example>\r\n\r\n"
    latin += b"cr\xe8me \xe0\r\n" * 30000
    messages = {f"<msg{n}@example>": message(n) for n in range(2)}
    posted = {m: {"body": raw.decode(), "format": "message"} for m, raw in messages.items()}
    then = {
        "<text@example>": {"subject": "a text item", "body": message(2).decode()},
        "<latin@example>": {"body": latin.decode("latin-1"), "format": "message-8bit"},
    }

    async def post(hubs: Hubs, message_id: str, fields: dict[str, str]) -> None:
        status, answer = await hubs.call(
            "POST", "hub1", "/v1/messages",
            json={"message_id": message_id, "recipients": ["carol"], **fields},
        )  # fmt: skip
        assert status == 201, answer

    async with carol_locked(tmp_path) as (cluster, hubs):
        pid = hubs.procs["hub1"].pid
        rest = resident_memory(pid).resident
        for message_id, fields in posted.items():
            await post(hubs, message_id, fields)
        queued = resident_memory(pid).peak
        for message_id, fields in then.items():
            await post(hubs, message_id, fields)
        await cluster.ok("POST", "mbx1", BOX + "/unlock")
        await hubs.drained("hub1", timeout=300)
        items = await cluster.items("mbx1", "DB1", "carol")
        text = items[item_id_for("<text@example>")]
        assert (text["subject"], text.get("format", "text")) == ("a text item", "text")
        assert text["body"] == message(2).decode()
        assert items[item_id_for("<latin@example>")]["subject"] == "caf\ufffd"  # as a node reads it
        for message_id, raw in [*messages.items(), ("<latin@example>", latin)]:
            status, got = await cluster.call(
                "GET", "mbx1", f"{BOX}/items/{item_id_for(message_id)}/message"
            )
            assert status == 200 and got == raw, message_id
    # Measured: rest + 1.27x the message (2.1x parsed whole, on main, in the same run).
    bound = rest + 1.6 * SIZE
    mb = 1e6
    assert queued <= bound, f"peak {queued / mb:.0f} MB queueing, over {bound / mb:.0f} MB"
