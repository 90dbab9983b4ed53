"""Pipelined single-message FETCHes, as mbsync sends them, over real processes (the lab of
test_imap_e2e.py): every body comes back byte for byte from the session's read-ahead
(`imap_front.read_ahead`), the run polls the change feed far less than once a command, and
a write between two FETCHes of the run is seen by the FETCH after it."""

from __future__ import annotations

import asyncio
import hashlib
import re

import aiohttp
import pytest

from tests.imap_front.test_imap_bodies_e2e import message
from tests.imap_front.test_imap_e2e import BOX, lab, logged_in, node_items  # noqa: F401
from tests.replication_node.test_messages_e2e import entry

pytestmark = pytest.mark.slow


def answers(m, count: int) -> tuple[dict[int, bytes], dict[int, bytes], list[bytes]]:
    """Read `count` tagged answers: each FETCH's literal and its line's items by UID, and
    the tagged lines."""
    bodies: dict[int, bytes] = {}
    items: dict[int, bytes] = {}
    tagged: list[bytes] = []
    while len(tagged) < count:
        line = m.readline()
        assert line, "the front closed the connection"
        if not line.startswith(b"* "):
            tagged.append(line)
            continue
        literal = None
        whole = line
        while line.endswith(b"}\r\n"):
            literal = m.read(int(line[line.rindex(b"{") + 1 : -3]))
            line = m.readline()
            whole += line
        uid = re.search(rb"UID (\d+)", whole)
        if uid is not None and b" FETCH " in whole[:20]:
            items[int(uid.group(1))] = items.get(int(uid.group(1)), b"") + whole
            if literal is not None:
                bodies[int(uid.group(1))] = literal
    return bodies, items, tagged


async def polls(front) -> float:
    async with (
        aiohttp.ClientSession() as http,
        http.get(f"http://127.0.0.1:{front.metrics_port}/metrics") as resp,
    ):
        text = await resp.text()
    found = re.findall(r'imap_front_feed_polls_total\{outcome="\w+"\} ([\d.]+)', text)
    return sum(float(n) for n in found)


async def test_pipelined_single_fetches_come_back_exactly_in_a_few_polls(lab):  # noqa: F811
    cluster, _, front, ca = lab
    sent = {f"m{n}": message(n) for n in range(100)}
    ids = list(sent)
    for first in range(0, len(ids), 20):
        batch = [entry(i, sent[i], folder="Inbox") for i in ids[first : first + 20]]
        await cluster.ok("POST", "mbx1", f"{BOX}/items", json={"items": batch})
    by_uid = {row[0]: row[1] for row in await node_items(cluster, "Inbox")}
    assert len(by_uid) == len(sent)
    uids = sorted(by_uid)

    def run() -> tuple[dict[int, bytes], list[bytes]]:
        m = logged_in(front.port, ca)
        m.select("INBOX")
        m.send(b"".join(b"p%d UID FETCH %d (BODY.PEEK[])\r\n" % (u, u) for u in uids))
        bodies, _, tagged = answers(m, len(uids))
        m.logout()
        return bodies, tagged

    before = await polls(front)
    bodies, tagged = await asyncio.to_thread(run)
    polled = await polls(front) - before
    assert all(b" OK " in t for t in tagged), tagged
    assert sorted(bodies) == uids
    for uid, raw in bodies.items():
        assert hashlib.sha256(raw).digest() == hashlib.sha256(sent[by_uid[uid]]).digest(), uid
    # the SELECT's and the run's: not one a command (main: one a FETCH)
    assert polled < len(uids) / 2, polled

    def flagged() -> tuple[dict[int, bytes], list[bytes]]:
        m = logged_in(front.port, ca)
        m.select("INBOX")
        m.send(
            b"a UID FETCH 1 (FLAGS BODY.PEEK[])\r\nb UID FETCH 2 (FLAGS BODY.PEEK[])\r\n"
            b"c UID FETCH 3 (FLAGS BODY.PEEK[])\r\nd UID STORE 4 +FLAGS.SILENT (\\Flagged)\r\n"
            b"e UID FETCH 4 (FLAGS BODY.PEEK[])\r\nf UID FETCH 5 (FLAGS BODY.PEEK[])\r\n"
        )
        bodies, items, tagged = answers(m, 6)
        m.logout()
        return bodies, items, tagged

    bodies, items, tagged = await asyncio.to_thread(flagged)
    assert all(b" OK " in t for t in tagged), tagged
    assert b"\\Flagged" in items[4], items[4]  # the STORE before it, seen
    assert b"\\Flagged" not in items[5]
    assert {u: bodies[u] for u in range(1, 6)} == {u: sent[by_uid[u]] for u in range(1, 6)}
