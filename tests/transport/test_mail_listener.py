"""The SMTP and LMTP listeners in process: a real aiosmtpd server on port 0, the real queue
in a file, Python's smtplib as the client; the mailbox directory a small fake whose answers
the test sets (it can be made unreadable).  Every refusal asserts its code and that nothing
was queued; every 250 that the message is in the queue's file as it came."""

from __future__ import annotations

import asyncio
import smtplib
import socket
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from dag_common.clock import SystemClock
from dag_common.config import ClusterConfig, MailSettings, NodeConfig
from dag_common.credentials import Credential, Credentials, Role, digest
from dag_common.errors import ClusterStoreError
from tests.prometheus import value
from tests.transport.harness import queued_messages
from transport.delivery import Deliverer
from transport.directory import CachedDirectory
from transport.mail_listener import Listener, MailService
from transport.metrics import TransportMetrics
from transport.queue import QueueStore
from transport.retry import RetryPolicy
from transport.service import Transport

SECRET = "sender-secret-0123456789"
SMALL = 4096  # DB2's max_item_size
TRACE = b"Received: from client.test ([127.0.0.1])\r\n"


@dataclass
class Directory:
    """The mailbox directory, as the test sets it."""

    mailboxes: dict[str, str] = field(default_factory=dict)
    broken: bool = False

    async def mailbox_database(self, mailbox: str) -> str | None:
        if self.broken:
            raise ClusterStoreError("the cluster store is away (the test)")
        return self.mailboxes.get(mailbox)

    fresh = mailbox_database


@dataclass
class Lab:
    ports: dict[Listener, int]
    queue: Path
    directory: Directory
    metrics: TransportMetrics
    store: QueueStore
    deliverer: Deliverer

    def queued(self) -> dict[str, tuple[bytes, list[str]]]:
        """Message id -> (its bytes, its recipients), as the queue's file holds them."""
        return queued_messages(self.queue)


def listening() -> socket.socket:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    sock.setblocking(False)
    return sock


@pytest.fixture
async def lab(tmp_path) -> AsyncIterator[Lab]:
    config = ClusterConfig.model_validate({
        "cluster": "c",
        "nodes": [NodeConfig(name="mbx1", site="s", url="http://h:1", data_dir="d")],
        "databases": [
            {"name": "DB1", "copies": [{"node": "mbx1", "activation_preference": 1}]},
            {"name": "DB2", "copies": [{"node": "mbx1", "activation_preference": 1}],
             "max_item_size": SMALL},
        ],
    })  # fmt: skip
    directory = Directory({"bob": "DB1", "alice": "DB1", "carol": "DB2",
                           "dave@example.org": "DB1", "erin@example.org": "DB9",
                           "erin": "DB1"})  # fmt: skip
    store = QueueStore(tmp_path / "queue.db", max_dumpster_time=3600, max_dumpster_size=10**9)
    metrics, clock = TransportMetrics(), SystemClock()
    deliverer = Deliverer(  # never run: what is queued stays queued, for the test to read
        store=store, directory=directory, nodes=None, clock=clock, metrics=metrics,  # type: ignore[arg-type]
        policy=RetryPolicy(interval=1, max_interval=1, expiration=60, max_tries=1),
        concurrency=1,
    )  # fmt: skip
    credentials = Credentials([
        Credential("sender", frozenset({Role.STORE}), (digest(SECRET),)),
        Credential("watcher", frozenset({Role.MONITOR}), (digest(SECRET[::-1]),)),
    ])  # fmt: skip
    # Asked afresh each time (a TTL of 0): the tests change the directory between sessions.
    transport = Transport(
        config=config, name="hub1", token="t" * 20, store=store,
        directory=CachedDirectory(directory, clock, ttl=0),
        deliverer=deliverer, clock=clock, metrics=metrics, credentials=lambda: credentials,
    )  # fmt: skip
    settings = MailSettings(
        trusted_networks=["127.0.0.1/32"], max_recipients=3, idle_timeout="1s",
        max_sessions_per_client=2, hostname="hub1.test",
    )  # fmt: skip
    servers, ports = [], {}
    for listener in Listener:
        sock = listening()
        ports[listener] = sock.getsockname()[1]
        service = MailService(transport=transport, listener=listener, settings=settings,
                              credentials=lambda: credentials)  # fmt: skip
        servers += await service.start([sock])
    yield Lab(ports, tmp_path / "queue.db", directory, metrics, store, deliverer)
    for server in servers:
        server.close()
    store.close()


def message(message_id: str | None = "<m1@example>", body: bytes = b"Hello.\r\n",
            subject: str = "Hi") -> bytes:  # fmt: skip
    head = f"From: a@example\r\nTo: bob@example\r\nSubject: {subject}\r\n".encode()
    if message_id:
        head += f"Message-ID: {message_id}\r\n".encode()
    return head + b"\r\n" + body


