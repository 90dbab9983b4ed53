"""An IMAP session through a switchover, a kill -9 failover and a kill -9 of its front
(issue 50, step 7), over real processes: two TLS nodes serving DB1 (mbx1 active, mbx2 its
copy), a transport with its LMTP listener and its dumpster, two fronts (imap1, imap2);
imaplib clients, one of them in IDLE.

- A switchover under load: while the transport delivers and a client stores flags and
  appends, DB1 switches over to mbx2; afterwards every message is there with its flags, the
  idler was told of each (`* n EXISTS` up to the last), never an EXPUNGE, and each UID the
  clients were shown holds the bytes it held.
- A lossy failover: mbx2 stops copying, the transport delivers messages the clients see,
  mbx1 is killed (kill -9) and mbx2 activated under BestAvailability; the dumpster
  redelivers the lost messages.  The sessions carry on: the lost UIDs are told as EXPUNGE,
  the redelivered messages arrive as new UIDs above every UID shown, none of the UIDs shown
  is given to another message, and BODY[] of each is the bytes delivered.
- A front killed (kill -9): the client reconnects to the other front and finds the same
  UIDVALIDITY, UIDs and flags.
- CONDSTORE through a lossy failover: a STORE lost with the old active; the client's
  CHANGEDSINCE its HIGHESTMODSEQ afterwards answers every message (`modseq_floor`).

No sleeps: each wait is for the thing itself (an answer, a status); socket timeouts only
bound a failure."""

from __future__ import annotations

import asyncio
import imaplib
import re
import smtplib
import threading

import pytest

from dag_common.api_types import item_id_for
from tests.imap_front.harness import Front
from tests.imap_front.test_imap_e2e import BOX, MIME, PASSWORD, logged_in
from tests.imap_front.test_imap_idle_e2e import SAY, Idler
from tests.replication_node.e2e import converged
from tests.tls_cluster import db1_on, tls_cluster
from tests.transport.harness import tls_mail_hub

pytestmark = pytest.mark.slow

INBOX = f"{BOX}/folders/Inbox/uids"
LOAD = 40  # at most this many deliveries, and as many STOREs and APPENDs, around a switchover


@pytest.fixture
async def lab(tmp_path):
    cluster, _, ca = tls_cluster(
        tmp_path,
        **db1_on("mbx1", "mbx2"),
        certs=("hub1", "imap1", "imap2"),
        defaults={"failover_after": None},
    )
    hubs = tls_mail_hub(cluster)
    users = {"alice": ("alice", PASSWORD)}
    fronts = [Front(cluster, name, users, max_line=8192, max_literal=200_000)
              for name in ("imap1", "imap2")]  # fmt: skip
    await cluster.start()
    try:
        await cluster.wait_status("mbx1", "DB1", "Mounted")
        await cluster.ok("PUT", "mbx1", BOX)
        await hubs.start("hub1")
        for front in fronts:
            await front.start()
        yield cluster, hubs, fronts, ca[0]
    finally:
        for front in fronts:
            front.stop()
        hubs.stop_all()
        await cluster.close()
    for front in fronts:
        assert "Traceback" not in front.log(), front.log()[-3000:]


def delivered(n: int) -> bytes:
    return MIME.replace(b"<m1@", b"<fo-%d@" % n).replace(b"report", b"report %d" % n)


def item_of(n: int) -> str:
    return item_id_for(f"<fo-{n}@example.org>")


def deliver(hubs, n: int) -> bytes:
    raw = delivered(n)
    with smtplib.LMTP("127.0.0.1", hubs.lmtp_ports["hub1"]) as lmtp:
        lmtp.sendmail("bob@example.org", ["alice"], raw)
    return raw


def worker(port: int, ca) -> imaplib.IMAP4:
    """A session selected on INBOX, its answers bounded by SAY."""
    m = logged_in(port, ca)
    m.sock.settimeout(SAY)
    typ, data = m.select("INBOX")
    assert typ == "OK", data
    return m


