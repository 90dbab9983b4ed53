"""The IMAP front over real processes: two nodes serving DB1 over TLS, a transport with its
LMTP listener, and `python -m imap_front serve`; Python's imaplib (STARTTLS, LOGIN) as the
client.  A message appended or delivered is fetched byte for byte, the same bytes the
node's /message route gives; flags, copies, moves, expunges and folders reach the node;
bad input is answered without a traceback."""

from __future__ import annotations

import asyncio
import imaplib
import re
import smtplib
import ssl

import pytest

from tests.cluster_harness import wait_until
from tests.imap_front.harness import Front, raw_session
from tests.tls_cluster import db1_on, tls_cluster
from tests.transport.harness import tls_mail_hub

pytestmark = pytest.mark.slow

PASSWORD = "alice-imap-password"
BOX = "/v1/databases/DB1/mailboxes/alice"
MIME = (
    b"From: Bob Example <bob@example.org>\r\nTo: alice@example.org\r\n"
    b"Subject: =?utf-8?q?Gr=C3=BC=C3=9Fe?= report\r\nDate: Mon, 02 Nov 2026 10:00:00 +0000\r\n"
    b"Message-ID: <m1@example.org>\r\nMIME-Version: 1.0\r\n"
    b'Content-Type: multipart/mixed; boundary="b1"\r\n\r\n'
    b"--b1\r\nContent-Type: text/plain; charset=iso-8859-1\r\n"
    b"Content-Transfer-Encoding: 8bit\r\n\r\nHello \xe4 (Latin-1, not UTF-8)\r\n"
    b"--b1\r\nContent-Type: application/pdf; name=a.pdf\r\n"
    b"Content-Transfer-Encoding: base64\r\n\r\nJVBERi0xLjQK\r\n--b1--\r\n"
)


@pytest.fixture
async def lab(tmp_path):
    cluster, _, ca = tls_cluster(
        tmp_path,
        **db1_on("mbx1", "mbx2"),
        certs=("hub1", "imap1"),
        defaults={"failover_after": None},
    )
    hubs = tls_mail_hub(cluster)
    front = Front(cluster, "imap1", {"alice": ("alice", PASSWORD)},
                  max_line=8192, max_literal=200_000)  # fmt: skip
    await cluster.start()
    try:
        await cluster.wait_status("mbx1", "DB1", "Mounted")
        await cluster.ok("PUT", "mbx1", BOX)
        await hubs.start("hub1")
        await front.start()
        yield cluster, hubs, front, ca[0]
    finally:
        front.stop()
        hubs.stop_all()
        await cluster.close()
    assert "Traceback" not in front.log(), front.log()[-3000:]


def tls(ca) -> ssl.SSLContext:
    return ssl.create_default_context(cafile=str(ca))


def logged_in(port: int, ca) -> imaplib.IMAP4:
    m = imaplib.IMAP4("127.0.0.1", port)
    m.starttls(tls(ca))
    m.login("alice", PASSWORD)
    return m


async def node_message(cluster, item_id: str) -> bytes:
    async with cluster.session.get(f"{cluster.url('mbx1')}{BOX}/items/{item_id}/message") as r:
        assert r.status == 200
        return await r.read()


async def node_items(cluster, folder: str) -> list[list]:
    body = await cluster.ok("GET", "mbx1", f"{BOX}/folders/{folder}/uids")
    return body["messages"]


