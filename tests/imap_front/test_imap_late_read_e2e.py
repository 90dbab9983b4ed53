"""A read the old active answered just before it gave up the role, reaching the front late
(issue 50: "never sees its cache lied to"), over real processes: two TLS nodes serving DB1
(mbx1 active, mbx2 its copy), a transport with its LMTP listener and its dumpster, a front
(imap1) whose calls to mbx1 go through a proxy that holds one answer's bytes until told
(`delay_proxy`), imaplib clients.

One session (A) asks something of mbx1; mbx1 answers it and the proxy holds the answer; DB1
switches over to mbx2 (or mbx1 is killed and mbx2 activated, lossy); another session (B)
of the same front changes the folder on the new active and new mail arrives there; then
the answer reaches the front.  What each client sees afterwards: UIDNEXT never back, no
message shown vanishes but by an EXPUNGE of the new active's, no EXISTS past what the
folder holds, flags as the new active holds them.  Each of the front's reads in turn: the
change feed, the folder's listing, the mailbox's state (STATUS), a message's bytes.

No sleeps: each wait is for the thing itself (an answer, a status, the proxy's hold)."""

from __future__ import annotations

import asyncio
import copy
import re

import pytest

from tests.cluster_harness import write_cluster_config
from tests.imap_front.delay_proxy import DelayProxy
from tests.imap_front.harness import Front
from tests.imap_front.test_imap_e2e import PASSWORD
from tests.imap_front.test_imap_failover_e2e import deliver, listing, shown, untagged, worker
from tests.imap_front.test_imap_idle_e2e import SAY, Idler
from tests.replication_node.e2e import converged
from tests.tls_cluster import db1_on, tls_cluster
from tests.transport.harness import tls_mail_hub

pytestmark = pytest.mark.slow

BOX = "/v1/databases/DB1/mailboxes/alice"


@pytest.fixture
async def lab(tmp_path):
    cluster, pki, ca = tls_cluster(
        tmp_path,
        **db1_on("mbx1", "mbx2"),
        certs=("hub1", "imap1"),
        defaults={"failover_after": None},
    )
    hubs = tls_mail_hub(cluster)
    proxy = DelayProxy(
        ("127.0.0.1", cluster.ports["mbx1"]), pki / "mbx1.pem", pki / "mbx1.key", ca[0]
    )
    await proxy.start()
    front = Front(cluster, "imap1", {"alice": ("alice", PASSWORD)},
                  max_line=8192, max_literal=200_000)  # fmt: skip
    seen = copy.deepcopy(cluster.config)  # the front's: mbx1 through the proxy
    for node in seen["nodes"]:
        if node["name"] == "mbx1":
            node["url"] = proxy.url
    front.config_path = write_cluster_config(cluster.root / "front.yaml", seen)
    await cluster.start()
    try:
        await cluster.wait_status("mbx1", "DB1", "Mounted")
        await cluster.ok("PUT", "mbx1", BOX)
        await hubs.start("hub1")
        await front.start()
        yield cluster, hubs, front, proxy, ca[0]
    finally:
        front.stop()
        hubs.stop_all()
        await proxy.close()
        await cluster.close()
    assert "Traceback" not in front.log(), front.log()[-3000:]


def said(m, name: str) -> list[int]:
    """The numbers of the untagged `name` answers (EXISTS, EXPUNGE) since last asked."""
    return [int(v) for v in untagged(m, name)]


def uid_next(m) -> int:
    """UIDNEXT of INBOX, asked in the session `m` (STATUS)."""
    typ, data = m.status("INBOX", "(UIDNEXT)")
    assert typ == "OK", data
    return int(re.search(rb"UIDNEXT (\d+)", data[0]).group(1))


def noop(m) -> tuple[str, list]:
    return m.noop()


def status(m) -> tuple[str, list]:
    return m.status("INBOX", "(MESSAGES UIDNEXT)")


def fetch_4(m) -> tuple[str, list]:
    return m.uid("FETCH", "4", "(FLAGS BODY.PEEK[])")


# the request whose answer is held, and session A's command that makes it first
READS = {
    "feed": (rb"^GET \S*/mailboxes/alice/changes\?", noop),
    "listing": (rb"^GET \S*/folders/Inbox/uids\?", noop),
    "state": (rb"^GET \S*/mailboxes/alice(\?\S*)? HTTP", status),
    "message": (rb"/message", fetch_4),
}


async def held_answer(proxy: DelayProxy, pattern: bytes, command, m) -> tuple[object, asyncio.Task]:
    """Session `m` runs `command`; the answer to its request matching `pattern` is held."""
    held = proxy.hold(pattern)
    m.untagged_responses.clear()
    task = asyncio.create_task(asyncio.to_thread(command, m))
    answered = asyncio.create_task(held.answered.wait())
    await asyncio.wait((task, answered), timeout=SAY, return_when=asyncio.FIRST_COMPLETED)
    assert not task.done(), (task.result(), proxy.lines[-5:])
    assert held.answered.is_set(), f"no request matched {pattern!r}: {proxy.lines[-5:]}"
    answered.cancel()
    return held, task