def shown(m) -> dict[int, tuple[bytes, frozenset[bytes]]]:
    """UID -> (BODY[], flags) of every message the session is shown now (\\Recent aside:
    it is a session's own)."""
    m.noop()  # the session learns of new messages first: 1:* is what it knows
    typ, data = m.uid("FETCH", "1:*", "(UID FLAGS BODY.PEEK[])")
    assert typ == "OK", data
    out = {}
    for part in data:
        if isinstance(part, tuple):
            uid = int(re.search(rb"UID (\d+)", part[0]).group(1))
            flags = re.search(rb"FLAGS \(([^)]*)\)", part[0]).group(1).split()
            out[uid] = (part[1], frozenset(flags) - {b"\\Recent"})  # \Recent: per session
    return out


def untagged(m, name: str) -> list[bytes]:
    return [line for line in m.untagged_responses.pop(name, []) if line is not None]


async def listing(c, node: str) -> dict[int, tuple[str, frozenset[str]]]:
    """UID -> (item id, flags) of Inbox as `node` lists it."""
    body = await c.ok("GET", node, INBOX)
    return {m[0]: (m[1], frozenset(m[2])) for m in body["messages"]}


async def test_a_switchover_under_load_loses_nothing_the_clients_did_or_were_told(lab):
    c, hubs, (front, _), ca = lab
    sent = {n: await asyncio.to_thread(deliver, hubs, n) for n in (1, 2, 3)}
    await hubs.drained("hub1")
    await converged(c, "DB1", "mbx1", ["mbx2"])
    idler = await asyncio.to_thread(Idler, front.port, ca)
    assert idler.exists == 3
    user = await asyncio.to_thread(worker, front.port, ca)
    before = await asyncio.to_thread(shown, user)
    assert sorted(before) == [1, 2, 3]

    switched = threading.Event()
    started = threading.Barrier(3)  # both loads have done one step before the switchover
    answers: list[tuple[str, object]] = []
    appended: dict[int, bytes] = {}
    flagged: set[int] = set()

    def deliveries() -> None:
        n = 4
        while n < 4 + LOAD:
            sent[n] = deliver(hubs, n)
            if n == 4:
                started.wait(timeout=SAY)
            n += 1
            if switched.is_set():
                break
        sent[n] = deliver(hubs, n)  # and one after

    def writes() -> None:
        for i in range(LOAD):
            uid = 1 + i % 3
            answers.append(("store", user.uid("STORE", str(uid), "+FLAGS", r"(\Flagged)")))
            flagged.add(uid)
            raw = b"Subject: appended %d\r\n\r\nduring the switchover\r\n" % i
            answer = user.append("INBOX", None, None, raw)
            answers.append(("append", answer))
            got = re.search(rb"APPENDUID \d+ (\d+)\]", answer[1][0] or b"")
            if got:
                appended[int(got.group(1))] = raw
            if i == 0:
                started.wait(timeout=SAY)
            if switched.is_set():
                return

    load = [asyncio.create_task(asyncio.to_thread(f)) for f in (deliveries, writes)]
    await asyncio.to_thread(started.wait, SAY)
    done = await asyncio.to_thread(c.node_cli, "db", "switchover", "DB1", "--to", "mbx2", "--json")
    switched.set()
    await asyncio.gather(*load)
    assert done.returncode == 0, done.stdout + done.stderr
    refused = [(what, a) for what, a in answers if a[0] != "OK"]
    assert not refused, refused
    await hubs.drained("hub1")

    total = len(sent) + len(appended)
    told = await asyncio.to_thread(idler.until, b"* %d EXISTS" % total)
    assert not any(b"EXPUNGE" in line for line in told), told
    assert (await asyncio.to_thread(idler.done)).split()[1] == b"OK"

    await asyncio.to_thread(user.noop)
    assert not untagged(user, "EXPUNGE")
    after = await asyncio.to_thread(shown, user)
    assert len(after) == total, sorted(after)
    for uid, (raw, _) in before.items():
        assert after[uid][0] == raw, f"UID {uid} changed meaning"
    for uid, raw in appended.items():
        assert after[uid][0] == raw, f"APPENDUID {uid} is another message"
    bodies = [raw for raw, _ in after.values()]
    for n, raw in sent.items():
        assert sum(b.endswith(raw) for b in bodies) == 1, f"delivery {n} once"
    assert {uid for uid, (_, f) in after.items() if b"\\Flagged" in f} == flagged
    on_mbx2 = await listing(c, "mbx2")
    assert {u: "\\Flagged" in f for u, (_, f) in on_mbx2.items()} == {
        u: b"\\Flagged" in f for u, (_, f) in after.items()
    }
    await asyncio.to_thread(user.logout)