class Client:
    """smtplib (or its LMTP) over a thread, each step's reply kept."""

    def __init__(self, port: int, *, lmtp: bool = False, source: str = "127.0.0.1") -> None:
        self.port, self.lmtp, self.source = port, lmtp, source

    async def run(self, steps):
        def go():
            kind = smtplib.LMTP if self.lmtp else smtplib.SMTP
            conn = kind(source_address=(self.source, 0))
            conn.connect("127.0.0.1", self.port)
            try:
                return steps(conn)
            finally:
                # a reply left unread (one too many) fails QUIT's
                assert conn.quit()[0] == 221

        return await asyncio.to_thread(go)


def transaction(conn, to: list[str], raw: bytes, *, mail_options=()):
    """MAIL, RCPT for each of `to`, DATA: each reply as (code, text)."""
    conn.ehlo("client.test")
    replies = [conn.mail("a@example", list(mail_options))]
    replies += [conn.rcpt(r) for r in to]
    if any(code == 250 for code, _ in replies[1:]):
        replies.append(conn.data(raw))
    return [(code, text.decode()) for code, text in replies]


async def test_a_message_is_queued_as_it_came_with_a_trace_header_and_once(lab):
    raw = message(body="Grüße, 8-bit\r\n..a dot-stuffed line\r\n".encode())
    replies = await Client(lab.ports[Listener.SMTP]).run(
        lambda c: transaction(c, ["bob@example.com", "dave@example.org"], raw)
    )
    assert [c for c, _ in replies] == [250, 250, 250, 250], replies
    ((stored, to),) = lab.queued().values()
    assert to == ["bob", "dave@example.org"], "the local part, or the address a mailbox is named"
    assert stored.startswith(TRACE + b"\tby hub1.test with ESMTP id <m1@example>; ")
    assert stored.endswith(b"\r\n" + raw), "byte for byte after the trace header"
    # the MTA's retry (no answer heard): 250, nothing queued again
    again = await Client(lab.ports[Listener.SMTP]).run(lambda c: transaction(c, ["bob"], raw))
    assert again[-1][0] == 250
    assert len(lab.queued()) == 1 and lab.queued()["<m1@example>"][1] == to


async def test_a_message_without_message_id_gets_one_the_same_on_a_retry(lab):
    raw = message(None)
    for _ in range(2):
        replies = await Client(lab.ports[Listener.SMTP]).run(lambda c: transaction(c, ["bob"], raw))
        assert replies[-1][0] == 250
    ((message_id, (stored, _)),) = lab.queued().items()
    assert message_id.endswith("@hub1.test>")
    assert f"\r\nMessage-ID: {message_id}\r\n".encode() + raw in stored


async def test_lmtp_answers_each_recipient_after_data(lab):
    big = message("<big@example>", body=(b"z" * 70 + b"\r\n") * 80)  # over DB2's, not DB1's
    replies = await Client(lab.ports[Listener.LMTP], lmtp=True).run(
        lambda c: lmtp_transaction(c, ["bob@x", "nobody@x", "carol@x", "alice@x"], big)
    )
    assert replies[:6] == [250, 250, 550, 250, 250, 354], replies
    assert replies[6:] == [(250, "2.0.0"), (552, "5.3.4"), (250, "2.0.0")], replies
    ((stored, to),) = lab.queued().values()
    assert to == ["bob", "alice"] and stored.endswith(big)
    assert stored.startswith(TRACE + b"\tby hub1.test with LMTP id <big@example>; ")


