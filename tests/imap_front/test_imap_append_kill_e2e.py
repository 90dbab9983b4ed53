"""An APPEND in flight when the active is killed (issue 50, step 7), over real processes:
three TLS nodes serving DB1 under the Lossless dial with one synchronous copy in block mode
(nothing acknowledged is lost; automatic failover after 2 s; a third copy, so the new active
has a synchronous copy too), the front, four imaplib clients appending back to back.  mbx1
is killed (kill -9) under that load; another copy takes over.

Each APPEND is either answered OK with a UID whose message (those bytes) is on the new
active, or answered NO (or its connection cut) and then, after the client sends it again,
the message is there once: never OK and lost, never twice.  The front sends an APPEND that
got no answer again under its own item id until the new active answers
(`imap.failover_wait`), so the APPENDs the kill caught in flight are answered OK.

No sleeps: each wait is for the thing itself; socket timeouts only bound a failure."""

from __future__ import annotations

import asyncio
import imaplib
import re
import threading
import time
from dataclasses import dataclass

import pytest

from tests.imap_front.harness import Front
from tests.imap_front.test_imap_e2e import BOX, PASSWORD, logged_in
from tests.imap_front.test_imap_idle_e2e import SAY
from tests.replication_node.e2e import in_block_mode, mounted_on
from tests.tls_cluster import db1_on, tls_cluster

pytestmark = pytest.mark.slow

CLIENTS = 4


@pytest.fixture
async def lab(tmp_path):
    cluster, _, ca = tls_cluster(
        tmp_path,
        **db1_on("mbx1", "mbx2", "mbx3", auto_database_mount_dial="Lossless", synchronous_copies=1),
        certs=("imap1",),
        defaults={"failover_after": "2s", "lease_ttl": "2s"},
    )
    front = Front(cluster, "imap1", {"alice": ("alice", PASSWORD)}, max_line=8192,
                  max_literal=200_000)  # fmt: skip
    await cluster.start()
    try:
        await cluster.wait_status("mbx1", "DB1", "Mounted")
        await in_block_mode(cluster, "DB1", ["mbx2", "mbx3"])
        await cluster.ok("PUT", "mbx1", BOX)
        await front.start()
        yield cluster, front, ca[0]
    finally:
        front.stop()
        await cluster.close()
    assert "Traceback" not in front.log(), front.log()[-3000:]


@dataclass
class Append:
    raw: bytes
    started: float
    ended: float = 0.0
    answer: object = None  # (typ, data), or the exception that cut the connection
    retries: int = 0


def appender(port: int, ca, w: int, out: list[Append], ready: threading.Barrier,
             killed: threading.Event) -> None:  # fmt: skip
    """Append back to back until an APPEND started after the kill is answered; one that is
    refused or cut is sent again (on a new connection if cut) until it is answered OK."""
    m = logged_in(port, ca)
    m.sock.settimeout(SAY * 4)
    i = 0
    while True:
        raw = b"Subject: w%d-%d\r\nMessage-ID: <w%d-%d@x>\r\n\r\nbody %d\r\n" % (w, i, w, i, i)
        a = Append(raw, time.monotonic())
        out.append(a)
        after_kill = killed.is_set()
        try:
            a.answer = m.append("INBOX", r"(\Seen)", None, raw)
        except (imaplib.IMAP4.abort, OSError) as exc:
            a.answer = exc
        a.ended = time.monotonic()
        while not (isinstance(a.answer, tuple) and a.answer[0] == "OK"):
            a.retries += 1  # what a mail client does: the same message again
            assert a.retries < 200, a
            if not isinstance(a.answer, tuple):
                m = logged_in(port, ca)
            try:
                a.answer = m.append("INBOX", r"(\Seen)", None, raw)
            except (imaplib.IMAP4.abort, OSError) as exc:
                a.answer = exc
        if i == 1:
            ready.wait(timeout=SAY)
        i += 1
        if after_kill:
            m.logout()
            return


async def test_an_append_in_flight_at_a_kill_is_answered_ok_and_is_there_once(lab):
    c, front, ca = lab
    out: list[list[Append]] = [[] for _ in range(CLIENTS)]
    ready = threading.Barrier(CLIENTS + 1)
    killed = threading.Event()
    load = [
        asyncio.create_task(asyncio.to_thread(appender, front.port, ca, w, out[w], ready, killed))
        for w in range(CLIENTS)
    ]
    await asyncio.to_thread(ready.wait, SAY)  # every client has appended twice
    kill_at = time.monotonic()
    c.kill("mbx1")
    killed.set()
    await asyncio.gather(*load)
    active = await mounted_on(c, "DB1", ["mbx2", "mbx3"])

    appends = [a for w in out for a in w]
    in_flight = [a for a in appends if a.started < kill_at < a.ended]
    assert in_flight, "the kill caught no APPEND in flight"
    # the front waited for the new active: those in flight were answered OK, not NO
    assert all(a.retries == 0 for a in in_flight), [(a.raw, a.retries) for a in in_flight]

    body = await c.ok("GET", active, f"{BOX}/folders/Inbox/uids")
    held: dict[bytes, list[int]] = {}
    for uid, item, *_ in body["messages"]:
        async with c.session.get(f"{c.url(active)}{BOX}/items/{item}/message") as r:
            assert r.status == 200, await r.text()
            held.setdefault(await r.read(), []).append(uid)
    for a in appends:
        uid = int(re.search(rb"APPENDUID \d+ (\d+)\]", a.answer[1][0]).group(1))
        assert held.get(a.raw) == [uid], (a.raw, uid, held.get(a.raw), a.retries)
    assert len(held) == len(appends), "nothing but the APPENDs, each once"

    assert "got no answer" in front.log(), "the front sent an APPEND in flight again"