async def test_a_lossy_failover_gives_no_uid_shown_to_another_message(lab):
    c, hubs, (front, _), ca = lab
    sent = {n: await asyncio.to_thread(deliver, hubs, n) for n in (1, 2, 3)}
    await hubs.drained("hub1")
    await converged(c, "DB1", "mbx1", ["mbx2"])
    idler = await asyncio.to_thread(Idler, front.port, ca)
    user = await asyncio.to_thread(worker, front.port, ca)

    # mbx2 copies nothing more: what mbx1 takes now is lost with it, after the clients saw it
    await c.ok("POST", "mbx2", "/v1/databases/DB1/copies/mbx2/suspend")
    for n in range(4, 9):
        sent[n] = await asyncio.to_thread(deliver, hubs, n)
    await hubs.drained("hub1")
    await asyncio.to_thread(idler.until, b"* 8 EXISTS")
    stored = await asyncio.to_thread(user.uid, "STORE", "5", "+FLAGS", r"(\Flagged)")
    assert stored[0] == "OK", stored
    was = await asyncio.to_thread(shown, user)
    assert sorted(was) == list(range(1, 9))
    for uid in range(1, 9):
        assert was[uid][0].endswith(sent[uid]), uid

    activated = await c.lossy_failover("mbx1", to="mbx2")
    assert activated["lost_logs"] >= 1, activated

    async def redelivered() -> bool:
        return "Success" in ((await c.status("mbx2"))["DB1"].get("redelivery") or "")

    await c.wait_for("the dumpster's redelivery to succeed", redelivered, timeout=120)
    await hubs.drained("hub1")
    on_mbx2 = await listing(c, "mbx2")
    assert sorted(item for item, _ in on_mbx2.values()) == sorted(item_of(n) for n in sent)

    # the idler carries on: the lost UIDs expunged, the redelivered ones new
    told = await asyncio.to_thread(idler.until, b"* 8 EXISTS")
    assert sum(line.endswith(b" EXPUNGE") for line in told) == 5, b"\n".join(told).decode()
    assert (await asyncio.to_thread(idler.done)).split()[1] == b"OK"

    # the other session too, at its next command
    await asyncio.to_thread(user.noop)
    now = await asyncio.to_thread(shown, user)
    assert len(now) == 8, sorted(now)
    for uid, (raw, _) in now.items():
        if uid in was:
            assert raw == was[uid][0], f"UID {uid} shown as another message"
    new = sorted(set(now) - set(was))
    assert len(new) == 5 and min(new) > max(was), new
    bodies = [raw for raw, _ in now.values()]
    for n, raw in sent.items():
        assert sum(b.endswith(raw) for b in bodies) == 1, f"delivery {n}: once, byte for byte"
    assert {u: item for u, (item, _) in on_mbx2.items()} == {
        u: item_of(next(n for n, raw in sent.items() if now[u][0].endswith(raw))) for u in now
    }
    # a new message takes a UID above the redelivered ones, in this session and others
    answer = await asyncio.to_thread(user.append, "INBOX", None, None, b"Subject: x\r\n\r\nx\r\n")
    uid = int(re.search(rb"APPENDUID \d+ (\d+)\]", answer[1][0]).group(1))
    assert uid > max(new), answer
    await asyncio.to_thread(user.logout)


