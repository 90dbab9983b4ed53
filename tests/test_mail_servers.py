"""The mail servers the tests and bench/lmtp.py start (tests/mail_servers.py) do what those
rely on: a private Postfix relays what it is given by SMTP to the LMTP address named, here a
private Dovecot's, which stores each message once, as it came; a message the LMTP server could
not take stays in Postfix's queue and goes at the retry `postqueue -f` asks for; and a
server stopped is gone (its port closed, its files removed)."""

from __future__ import annotations

import imaplib
import smtplib
import socket
import ssl
from email.message import EmailMessage
from email.policy import SMTP
from email.utils import formatdate

import pytest

from tests.cluster_harness import wait_until
from tests.mail_servers import HOST, MailServers
from tests.pki import issue, make_ca
from tests.replication_node.test_node_identity_e2e import NODE_CERT
from tools.ports import free_port

pytestmark = pytest.mark.slow

ALICE, BOB = "alice@test.local", "bob@test.local"


def message(message_id: str, *to: str) -> bytes:
    """A MIME message with a text part and an attachment, as a mail client sends it."""
    msg = EmailMessage()
    msg["From"] = "sender@example.org"
    msg["To"] = ", ".join(to)
    msg["Subject"] = f"Report {message_id} — été"
    msg["Message-ID"] = f"<{message_id}@example.org>"
    msg["Date"] = formatdate()  # Postfix would add one missing (a client gives it)
    msg.set_content("Hello,\n\nthe figures are attached.\n")
    msg.add_attachment(bytes(range(256)) * 8, maintype="application", subtype="octet-stream",
                       filename="figures.bin")  # fmt: skip
    return msg.as_bytes(policy=SMTP)


def submit(port: int, raw: bytes, *to: str) -> None:
    with smtplib.SMTP(HOST, port, timeout=30) as smtp:
        refused = smtp.sendmail("sender@example.org", list(to), raw)
    assert refused == {}


def refuses(port: int) -> bool:
    try:
        socket.create_connection((HOST, port), timeout=2).close()
    except ConnectionRefusedError:
        return True
    return False


async def test_postfix_relays_to_dovecot_by_lmtp(mail_servers: MailServers) -> None:
    dovecot = mail_servers.dovecot([ALICE, BOB])
    postfix = mail_servers.postfix((HOST, dovecot.port))
    raw = message("m1", ALICE, BOB)

    submit(postfix.port, raw, ALICE, BOB)

    await wait_until("both delivered", lambda: all(dovecot.messages(u) for u in (ALICE, BOB)),
                     timeout=60)  # fmt: skip
    await wait_until("postfix's queue empty", lambda: postfix.queued() == [], timeout=60)
    for user in (ALICE, BOB):
        [stored] = dovecot.messages(user)
        # the message as it came, below the trace headers Postfix and Dovecot put on top
        assert stored.replace(b"\n", b"\r\n").endswith(raw), stored[:2000]
        assert b"by postfix.test (Postfix)" in stored
    assert "status=sent" in postfix.log()


async def test_postfix_keeps_what_lmtp_could_not_take_until_a_retry(
    mail_servers: MailServers,
) -> None:
    lmtp_port = free_port()  # nothing listens there yet
    postfix = mail_servers.postfix((HOST, lmtp_port), minimal_backoff_time="300s",
                                   maximal_backoff_time="300s", queue_run_delay="300s")  # fmt: skip
    raw = message("m2", ALICE)

    submit(postfix.port, raw, ALICE)
    await wait_until("the message deferred", lambda: "status=deferred" in postfix.log(),
                     timeout=60)  # fmt: skip
    assert len(postfix.queued()) == 1

    dovecot = mail_servers.dovecot([ALICE], port=lmtp_port)
    postfix.flush()  # not the 300 s backoff: the retry asked for now
    await wait_until("delivered on retry", lambda: dovecot.messages(ALICE), timeout=60)
    await wait_until("postfix's queue empty", lambda: postfix.queued() == [], timeout=60)
    [stored] = dovecot.messages(ALICE)
    assert stored.replace(b"\n", b"\r\n").endswith(raw)


def test_a_stopped_server_is_gone(mail_servers: MailServers) -> None:
    dovecot = mail_servers.dovecot([ALICE])
    postfix = mail_servers.postfix((HOST, dovecot.port))
    for server in (postfix, dovecot):
        server.stop()
        assert server.proc.returncode is not None
        assert refuses(server.port)
        assert not server.root.exists()
        assert (mail_servers.logs / server.log_path.name).exists()


def test_dovecot_serves_its_maildirs_over_imap_after_starttls(
    mail_servers: MailServers, tmp_path
) -> None:
    """bench/imap.py's anchor: a message delivered by LMTP is read back over IMAP after
    STARTTLS (Dovecot would let a loopback client log in without it, a peer on its own
    address counting as secured: the bench's clients always start TLS, as the front
    requires)."""
    ca = make_ca(tmp_path, "ca")
    cert = issue(tmp_path, "dovecot", ca, NODE_CERT.format(name="dovecot"))
    dovecot = mail_servers.dovecot([ALICE], imap_port=0, password="pw-alice", tls=cert)
    raw = message("m4", ALICE)
    with smtplib.LMTP(HOST, dovecot.port) as lmtp:
        assert lmtp.sendmail("sender@example.org", [ALICE], raw) == {}

    m = imaplib.IMAP4(HOST, dovecot.imap_port)
    m.starttls(ssl.create_default_context(cafile=str(ca[0])))
    m.login(ALICE, "pw-alice")
    assert m.select("INBOX")[1] == [b"1"]
    typ, data = m.uid("FETCH", "1:*", "(BODY.PEEK[])")
    assert typ == "OK" and data[0][1].endswith(raw), data[0][1][:500]
    m.logout()