@pytest.mark.parametrize("read", sorted(READS))
async def test_an_answer_of_the_old_active_arriving_after_a_switchover_lies_to_no_client(lab, read):
    c, hubs, front, proxy, ca = lab
    for n in (1, 2, 3):
        await asyncio.to_thread(deliver, hubs, n)
    await hubs.drained("hub1")
    a = await asyncio.to_thread(worker, front.port, ca)
    b = await asyncio.to_thread(worker, front.port, ca)
    assert await asyncio.to_thread(uid_next, a) == 4
    await asyncio.to_thread(deliver, hubs, 4)  # on mbx1: the feed names Inbox to A's poll
    await hubs.drained("hub1")
    await converged(c, "DB1", "mbx1", ["mbx2"])
    if read == "message":  # A is shown UID 4 first, so that it may fetch it
        a.untagged_responses.clear()
        await asyncio.to_thread(noop, a)
        assert said(a, "EXISTS") == [4]

    pattern, command = READS[read]
    held, answer = await held_answer(proxy, pattern, command, a)
    switched = await asyncio.to_thread(
        c.node_cli, "db", "switchover", "DB1", "--to", "mbx2", "--json"
    )
    assert switched.returncode == 0, switched.stderr

    # B changes the folder on mbx2 and is shown it; new mail arrives there
    def change() -> dict:
        assert b.uid("STORE", "1", "+FLAGS", r"(\Flagged)")[0] == "OK"
        assert b.uid("STORE", "2", "+FLAGS", r"(\Deleted)")[0] == "OK"
        assert b.uid("EXPUNGE", "2")[0] == "OK"
        deliver(hubs, 5)
        return {}

    await asyncio.to_thread(change)
    await hubs.drained("hub1")
    on_mbx2 = await listing(c, "mbx2")
    assert sorted(on_mbx2) == [1, 3, 4, 5], on_mbx2
    b_sees = await asyncio.to_thread(shown, b)
    assert sorted(b_sees) == [1, 3, 4, 5]
    assert await asyncio.to_thread(uid_next, b) == 6

    # the old active's answer reaches the front now
    held.release()
    typ, data = await answer
    assert typ == "OK", data
    exists, expunged = said(a, "EXISTS"), said(a, "EXPUNGE")
    assert all(n <= 4 for n in exists), (read, exists)  # never more than the folder held
    await asyncio.to_thread(noop, a)
    exists += said(a, "EXISTS")
    expunged += said(a, "EXPUNGE")
    # A showed UIDs 1-3 (and 4 if its read told it): UID 2 is the only one expunged
    assert expunged == [2], (read, expunged)
    a_sees = await asyncio.to_thread(shown, a)
    assert a_sees == b_sees, read
    assert {u: b"\\Flagged" in f for u, (_, f) in a_sees.items()} == {
        u: "\\Flagged" in f for u, (_, f) in on_mbx2.items()
    }
    assert await asyncio.to_thread(uid_next, a) == 6
    fresh = await asyncio.to_thread(worker, front.port, ca)
    assert await asyncio.to_thread(shown, fresh) == b_sees
    for m in (a, b, fresh):
        await asyncio.to_thread(m.logout)


async def lossy_tail(c, hubs, front, ca):
    """Three messages on both copies; then mbx2 copies nothing more, and mbx1 takes a
    delivery (UID 4), an APPEND (UID 5, told OK) and a STORE (\\Flagged on UID 1), all lost
    with it.  Sessions A and B selected, A shown UIDs 1-5.  (a, b, the deliveries, the
    appended bytes)."""
    sent = {n: await asyncio.to_thread(deliver, hubs, n) for n in (1, 2, 3)}
    await hubs.drained("hub1")
    await converged(c, "DB1", "mbx1", ["mbx2"])
    a = await asyncio.to_thread(worker, front.port, ca)
    b = await asyncio.to_thread(worker, front.port, ca)
    await c.ok("POST", "mbx2", "/v1/databases/DB1/copies/mbx2/suspend")
    sent[4] = await asyncio.to_thread(deliver, hubs, 4)
    await hubs.drained("hub1")
    raw = b"Subject: appended\r\n\r\nacknowledged by mbx1 only\r\n"
    typ, data = await asyncio.to_thread(b.append, "INBOX", None, None, raw)
    assert typ == "OK", data
    assert re.search(rb"APPENDUID \d+ 5\]", data[0]), data
    a.untagged_responses.clear()
    await asyncio.to_thread(noop, a)
    assert said(a, "EXISTS") == [5]  # A is shown both
    assert (await asyncio.to_thread(b.uid, "STORE", "1", "+FLAGS", r"(\Flagged)"))[0] == "OK"
    return a, b, sent, raw


