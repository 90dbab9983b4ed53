"""The front's bounds over real processes (two TLS nodes and `python -m imap_front serve`):
ENABLE and NAMESPACE, implicit TLS on a port of its own, failed logins slowed per address
and the connection closed after three, sessions bounded per front (`* BYE [LIMIT]`) and
per user (`NO [LIMIT]`), a silent client logged out, and odd input answered with its tag,
never a traceback (the fixture reads the front's log after each test)."""

from __future__ import annotations

import asyncio
import imaplib
import socket
import time

import pytest

from tests.cluster_harness import wait_until
from tests.imap_front.harness import Front, raw_session
from tests.imap_front.test_imap_e2e import BOX, PASSWORD, logged_in, node_items, tls
from tests.tls_cluster import db1_on, tls_cluster
from tools.ports import free_port

pytestmark = pytest.mark.slow

DELAY = 0.2  # the first failed login's wait


@pytest.fixture
async def lab(tmp_path):
    cluster, _, ca = tls_cluster(
        tmp_path, **db1_on("mbx1", "mbx2"), certs=("imap1",), defaults={"failover_after": None}
    )
    front = Front(
        cluster, "imap1", {"alice": ("alice", PASSWORD), "bob": ("bob", "bob-password")},
        tls_port=free_port(), max_sessions=4, max_sessions_per_user=2, idle_timeout=8,
    )  # fmt: skip
    front.invalid_login_delay = DELAY
    cluster.config["imap"]["invalid_login_delay"] = DELAY
    cluster.write_config()
    await cluster.start()
    try:
        await cluster.wait_status("mbx1", "DB1", "Mounted")
        await cluster.ok("PUT", "mbx1", BOX)
        await cluster.ok("PUT", "mbx1", "/v1/databases/DB1/mailboxes/bob")
        await front.start()
        yield cluster, front, ca[0]
    finally:
        front.stop()
        await cluster.close()
    log = front.log()
    assert "Traceback" not in log and "SERVERBUG" not in log, log[-3000:]


def tls_port(front: Front) -> int:
    return front.cluster.config["imap"]["tls_port"]


async def test_implicit_tls_enable_and_namespace(lab):
    _, front, ca = lab

    def session() -> dict:
        m = imaplib.IMAP4_SSL("127.0.0.1", tls_port(front), ssl_context=tls(ca))
        out = {"before": sorted(m.capabilities)}
        m.login("alice", PASSWORD)
        out["after"] = m.capability()[1][0].split()
        out["namespace"] = m.namespace()
        out["enable"] = m._simple_command("ENABLE", "CONDSTORE", "UTF8=ACCEPT")
        out["enabled"] = m.untagged_responses.pop("ENABLED", None)
        try:
            out["enable_none"] = m._simple_command("ENABLE")[0]
        except imaplib.IMAP4.error as exc:
            out["enable_none"] = str(exc)
        out["select"] = m.select("INBOX")[0]
        m.logout()
        return out

    out = await asyncio.to_thread(session)
    assert "STARTTLS" not in out["before"] and "LOGINDISABLED" not in out["before"]
    assert "AUTH=PLAIN" in out["before"]
    assert b"ENABLE" in out["after"] and b"NAMESPACE" in out["after"]
    assert out["namespace"] == ("OK", [b'(("" "/")) NIL NIL'])
    assert b"CONDSTORE" in out["after"]
    assert out["enable"][0] == "OK" and out["enabled"] == [b"CONDSTORE"], out
    assert "BAD" in out["enable_none"] and out["select"] == "OK"

    # clear text on the TLS port: the handshake fails (no traceback: the fixture reads the
    # log), the front serves on
    with socket.create_connection(("127.0.0.1", tls_port(front))) as s:
        s.settimeout(30)
        s.sendall(b"a1 CAPABILITY\r\n")
        while s.recv(4096):
            pass
    greeting, _ = await asyncio.to_thread(raw_session, front.port, b"a1 LOGOUT\r\n")
    assert b"* BYE" in greeting


def failed_login(m: imaplib.IMAP4) -> tuple[str, float]:
    start = time.monotonic()
    try:
        m.login("alice", "wrong")
    except imaplib.IMAP4.abort as exc:
        return f"abort: {exc}", time.monotonic() - start
    except imaplib.IMAP4.error as exc:
        return str(exc), time.monotonic() - start
    raise AssertionError("a wrong password logged in")


async def test_failed_logins_wait_longer_per_address_and_close_after_three(lab):
    _, front, ca = lab

    def attempts() -> list:
        m = imaplib.IMAP4("127.0.0.1", front.port)
        m.starttls(tls(ca))
        said = [failed_login(m) for _ in range(3)]
        try:
            m.noop()
            said.append(("still open", 0.0))
        except (imaplib.IMAP4.abort, OSError):
            said.append(("closed", 0.0))
        again = imaplib.IMAP4_SSL("127.0.0.1", tls_port(front), ssl_context=tls(ca))
        said.append(failed_login(again))  # another connection, the same address
        start = time.monotonic()
        again.login("alice", PASSWORD)
        said.append(("good", time.monotonic() - start))
        again.logout()
        return said

    said = await asyncio.to_thread(attempts)
    (first, t1), (_, t2), (third, t3), (after, _), (_, t4), (good, _) = said
    assert "AUTHENTICATIONFAILED" in first or "Invalid" in first
    assert t1 >= DELAY and t2 >= 2 * DELAY and t3 >= 4 * DELAY, said
    assert "abort" in third and "Too many failed logins" in third and after == "closed", said
    assert t4 >= 8 * DELAY, "the wait follows the address to a new connection"
    assert good == "good"
    assert front.log().count("failed login for 'alice' from 127.0.0.1") == 4