async def test_a_front_killed_its_client_reconnects_to_the_other_with_its_state(lab):
    _, hubs, (first, second), ca = lab
    for n in (1, 2, 3):
        await asyncio.to_thread(deliver, hubs, n)
    await hubs.drained("hub1")
    user = await asyncio.to_thread(worker, first.port, ca)
    validity = user.untagged_responses["UIDVALIDITY"][0]
    stored = await asyncio.to_thread(user.uid, "STORE", "2", "+FLAGS", r"(\Seen \Flagged)")
    assert stored[0] == "OK", stored
    answer = await asyncio.to_thread(user.append, "INBOX", r"(\Draft)", None, b"S: a\r\n\r\na\r\n")
    assert re.search(rb"APPENDUID %s 4\]" % validity, answer[1][0]), answer
    was = await asyncio.to_thread(shown, user)
    idler = await asyncio.to_thread(Idler, first.port, ca)

    first.kill()

    def dropped() -> list[str]:
        out = []
        for session in (user, idler.m):
            try:
                session.noop()
                out.append("answered")
            except (imaplib.IMAP4.abort, OSError) as exc:
                out.append(type(exc).__name__)
        return out

    assert "answered" not in await asyncio.to_thread(dropped)
    again = await asyncio.to_thread(worker, second.port, ca)
    assert again.untagged_responses["UIDVALIDITY"] == [validity]
    assert await asyncio.to_thread(shown, again) == was
    idler = await asyncio.to_thread(Idler, second.port, ca)
    assert idler.exists == 4
    raw = await asyncio.to_thread(deliver, hubs, 5)
    await asyncio.to_thread(idler.until, b"* 5 EXISTS")
    assert (await asyncio.to_thread(idler.done)).split()[1] == b"OK"
    now = await asyncio.to_thread(shown, again)
    assert {u: v for u, v in now.items() if u != 5} == was and now[5][0].endswith(raw)
    await asyncio.to_thread(again.logout)


def condstore_session(port: int, ca) -> imaplib.IMAP4:
    """A session that enabled CONDSTORE, selected on INBOX (`SELECT (CONDSTORE)`)."""
    m = logged_in(port, ca)
    m.sock.settimeout(SAY)
    assert m._simple_command("ENABLE", "CONDSTORE")[0] == "OK"
    assert m._simple_command("SELECT", "INBOX", "(CONDSTORE)")[0] == "OK"
    m.state = "SELECTED"  # imaplib's own SELECT takes no modifier
    return m


def changed_since(m, modseq: int) -> dict[int, frozenset[bytes]]:
    """UID -> flags of the messages `UID FETCH 1:* (FLAGS) (CHANGEDSINCE modseq)` answers."""
    m.untagged_responses.clear()
    typ, data = m._simple_command("UID", "FETCH", "1:*", "(FLAGS)", f"(CHANGEDSINCE {modseq})")
    assert typ == "OK", data
    out = {}
    for line in untagged(m, "FETCH"):
        line = line[0] if isinstance(line, tuple) else line
        uid = int(re.search(rb"UID (\d+)", line).group(1))
        out[uid] = frozenset(re.search(rb"FLAGS \(([^)]*)\)", line).group(1).split())
    return out


async def test_after_a_lossy_failover_changedsince_returns_every_message(lab):
    """A CONDSTORE client whose cached flags came from the lost tail (a STORE the new
    active never had) asks what changed since its HIGHESTMODSEQ: every message of the
    folder (each at the folder's `modseq_floor`), with its flags as the new active holds
    them, so it learns that its cache may be wrong."""
    c, hubs, (front, _), ca = lab
    for n in (1, 2, 3):
        await asyncio.to_thread(deliver, hubs, n)
    await hubs.drained("hub1")
    await converged(c, "DB1", "mbx1", ["mbx2"])
    await c.ok("POST", "mbx2", "/v1/databases/DB1/copies/mbx2/suspend")

    def store_and_hold() -> int:
        m = condstore_session(front.port, ca)
        typ, data = m.uid("STORE", "2", "+FLAGS", r"(\Flagged)")  # lost with mbx1
        assert typ == "OK", data
        assert changed_since(m, 1)[2] >= {b"\\Flagged"}
        m.untagged_responses.clear()
        typ, data = m._simple_command("STATUS", "INBOX", "(HIGHESTMODSEQ)")
        assert typ == "OK", data
        line = b" ".join(bytes(v) for v in untagged(m, "STATUS"))
        m.logout()
        return int(re.search(rb"HIGHESTMODSEQ (\d+)", line).group(1))

    held = await asyncio.to_thread(store_and_hold)

    activated = await c.lossy_failover("mbx1", to="mbx2")
    assert activated["lost_logs"] >= 1, activated

    def after() -> dict[int, frozenset[bytes]]:
        m = condstore_session(front.port, ca)
        try:
            return changed_since(m, held)
        finally:
            m.logout()

    changed = await asyncio.to_thread(after)
    assert sorted(changed) == [1, 2, 3], changed
    assert b"\\Flagged" not in changed[2], changed  # the lost STORE: the client learns it