async def failed_over(c, hubs, sent) -> dict:
    """mbx1 killed (kill -9), mbx2 activated lossy, the dumpster's redelivery done, a new
    delivery (6) on mbx2: Inbox as mbx2 lists it."""
    activated = await c.lossy_failover("mbx1", to="mbx2")
    assert activated["lost_logs"] >= 1, activated

    async def redelivered() -> bool:
        return "Success" in ((await c.status("mbx2"))["DB1"].get("redelivery") or "")

    await c.wait_for("the dumpster's redelivery to succeed", redelivered, timeout=120)
    sent[6] = await asyncio.to_thread(deliver, hubs, 6)
    await hubs.drained("hub1")
    on_mbx2 = await listing(c, "mbx2")
    assert len(on_mbx2) == 5 and sorted(on_mbx2)[:3] == [1, 2, 3], on_mbx2
    return on_mbx2


async def as_on_mbx2(a, b, sent, raw, on_mbx2) -> None:
    """A, B and a new session show Inbox as mbx2 has it: each delivery once, no \\Flagged,
    not the APPEND told OK (lost with mbx1's tail: the dumpster redelivers the transport's
    mail, not an APPEND); an APPEND now takes a UID above every one (5 not given again)."""
    a_sees = await asyncio.to_thread(shown, a)
    assert a_sees == await asyncio.to_thread(shown, b)
    assert sorted(a_sees) == sorted(on_mbx2)
    assert not any(b"\\Flagged" in f for _, f in a_sees.values())  # the lost STORE
    bodies = [body for body, _ in a_sees.values()]
    for n, message in sent.items():
        assert sum(body.endswith(message) for body in bodies) == 1, f"delivery {n}: once"
    assert raw not in bodies
    typ, data = await asyncio.to_thread(a.append, "INBOX", None, None, raw)
    assert typ == "OK", data
    again = int(re.search(rb"APPENDUID \d+ (\d+)\]", data[0]).group(1))
    assert again > max(on_mbx2) > 5, data
    for m in (a, b):
        await asyncio.to_thread(m.logout)


@pytest.mark.parametrize("read", sorted(READS))
async def test_an_answer_of_the_old_active_arriving_after_a_lossy_failover_mixes_no_states(
    lab, read
):
    """The held answer is one of an active killed after it (kill -9) with a tail mbx2 never
    had (`lossy_tail`).  A feed answer naming Inbox says the old epoch: A's session must not
    take the new active's listing since the modseq it was shown as if the answer were the
    new active's (it did: the lost UIDs stayed shown beside their redelivered copies, no
    EXPUNGE for them, `* 7 EXISTS` with 5 in the folder, until the next command)."""
    c, hubs, front, proxy, ca = lab
    a, b, sent, raw = await lossy_tail(c, hubs, front, ca)
    pattern, command = READS[read]
    held, answer = await held_answer(proxy, pattern, command, a)
    on_mbx2 = await failed_over(c, hubs, sent)

    held.release()
    typ, data = await answer
    assert typ == "OK", data
    exists, expunged = said(a, "EXISTS"), said(a, "EXPUNGE")
    assert all(n <= 5 for n in exists), exists  # never more than the folder held
    await asyncio.to_thread(noop, a)
    expunged += said(a, "EXPUNGE")
    assert len(expunged) == 2, expunged  # UIDs 4 and 5, lost: told once each
    await as_on_mbx2(a, b, sent, raw, on_mbx2)


async def test_an_idlers_feed_answer_of_the_old_active_after_a_lossy_failover(lab):
    """The same for an idling session: its long poll (shared, `feed_polls`) answered by
    mbx1 for the lost STORE, that answer held until after the failover."""
    c, hubs, front, proxy, ca = lab
    a, b, sent, raw = await lossy_tail(c, hubs, front, ca)
    await asyncio.to_thread(b.uid, "STORE", "1", "-FLAGS", r"(\Flagged)")
    held = proxy.hold(rb"^GET \S*/mailboxes/alice/changes\?\S*wait=25")
    idler = await asyncio.to_thread(Idler, front.port, ca)
    assert idler.exists == 5
    await asyncio.wait_for(held.seen.wait(), SAY)
    assert (await asyncio.to_thread(b.uid, "STORE", "1", "+FLAGS", r"(\Flagged)"))[0] == "OK"
    await asyncio.wait_for(held.answered.wait(), SAY)
    on_mbx2 = await failed_over(c, hubs, sent)

    held.release()

    def told() -> list[bytes]:
        lines: list[bytes] = []
        while sum(line.endswith(b" EXPUNGE") for line in lines) < 2:
            line = idler.m.readline()
            assert line, "the front closed the connection"
            lines.append(line.rstrip())
        return lines

    lines = await asyncio.to_thread(told)
    counts = [int(line.split()[1]) for line in lines if line.endswith(b" EXISTS")]
    assert all(n <= 5 for n in counts), lines  # never more than the folder held
    assert (await asyncio.to_thread(idler.done)).split()[1] == b"OK"
    await as_on_mbx2(a, b, sent, raw, on_mbx2)