async def test_imaplib_over_starttls_reaches_the_node_and_back(lab):
    cluster, _, front, ca = lab

    def before_tls() -> list:
        said = []
        m = imaplib.IMAP4("127.0.0.1", front.port)
        said.append(sorted(m.capabilities))
        try:
            m.login("alice", PASSWORD)
        except imaplib.IMAP4.error as exc:
            said.append(str(exc))
        m.starttls(tls(ca))
        said.append(sorted(m.capabilities))
        try:
            m.login("alice", "not-the-password")
        except imaplib.IMAP4.error as exc:
            said.append(str(exc))
        m.logout()
        return said

    caps, clear, after, wrong = await asyncio.to_thread(before_tls)
    assert "LOGINDISABLED" in caps and "STARTTLS" in caps
    assert not any(c.startswith("AUTH=") for c in caps), "no login offered on loopback in clear"
    assert "LOGIN is disabled" in clear or "LOGINDISABLED" in clear
    assert "LOGINDISABLED" not in after and "AUTH=PLAIN" in after
    assert "AUTHENTICATIONFAILED" in wrong or "Invalid" in wrong

    def session() -> dict:
        out: dict = {}
        m = logged_in(front.port, ca)
        out["create"] = m.create("Work")[0]
        out["append"] = m.append("INBOX", r"(\Flagged)", None, MIME)
        out["append2"] = m.append("INBOX", None, None, b"Subject: two\r\n\r\nsecond\r\n")
        typ, data = m.select("INBOX")
        out["select"] = (typ, data, m.untagged_responses.get("UIDVALIDITY"),
                         m.untagged_responses.get("UIDNEXT"))  # fmt: skip
        out["list"] = m.list()[1]
        typ, data = m.uid("FETCH", "1:*", "(UID FLAGS RFC822.SIZE INTERNALDATE BODY.PEEK[])")
        out["fetch"] = data
        out["store"] = m.uid("STORE", "1", "+FLAGS", r"(\Seen)")
        out["flags"] = m.uid("FETCH", "1:*", "(FLAGS)")[1]
        out["copy"] = m.uid("COPY", "1", "Work")
        out["copyuid"] = m.response("COPYUID")
        out["move"] = m.uid("MOVE", "2", "Work")
        out["status"] = m.status("Work", "(MESSAGES UIDNEXT UIDVALIDITY UNSEEN)")
        out["rename"] = m.rename("Work", "Jobs")[0]
        m.select("Jobs")
        out["jobs"] = m.uid("FETCH", "1:*", "(FLAGS BODY.PEEK[])")[1]
        m.uid("STORE", "1", "+FLAGS", r"(\Deleted)")
        out["expunge"] = m.expunge()
        out["after_expunge"] = m.uid("FETCH", "1:*", "(FLAGS)")[1]
        m.select("INBOX")
        out["create_child"] = m.create("Jobs/Old")[0]
        out["delete_parent"] = m.delete("Jobs")
        out["delete_child"] = m.delete("Jobs/Old")[0]
        out["list_after"] = m.list()[1]
        m.logout()
        return out

    out = await asyncio.to_thread(session)
    assert out["create"] == "OK"
    appended = re.search(rb"APPENDUID (\d+) (\d+)", out["append"][1][0])
    assert appended and int(appended.group(2)) == 1, out["append"]
    assert out["select"][0] == "OK" and out["select"][1] == [b"2"]
    assert out["select"][2] == [appended.group(1)] and out["select"][3] == [b"3"]
    names = [line.rpartition(b'"/" ')[2] for line in out["list"]]
    assert b"INBOX" in names and b"Work" in names and b"Inbox" not in names, out["list"]

    # BODY[] byte for byte, the node's /message the same bytes
    first, second = out["fetch"][0], out["fetch"][2]
    assert first[1] == MIME
    assert b"UID 1 " in first[0] and rb"FLAGS (\Flagged)" in first[0]
    assert b"RFC822.SIZE %d" % len(MIME) in first[0] and b"INTERNALDATE" in first[0]
    assert second[1] == b"Subject: two\r\n\r\nsecond\r\n"
    listed = await node_items(cluster, "Inbox")
    by_uid = {row[0]: row for row in listed}
    assert await node_message(cluster, by_uid[1][1]) == MIME
    assert sorted(by_uid[1][2]) == ["\\Flagged", "\\Seen"], "STORE reached the node"

    assert out["store"][0] == "OK"
    assert any(rb"UID 1 FLAGS (\Flagged \Seen)" in f or rb"FLAGS (\Flagged \Seen) UID 1" in f
               for f in out["flags"]), out["flags"]  # fmt: skip
    assert out["copy"][0] == "OK" and out["copyuid"][1][0].split()[1:] == [b"1", b"1"]
    assert out["move"][0] == "OK"
    assert b"MESSAGES 2" in out["status"][1][0] and b"UIDNEXT 3" in out["status"][1][0]
    assert out["rename"] == "OK"
    jobs = [f for f in out["jobs"] if isinstance(f, tuple)]
    assert {f[1] for f in jobs} == {MIME, b"Subject: two\r\n\r\nsecond\r\n"}
    assert out["expunge"][0] == "OK" and out["expunge"][1] == [b"1"]
    assert len([f for f in out["after_expunge"] if f]) == 1
    assert out["create_child"] == "OK"
    assert out["delete_parent"][0] == "NO"
    assert out["delete_child"] == "OK"
    assert await node_items(cluster, "Inbox") == [by_uid[1][:1] + by_uid[1][1:2] + by_uid[1][2:]]
    jobs_on_node = await node_items(cluster, "Jobs")
    assert [row[0] for row in jobs_on_node] == [2], "the copy expunged, the moved one kept"


async def test_a_message_delivered_by_lmtp_is_fetched_byte_for_byte(lab):
    cluster, hubs, front, ca = lab
    sent = MIME.replace(b"<m1@", b"<lmtp-1@")

    def deliver() -> None:
        with smtplib.LMTP("127.0.0.1", hubs.lmtp_ports["hub1"]) as lmtp:
            lmtp.sendmail("bob@example.org", ["alice"], sent)

    await asyncio.to_thread(deliver)

    async def delivered() -> bool:
        return len(await node_items(cluster, "Inbox")) == 1

    await wait_until("the LMTP message in alice's Inbox", delivered, timeout=60, every=0.05)

    def fetch() -> list:
        m = logged_in(front.port, ca)
        m.select("INBOX", readonly=True)
        data = m.uid("FETCH", "1:*", "(BODY.PEEK[] RFC822.SIZE)")[1]
        m.logout()
        return data

    data = await asyncio.to_thread(fetch)
    body = data[0][1]
    assert body.endswith(b"\r\n" + sent), "the message after the transport's Received header"
    assert body.startswith(b"Received: from ")
    item_id = (await node_items(cluster, "Inbox"))[0][1]
    assert await node_message(cluster, item_id) == body


async def test_bad_input_is_answered_and_nothing_is_written(lab):
    cluster, _, front, _ = lab
    long_line, closed = await asyncio.to_thread(
        raw_session, front.port, b"a1 NOOP " + b"x" * 20_000 + b"\r\n"
    )
    assert b"* BYE [TOOBIG] Line too long." in long_line and closed
    plus, closed = await asyncio.to_thread(raw_session, front.port, b"a2 LOGIN {5000000+}\r\nxx")
    assert plus.startswith(b"a2 BAD [TOOBIG]") and closed, plus
    sync, closed = await asyncio.to_thread(
        raw_session, front.port, b"a3 APPEND INBOX {5000000}\r\na4 NOOP\r\n"
    )
    assert sync.startswith(b"a3 NO [TOOBIG]") and b"a4 OK" in sync and not closed, sync
    malformed, closed = await asyncio.to_thread(raw_session, front.port, b"a5 FROB (\r\n")
    assert malformed.startswith(b"a5 BAD") and not closed
    proc = front.proc
    assert proc is not None and proc.poll() is None, "the front serves on"
    assert await node_items(cluster, "Inbox") == [], "nothing written"
