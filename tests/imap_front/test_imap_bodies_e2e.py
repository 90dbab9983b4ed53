"""A FETCH of many bodies over real processes (the lab of test_imap_e2e.py): the front reads
them a batch at a time (`POST …/items/messages`, `imap_front.fetching.Bodies`), and every
literal is the stored message byte for byte, across many batches, in the order of the UIDs;
messages deleted on the node after the session listed them are answered as before (no
bytes of another message), and the session goes on."""

from __future__ import annotations

import asyncio
import hashlib
import re

import pytest

from tests.imap_front.test_imap_e2e import BOX, lab, logged_in, node_items  # noqa: F401
from tests.replication_node.test_messages_e2e import entry

pytestmark = pytest.mark.slow


def message(n: int) -> bytes:
    """Mixed sizes, as the bench's folder: every fifth of 100 KiB, the rest of 4 KiB; every
    other one 8-bit Latin-1 (not UTF-8), the others UTF-8 (the node keeps each differently)."""
    size = 100 * 1024 if n % 5 == 0 else 4 * 1024
    head = f"From: bob@example.org\r\nSubject: m{n}\r\nMessage-ID: <m{n}@example.org>\r\n\r\n"
    text = f"line of message {n} \u00e4\r\n"
    line = text.encode("latin-1") if n % 2 else (text + "\u6d4b\r\n").encode()
    return head.encode() + (line * (size // len(line) + 1))[:size]


def literals(data: list) -> dict[int, bytes]:
    """The literal of each FETCH answer by its UID (said before or after the literal)."""
    out = {}
    for at, part in enumerate(data):
        if isinstance(part, tuple):
            after = data[at + 1] if at + 1 < len(data) and isinstance(data[at + 1], bytes) else b""
            uid = re.search(rb"UID (\d+)", part[0] + b" " + after)
            assert uid, (part[0], after)
            out[int(uid.group(1))] = part[1]
    return out


async def test_a_range_of_bodies_comes_back_exactly_across_batches(lab):  # noqa: F811
    cluster, _, front, ca = lab
    sent = {f"m{n}": message(n) for n in range(120)}  # ~3.8 MB: four batches and more
    ids = list(sent)
    for first in range(0, len(ids), 20):
        batch = [entry(i, sent[i], folder="Inbox") for i in ids[first : first + 20]]
        await cluster.ok("POST", "mbx1", f"{BOX}/items", json={"items": batch})
    by_uid = {row[0]: row[1] for row in await node_items(cluster, "Inbox")}
    assert len(by_uid) == len(sent)
    gone = [by_uid[uid] for uid in (7, 8, 60, 120)]

    def session() -> tuple[list, list, list, list]:
        m = logged_in(front.port, ca)
        m.select("INBOX", readonly=True)
        whole = m.uid("FETCH", "1:*", "(UID BODY.PEEK[])")
        flagged = m.uid("FETCH", "1:*", "(FLAGS BODY.PEEK[] INTERNALDATE)")
        # deleted on the node once the session has listed them: not told to it yet
        asyncio.run_coroutine_threadsafe(delete(gone), loop).result(60)
        after = m.uid("FETCH", "1:*", "(UID BODY.PEEK[])")
        m.noop()
        later = m.uid("FETCH", "1:*", "(UID BODY.PEEK[])")
        m.logout()
        return list(whole), list(after), list(later), list(flagged)

    async def delete(items: list[str]) -> None:
        for item in items:
            await cluster.ok("DELETE", "mbx1", f"{BOX}/items/{item}")

    loop = asyncio.get_running_loop()
    whole, after, later, flagged = await asyncio.to_thread(session)
    assert whole[0] == "OK"
    got = literals(whole[1])
    assert sorted(got) == sorted(by_uid)
    assert flagged[0] == "OK" and literals(flagged[1]) == got
    assert b"FLAGS ()" in flagged[1][0][0] and b"INTERNALDATE" in flagged[1][1]
    for uid, raw in got.items():
        assert hashlib.sha256(raw).digest() == hashlib.sha256(sent[by_uid[uid]]).digest(), uid

    assert after[0] == "OK", after
    shown = literals(after[1])
    for uid, raw in shown.items():  # a message deleted meanwhile shows no other's bytes
        assert by_uid[uid] in gone or raw == sent[by_uid[uid]], uid
    assert {by_uid[uid] for uid in by_uid if uid not in shown} <= set(gone)
    assert later[0] == "OK"
    assert literals(later[1]) == {u: sent[i] for u, i in by_uid.items() if i not in gone}