LATE = b"Subject: late\r\n\r\nits answer held past the failover\r\n"
WRITES = {  # a write whose answer (the old active's acknowledgement) is held
    "append": (rb"^PUT \S*/items/\S+/message", lambda m: m.append("INBOX", None, None, LATE)),
    "store": (rb"^POST \S*/items/flags", lambda m: m.uid("STORE", "2", "+FLAGS", r"(\Seen)")),
}


@pytest.mark.parametrize("write", sorted(WRITES))
async def test_a_write_acknowledged_by_the_old_active_then_lost_is_not_told_as_kept(lab, write):
    """A write mbx1 took and acknowledged, its answer held until mbx1 is killed and mbx2
    activated without it (lossy): the client is told what the new active holds.  An
    APPEND: OK with an APPENDUID that is the message on mbx2 (the front put it again under
    its item id: a new UID, above every one shown), never UID 6, which mbx1 gave it and
    lost.  A STORE: OK, and the flags told of the message are mbx2's (without it)."""
    c, hubs, front, proxy, ca = lab
    a, b, sent, raw = await lossy_tail(c, hubs, front, ca)
    pattern, command = WRITES[write]
    held, answer = await held_answer(proxy, pattern, command, a)
    await failed_over(c, hubs, sent)

    held.release()
    typ, data = await answer
    assert typ == "OK", data
    on_mbx2 = await listing(c, "mbx2")
    a_sees = await asyncio.to_thread(shown, a)
    if write == "append":
        told = int(re.search(rb"APPENDUID \d+ (\d+)\]", data[0]).group(1))
        assert told > 6 and told in on_mbx2, (data, on_mbx2)  # not mbx1's UID 6, lost
        assert a_sees[told][0] == LATE
        assert 6 not in a_sees
    else:  # the flags told last of UID 2 (sequence 2), in the answer or after: mbx2's
        told = [line for line in data if isinstance(line, bytes)]
        told += [line for line in untagged(a, "FETCH") if isinstance(line, bytes)]
        await asyncio.to_thread(noop, a)
        told += [line for line in untagged(a, "FETCH") if isinstance(line, bytes)]
        last = [line for line in told if line.startswith(b"2 (")][-1]
        assert b"\\Seen" not in last, told  # the session's cache holds what mbx2 has
        assert LATE not in [body for body, _ in a_sees.values()]
    assert not any(b"\\Seen" in f for _, f in a_sees.values()), a_sees
    await as_on_mbx2(a, b, sent, raw, on_mbx2)


@pytest.mark.parametrize("write", sorted(WRITES))
async def test_a_write_acknowledged_by_the_old_active_before_a_switchover_is_told_once(lab, write):
    """The same answer held past a switchover (nothing lost): the APPEND is told the UID
    mbx1 gave it, the message once on mbx2 under it (put again, the same item); the
    STORE's flags are told and kept."""
    c, hubs, front, proxy, ca = lab
    for n in (1, 2, 3):
        await asyncio.to_thread(deliver, hubs, n)
    await hubs.drained("hub1")
    a = await asyncio.to_thread(worker, front.port, ca)
    pattern, command = WRITES[write]
    held, answer = await held_answer(proxy, pattern, command, a)
    await converged(c, "DB1", "mbx1", ["mbx2"])
    switched = await asyncio.to_thread(
        c.node_cli, "db", "switchover", "DB1", "--to", "mbx2", "--json"
    )
    assert switched.returncode == 0, switched.stderr

    held.release()
    typ, data = await answer
    assert typ == "OK", data
    on_mbx2 = await listing(c, "mbx2")
    a_sees = await asyncio.to_thread(shown, a)
    assert sorted(a_sees) == sorted(on_mbx2)
    if write == "append":
        assert re.search(rb"APPENDUID \d+ 4\]", data[0]), data
        assert sorted(on_mbx2) == [1, 2, 3, 4] and a_sees[4][0] == LATE
    else:
        assert any(line.startswith(b"2 (FLAGS (\\Seen)") for line in data), data
        assert b"\\Seen" in a_sees[2][1] and "\\Seen" in on_mbx2[2][1]
    await asyncio.to_thread(a.logout)