def greet(port: int) -> tuple[socket.socket, bytes]:
    s = socket.create_connection(("127.0.0.1", port))
    s.settimeout(20)
    return s, s.recv(4096)


async def test_sessions_are_bounded_per_user_and_per_front(lab):
    _, front, ca = lab

    def per_user() -> list:
        first, second = logged_in(front.port, ca), logged_in(front.port, ca)
        third = imaplib.IMAP4("127.0.0.1", front.port)
        third.starttls(tls(ca))
        said = []
        try:
            third.login("alice", PASSWORD)
            said.append("logged in")
        except imaplib.IMAP4.error as exc:
            said.append(str(exc))
        bob = imaplib.IMAP4("127.0.0.1", front.port)
        bob.starttls(tls(ca))
        said.append(bob.login("bob", "bob-password")[0])  # another user is not counted
        bob.logout()
        first.logout()
        for _ in range(200):  # the front sees the logout when the connection ends
            try:
                said.append(third.login("alice", PASSWORD)[0])
                break
            except imaplib.IMAP4.error as exc:
                assert "LIMIT" in str(exc)
        second.logout()
        third.logout()
        return said

    said = await asyncio.to_thread(per_user)
    assert "[LIMIT]" in said[0] and said[1:] == ["OK", "OK"], said

    held = []
    try:
        for _ in range(4):
            s, greeting = greet(front.port)
            held.append(s)
            assert greeting.startswith(b"* OK"), greeting
        refused, said = greet(front.port)
        refused.close()
        assert said == b"* BYE [LIMIT] Too many sessions on this front.\r\n", said
    finally:
        for s in held:
            s.close()

    async def greets_again() -> bool:
        s, greeting = await asyncio.to_thread(greet, front.port)
        s.close()
        return greeting.startswith(b"* OK")

    await wait_until("a place in the front again", greets_again, timeout=30, every=0.1)


async def test_a_silent_client_is_logged_out_and_odd_input_never_reaches_a_traceback(lab):
    cluster, front, ca = lab

    def silent() -> bytes:
        s, _ = greet(front.port)
        with s:
            s.settimeout(60)
            return s.recv(4096)  # nothing sent: the front speaks first, after idle_timeout

    start = time.monotonic()
    assert await asyncio.to_thread(silent) == b"* BYE Autologout; idle for too long.\r\n"
    assert time.monotonic() - start >= 8

    odd = [
        b"\x00\xff\xfe garbage\r\n", b"\r\n", b"a\r\n", b"a ENABLE X\r\n", b"a NAMESPACE\r\n",
        b'a LOGIN "unterminated\r\n', b"a AUTHENTICATE PLAIN\r\n*\r\n", b"a LOGIN {3}\r\n",
        b"* CAPABILITY\r\n", b"a" * 200 + b" NOOP\r\n",
    ]  # fmt: skip
    for line in odd:
        said, _ = await asyncio.to_thread(raw_session, front.port, line, quiet=0.5)
        assert b"SERVERBUG" not in said, (line, said)

    def authenticated() -> list[bytes]:
        m = logged_in(front.port, ca)
        m.select("INBOX")
        answers = []
        for i, line in enumerate([
            b"ENABLE", b"ENABLE (X)", b"NAMESPACE x", b"UID FETCH 1:* (BODY[HEADER.FIELDS (",
            b'SELECT "\xff\xfe"', b"SEARCH CHARSET X-NOPE FOO", b"STORE 1:* FLAGS (\\Foo",
            b'CREATE ""', b'RENAME INBOX INBOX', b"FETCH 4294967296 FLAGS", b"UID STORE * +FLAGS x",
            b'CREATE "a//b"', b'DELETE "nope"', b"COPY 1:* nope", b"EXPUNGE extra",
        ]):  # fmt: skip
            tag = b"z%d" % i
            m.send(tag + b" " + line + b"\r\n")
            while not (reply := m.readline()).startswith(tag + b" "):
                assert not reply.startswith(b"* BYE"), (line, reply)
            answers.append(reply)
            m.noop()  # pymap closes after 5 BADs in a row
        m.logout()
        return answers

    answers = await asyncio.to_thread(authenticated)
    assert all(a.split(b" ")[1] in (b"OK", b"NO", b"BAD") for a in answers), answers
    assert await node_items(cluster, "Inbox") == [], "nothing written"
    proc = front.proc
    assert proc is not None and proc.poll() is None
