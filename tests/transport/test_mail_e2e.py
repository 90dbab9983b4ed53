"""Mail into the transport over real processes: a TLS cluster of three nodes and a
transport with its SMTP and LMTP listeners; Python's smtplib (STARTTLS, AUTH), swaks (SMTP
and LMTP) and `transport submit --file` as the senders.  Every 250'd message is in the
transport's queue file byte for byte (after the trace header it adds), then in its mailbox
on the active and on every passive copy, the same bytes (`GET …/items/{id}/message`); AUTH
is refused before TLS and with a wrong password."""

from __future__ import annotations

import asyncio
import shutil
import smtplib
import ssl
import subprocess
import sys

import pytest

from dag_common.api_types import item_id_for
from tests.cluster_harness import ROOT
from tests.replication_node.e2e import databases
from tests.tls_cluster import tls_cluster
from tests.transport.harness import queued_messages, tls_mail_hub

pytestmark = pytest.mark.slow

SECRET = "sender-secret-0123456789"
OUTSIDE = "127.0.0.2"  # a client address outside the trusted networks (127.0.0.1 alone)


@pytest.fixture
async def lab(tmp_path):
    (tmp_path / "sender.secret").write_text(SECRET + "\n")
    (tmp_path / "watcher.secret").write_text(SECRET[::-1] + "\n")
    cluster, _, ca = tls_cluster(
        tmp_path,
        nodes=[("mbx1", "redmond"), ("mbx2", "redmond"), ("mbx3", "dublin")],
        databases=databases(),
        certs=("hub1",),
        defaults={"failover_after": None},
    )
    cluster.config["credentials"] = [
        {"name": "sender", "roles": ["store"], "file": str(tmp_path / "sender.secret")},
        {"name": "watcher", "roles": ["monitor"], "file": str(tmp_path / "watcher.secret")},
    ]
    hubs = tls_mail_hub(cluster)
    await cluster.start()
    await cluster.wait_status("mbx2", "DB2", "Mounted")
    await cluster.wait_status("mbx1", "DB1", "Mounted")
    await cluster.ok("PUT", "mbx2", "/v1/databases/DB2/mailboxes/bob")
    await cluster.ok("PUT", "mbx1", "/v1/databases/DB1/mailboxes/alice")
    await hubs.start("hub1")
    try:
        yield cluster, hubs, ca[0]
    finally:
        hubs.stop_all()
        await cluster.close()


def queued(cluster, hub: str = "hub1") -> dict[str, tuple[bytes, list[str]]]:
    """Message id -> (its bytes, its recipients), read from the transport's queue file."""
    return queued_messages(cluster.root / hub / "queue.db")


COPIES = {"DB1": ("mbx1", "mbx2", "mbx3"), "DB2": ("mbx2", "mbx3")}  # actives first
HOME = {"alice": "DB1", "bob": "DB2"}


async def on_every_copy(cluster, message_id: str, stored: bytes, *mailboxes: str) -> None:
    """The message delivered to each of `mailboxes`: the bytes the transport queued, on the
    database's active and, once its log is rolled and replayed, on every passive copy."""
    item = item_id_for(message_id)
    for mailbox in mailboxes:
        db = HOME[mailbox]
        path = f"/v1/databases/{db}/mailboxes/{mailbox}/items/{item}/message"

        async def there(node: str, path: str = path) -> bool:
            status, body = await cluster.call("GET", node, path)
            return status == 200 and body == stored

        active, *passives = COPIES[db]
        await cluster.wait_for(f"{message_id} delivered to {mailbox} on {active}",
                               lambda active=active: there(active))  # fmt: skip
        await cluster.ok("POST", active, f"/v1/databases/{db}/roll-log")
        for node in passives:
            await cluster.wait_for(f"{message_id} in {mailbox} on {node}",
                                   lambda node=node: there(node))  # fmt: skip


def mime(message_id: str) -> bytes:
    """A MIME message with an 8-bit part, an attachment and an encoded subject."""
    return (
        "From: Ann <ann@example.org>\r\nTo: bob@example.org\r\n"
        f"Subject: =?utf-8?q?R=C3=A9union?=\r\nMessage-ID: {message_id}\r\n"
        "MIME-Version: 1.0\r\nContent-Type: multipart/mixed; boundary=b1\r\n\r\n"
        "--b1\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Transfer-Encoding: 8bit"
        "\r\n\r\nÀ demain, ünd .dots\r\n.\r\n..\r\n"
        "--b1\r\nContent-Type: application/octet-stream\r\nContent-Transfer-Encoding: base64"
        "\r\n\r\nAAECAwQFBgcICQ==\r\n--b1--\r\n"
    ).encode()