async def test_a_message_just_queued_is_held_for_its_deliveries_as_the_queue_holds_it(lab):
    """What a delivery sends from memory is the message as queued, byte for byte, taken
    once by each of its deliveries and then let go; a retry of its id that brings other
    bytes is not held (the queue keeps the first); a message past the bound is read back."""
    fresh = lab.deliverer.fresh
    big = message("<big@example>", body=(b"QUJD" * 19 + b"\r\n") * 2000)  # a file's body
    smtp = Client(lab.ports[Listener.SMTP])
    assert (await smtp.run(lambda c: transaction(c, ["bob", "alice"], big)))[-1][0] == 250
    ((stored, _),) = lab.queued().values()
    deliveries = await lab.store.queued()
    assert fresh.held == len(stored)
    with fresh.take(deliveries[:1]) as taken:
        (one,) = taken.values()
        assert b"".join(one.message()) == stored and one.length == len(stored)
        assert one.subject == "Hi" and one.item()["body"].encode() == stored
        (read,) = await lab.store.items(deliveries[:1])
        assert (one.subject, one.format) == (read.subject, read.format)
        with fresh.take(deliveries[:1]) as again:
            assert again == {}, "a delivery takes it once"
    assert fresh.held == len(stored), "alice's delivery has not taken it yet"
    fresh.drop(deliveries[1:])  # alice's try failed before it: read from the queue next time
    assert fresh.held == 0
    with fresh.take(deliveries) as taken:
        assert taken == {}
    # the same id again, other bytes, another recipient: queued with the first's bytes
    other = message("<big@example>", body=b"other\r\n")
    assert (await smtp.run(lambda c: transaction(c, ["dave@example.org"], other)))[-1][0] == 250
    assert fresh.held == 0
    fresh.limit = 200_000  # the bound (an eighth of the memory budget, 16 MiB at most)
    huge = message("<huge@example>", body=(b"QUJD" * 19 + b"\r\n") * (fresh.limit // 78 + 1))
    assert (await smtp.run(lambda c: transaction(c, ["bob"], huge)))[-1][0] == 250
    assert fresh.held == 0 and lab.queued()["<huge@example>"][0].endswith(huge)


def lmtp_transaction(conn, to, raw):
    """LMTP's DATA has one reply per accepted recipient: read them all (smtplib's LMTP reads
    one, so DATA is spoken here)."""
    conn.ehlo("client.test")
    codes = [conn.mail("a@example")[0]]
    codes += [conn.rcpt(r)[0] for r in to]
    accepted = sum(code == 250 for code in codes[1:])
    code, _ = conn.docmd("DATA")
    codes.append(code)
    conn.send(smtplib._quote_periods(raw) + b".\r\n")  # smtplib's own dot-stuffing
    for _ in range(accepted):
        code, text = conn.getreply()
        codes.append((code, text.decode().split(" ", 1)[0]))
    return codes


def codes(replies):
    """(code, enhanced status) of each reply."""
    return [(code, text.split(" ", 1)[0]) for code, text in replies]


async def test_each_refusal_has_its_code_and_queues_nothing(lab):
    smtp = Client(lab.ports[Listener.SMTP])
    refused = {
        "unknown recipient": (["nobody@x"], None, ()),
        # its mailbox is in a database the config no longer has: refused, never given to
        # the mailbox of its local part instead
        "a mailbox no node takes": (["erin@example.org"], None, ()),
        "too many recipients": (["bob", "alice", "dave@example.org", "carol"], None, ()),
        "SIZE over the recipient's database": (["carol", "bob"], None, ("SIZE=10000",)),
        "over a recipient's database after DATA": (
            ["bob", "carol"],
            message(body=(b"z" * 70 + b"\r\n") * 80),
            (),
        ),
        "a line over 998 octets": (["bob"], message(body=b"x" * 999 + b"\r\n"), ()),
        "a bare LF": (["bob"], message(body=b"one\ntwo\r\n"), ()),
        "a bare CR": (["bob"], message(body=b"one\rtwo\r\n"), ()),
    }
    said = {}
    for what, (to, raw, options) in refused.items():

        def steps(c, to=to, raw=raw, options=options):
            c.ehlo("client.test")
            replies = [c.mail("a@example", list(options))] + [c.rcpt(r) for r in to]
            if raw is not None:
                replies.append(c.data(raw))
            c.rset()
            return [(code, text.decode()) for code, text in replies]

        said[what] = codes(await smtp.run(steps))
    ok, bad = (250, "2.1.0"), (250, "2.1.5")
    assert said == {
        "unknown recipient": [ok, (550, "5.1.1")],
        "a mailbox no node takes": [ok, (550, "5.1.1")],
        "too many recipients": [ok, bad, bad, bad, (452, "4.5.3")],
        "SIZE over the recipient's database": [ok, (552, "5.3.4"), bad],
        "over a recipient's database after DATA": [ok, bad, bad, (552, "5.3.4")],
        "a line over 998 octets": [ok, bad, (550, "5.5.2")],
        "a bare LF": [ok, bad, (550, "5.5.2")],
        "a bare CR": [ok, bad, (550, "5.5.2")],
    }
    lab.directory.broken = True
    assert codes(await smtp.run(lambda c: transaction(c, ["bob"], message()))) == [
        ok,
        (451, "4.3.0"),
    ]
    lab.directory.broken = False
    assert lab.queued() == {}, "a refused message queues nothing"
    text = lab.metrics.registry
    from prometheus_client import generate_latest

    exposed = generate_latest(text).decode()
    assert value(exposed, "transport_mail_refusals_total", listener="smtp", code="550",
                 status="5.5.2") == 3  # fmt: skip
    assert value(exposed, "transport_mail_refusals_total", listener="smtp", code="451",
                 status="4.3.0") == 1  # fmt: skip


async def test_outside_the_trusted_networks_smtp_wants_auth_and_lmtp_serves_none(lab):
    outside = Client(lab.ports[Listener.SMTP], source="127.0.0.2")

    def steps(c):
        c.ehlo("client.test")
        return [c.mail("a@example"), c.docmd("AUTH", "PLAIN AHNlbmRlcgB4")]

    assert codes([(code, text.decode()) for code, text in await outside.run(steps)]) == [
        (530, "5.7.0"),
        (538, "5.7.11"),  # no STARTTLS here: AUTH is refused before it
    ]
    reader, writer, said = await greeting(lab.ports[Listener.LMTP], source="127.0.0.2")
    assert said.startswith(b"554 5.7.1 "), said
    assert await reader.read() == b"", "and closed"
    writer.close()
    assert lab.queued() == {}


async def greeting(
    port: int, source: str = "127.0.0.1"
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter, bytes]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port, local_addr=(source, 0))
    return reader, writer, await reader.readline()


async def test_sessions_past_the_bound_per_client_and_idle_ones_are_closed_with_421(lab):
    port = lab.ports[Listener.SMTP]
    first, second, third = [await greeting(port) for _ in range(3)]
    assert first[2].startswith(b"220 hub1.test") and second[2].startswith(b"220 ")
    assert third[2].startswith(b"421 4.7.0"), "the third session of one address"
    assert await third[0].read() == b"", "and closed"
    # idle past the timeout (1 s here): told so, then closed
    assert (await first[0].readline()).startswith(b"421 4.4.2")
    assert await first[0].read() == b""
    for _, writer, _ in (first, second, third):
        writer.close()


async def replies(reader: asyncio.StreamReader, n: int) -> list[bytes]:
    """The next `n` replies: each one's code, and its enhanced status if it has one."""
    out = []
    while len(out) < n:
        line = await reader.readline()
        assert line, "the session closed"
        if line[3:4] != b"-":  # a reply's last line
            status = line[4:9]
            out.append(line[:9] if status[:1].isdigit() and status[1:2] == b"." else line[:3])
    return out


async def test_a_large_message_read_in_pieces_and_the_commands_pipelined_behind_it(lab):
    """A message of many pieces (base64 lines, dot-stuffed lines, 8-bit) arrives byte for
    byte, however a socket cuts it; the next transaction, sent behind its lone dot in the
    same write, is read as commands; a line too long deep in a large message is refused
    with nothing queued, and the session goes on."""
    lines = [b"%06d" % n + b"QUJD" * 18 + b"\r\n" for n in range(5000)]  # 400 KB
    lines[1234] = b".starts with a dot\r\n"
    lines[4321] = "Grüße\r\n".encode()
    big = message("<big@example>", body=b"".join(lines))
    bad = message("<bad@example>", body=b"".join(lines[:3000]) + b"y" * 999 + b"\r\n"
                  + b"".join(lines[3000:]))  # fmt: skip
    after = message("<after@example>")
    reader, writer, greeting_line = await greeting(lab.ports[Listener.LMTP])
    assert greeting_line.startswith(b"220 ")
    quoted = [smtplib._quote_periods(m) + b".\r\n" for m in (big, bad, after)]
    transaction_of = b"MAIL FROM:<a@example>\r\nRCPT TO:<bob@x>\r\nDATA\r\n"
    writer.write(b"LHLO client.test\r\n" + transaction_of)
    assert await replies(reader, 4) == [b"250", b"250 2.1.0", b"250 2.1.5", b"354"]
    writer.write(quoted[0] + transaction_of)  # the next transaction behind the dot
    assert await replies(reader, 4) == [b"250 2.0.0", b"250 2.1.0", b"250 2.1.5", b"354"]
    writer.write(quoted[1] + transaction_of)
    assert await replies(reader, 4) == [b"550 5.5.2", b"250 2.1.0", b"250 2.1.5", b"354"]
    writer.write(quoted[2] + b"QUIT\r\n")
    assert await replies(reader, 2) == [b"250 2.0.0", b"221"]
    writer.close()
    queued = lab.queued()
    assert set(queued) == {"<big@example>", "<after@example>"}, "nothing of the refused one"
    assert queued["<big@example>"][0].endswith(b"\r\n" + big)
    assert queued["<after@example>"][0].endswith(b"\r\n" + after)


async def test_a_data_that_stops_coming_is_idle_and_closed_with_421(lab):
    reader, writer, _ = await greeting(lab.ports[Listener.LMTP])
    writer.write(b"LHLO client.test\r\nMAIL FROM:<a@example>\r\nRCPT TO:<bob@x>\r\nDATA\r\n")
    assert await replies(reader, 4) == [b"250", b"250 2.1.0", b"250 2.1.5", b"354"]
    writer.write(message("<stalled@example>")[:20])  # then nothing, past the timeout (1 s)
    assert (await reader.readline()).startswith(b"421 4.4.2")
    assert await reader.read() == b""
    writer.close()
    assert lab.queued() == {}