async def test_smtplib_with_starttls_and_auth_and_its_refusals(lab):
    cluster, hubs, ca = lab
    port = hubs.smtp_ports["hub1"]
    raw = mime("<smtplib-1@example.org>")

    def session() -> list[tuple[int, str]]:
        said = []
        with smtplib.SMTP("127.0.0.1", port, source_address=(OUTSIDE, 0)) as conn:
            conn.ehlo("client.test")
            assert "auth" not in conn.esmtp_features, "no AUTH offered before TLS"
            said.append(conn.mail("ann@example.org"))  # outside, without AUTH
            conn.rset()
            said.append(conn.docmd("AUTH", "PLAIN AHNlbmRlcgB3cm9uZw=="))  # before TLS
            conn.starttls(context=ssl.create_default_context(cafile=str(ca)))
            conn.ehlo("client.test")
            assert conn.esmtp_features["auth"].split() == ["LOGIN", "PLAIN"]
            try:
                conn.login("sender", "a-wrong-password-000000")
            except smtplib.SMTPAuthenticationError as exc:
                said.append((exc.smtp_code, exc.smtp_error))
            try:
                conn.login("watcher", SECRET[::-1])  # a credential without `store`
            except smtplib.SMTPAuthenticationError as exc:
                said.append((exc.smtp_code, exc.smtp_error))
            said.append(conn.login("sender", SECRET))
            refused = conn.sendmail("ann@example.org", ["bob@example.org", "alice"], raw)
            assert refused == {}
        return [(code, text.decode().split(" ")[0]) for code, text in said]

    said = await asyncio.to_thread(session)
    assert said == [(530, "5.7.0"), (538, "5.7.11"), (535, "5.7.8"), (535, "5.7.8"),
                    (235, "2.7.0")]  # fmt: skip
    stored, to = queued(cluster)["<smtplib-1@example.org>"]
    assert to == ["bob", "alice"]
    head, _, rest = stored.partition(b"\r\n\t")
    assert head == f"Received: from client.test ([{OUTSIDE}])".encode()
    assert rest.startswith(b"by hub1.test with ESMTPSA id <smtplib-1@example.org>;")
    assert stored.endswith(b"\r\n" + raw), "the message byte for byte after its trace header"
    await on_every_copy(cluster, "<smtplib-1@example.org>", stored, "bob", "alice")
    # The transport (STARTTLS, its calls to the nodes' HTTPS) on uvloop's loop, the nodes
    # on asyncio's: each process's default (dag_common/event_loop.py)
    assert "(event loop: uvloop)" in hubs.log("hub1")
    for node in COPIES["DB1"]:
        assert "(event loop: asyncio)" in (cluster.root / f"{node}.log").read_text()


def swaks(*args: str) -> subprocess.CompletedProcess[str]:
    binary = shutil.which("swaks")
    assert binary, "swaks is missing: install Debian's 'swaks' package (make system-deps does)"
    return subprocess.run([binary, "--silent", "1", *args], capture_output=True, text=True,
                          timeout=60)  # fmt: skip


async def test_swaks_over_smtp_with_tls_and_auth_and_over_lmtp(lab, tmp_path):
    cluster, hubs, ca = lab
    eml = tmp_path / "m.eml"  # swaks ends the data with its own CRLF before the dot
    eml.write_bytes(mime("<swaks-1@example.org>").removesuffix(b"\r\n"))
    sent = await asyncio.to_thread(
        swaks, "--server", f"127.0.0.1:{hubs.smtp_ports['hub1']}", "--local-interface", OUTSIDE,
        "--tls", "--tls-ca-path", str(ca), "--auth", "PLAIN", "--auth-user", "sender",
        "--auth-password", SECRET, "--from", "ann@example.org", "--to", "bob@example.org",
        "--data", f"@{eml}",
    )  # fmt: skip
    assert sent.returncode == 0, sent.stdout + sent.stderr
    stored, to = queued(cluster)["<swaks-1@example.org>"]
    assert to == ["bob"] and stored.endswith(b"\r\n" + eml.read_bytes() + b"\r\n")
    assert b"with ESMTPSA id <swaks-1@example.org>\r\n\tfor <bob@example.org>;" in stored

    eml.write_bytes(mime("<swaks-2@example.org>").removesuffix(b"\r\n"))
    lmtp = await asyncio.to_thread(
        swaks, "--protocol", "LMTP", "--server", f"127.0.0.1:{hubs.lmtp_ports['hub1']}",
        "--from", "ann@example.org", "--to", "bob@example.org,nobody@example.org,alice",
        "--data", f"@{eml}", "--silent", "0",
    )  # fmt: skip
    # swaks goes on past a refused recipient, and reads one reply per accepted one
    assert "<** 550 5.1.1 <nobody@example.org>: no such mailbox" in lmtp.stdout, lmtp.stdout
    replies = [line for line in lmtp.stdout.splitlines() if "queued as" in line]
    assert len(replies) == 2 and all(
        r.startswith("<~  250 2.0.0") or r.startswith("<-  250 2.0.0") for r in replies
    ), replies
    stored, to = queued(cluster)["<swaks-2@example.org>"]
    assert to == ["bob", "alice"] and stored.endswith(b"\r\n" + eml.read_bytes() + b"\r\n")
    await on_every_copy(cluster, "<swaks-2@example.org>", stored, "bob", "alice")


async def test_transport_submit_file_queues_the_message_as_it_is(lab, tmp_path):
    cluster, _, _ = lab
    eml = tmp_path / "unix.eml"
    unix = mime("<file-1@example.org>").replace(b"\r\n", b"\n")
    eml.write_bytes(unix)
    env = {**cluster.env(), "DG_CREDENTIAL_FILE": str(tmp_path / "sender.secret")}

    def submit() -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "transport.cli", "submit", "--config",
             str(cluster.config_path), "--via", "hub1", "--to", "bob", "--file", str(eml)],
            capture_output=True, text=True, env=env, cwd=ROOT, timeout=60,
        )  # fmt: skip

    done = await asyncio.to_thread(submit)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "<file-1@example.org>: accepted"
    again = await asyncio.to_thread(submit)
    assert again.stdout.strip().endswith("already accepted (nothing queued again)")
    stored, to = queued(cluster)["<file-1@example.org>"]
    assert to == ["bob"] and stored.endswith(b"\r\n" + unix.replace(b"\n", b"\r\n"))
    assert b"with HTTPS id <file-1@example.org>" in stored
