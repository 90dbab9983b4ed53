"""A real Postfix relaying into the transport's LMTP listener (issue 49), over real processes:
three nodes, a transport, Postfix (tests/mail_servers.py) and smtplib as the sender.

- Through a lossy failover of the recipient's database (kill -9 of its active, a passive
  that copied nothing of the last messages activated): every message Postfix took arrives
  once, the lost ones by the dumpster's redelivery.
- kill -9 of the transport during a DATA, and once the message is queued but before its
  250 reaches Postfix: Postfix keeps the message, its retry (`postqueue -f`) delivers it,
  once.  The kill is timed by a relay between Postfix and the transport that watches the
  LMTP conversation (`Cut`): no sleep decides when it happens."""

from __future__ import annotations

import asyncio
import contextlib
import smtplib
from collections.abc import Awaitable, Callable
from email.message import EmailMessage
from email.policy import SMTP
from email.utils import formatdate

import pytest

from dag_common.api_types import item_id_for
from tests.cluster_harness import wait_until
from tests.mail_servers import HOST, MailServers, Postfix
from tests.replication_node.e2e import converged, three_nodes
from tests.transport.harness import Hubs

pytestmark = pytest.mark.slow

BOB = "bob@example.test"  # the mailbox bob of DB2 (active on mbx2), by its local part


def message(message_id: str, size: int = 0) -> bytes:
    """A MIME message to bob, with an attachment of `size` bytes (none: 2 KiB)."""
    msg = EmailMessage()
    msg["From"] = "alice@example.org"
    msg["To"] = BOB
    msg["Subject"] = f"Figures {message_id} — été"
    msg["Date"] = formatdate()
    msg["Message-ID"] = message_id
    msg.set_content("Bob,\n\nthe figures, as promised.\n")
    msg.add_attachment(bytes(range(256)) * (max(size, 2048) // 256), maintype="application",
                       subtype="octet-stream", filename="figures.bin")  # fmt: skip
    return msg.as_bytes(policy=SMTP)


def submit(postfix: Postfix, *message_ids: str, size: int = 0) -> dict[str, bytes]:
    """Each message handed to Postfix by SMTP (its 250 heard); {message id: bytes}."""
    sent = {}
    with smtplib.SMTP(HOST, postfix.port, timeout=60) as smtp:
        for m in message_ids:
            raw = message(m, size)
            assert smtp.sendmail("alice@example.org", [BOB], raw) == {}
            sent[m] = raw
    return sent


def ids(sent: dict[str, bytes]) -> set[str]:
    return {item_id_for(m) for m in sent}


async def all_relayed(postfix: Postfix, hubs: Hubs) -> None:
    """Postfix's queue empty and nothing waiting in the transport's."""
    await wait_until("postfix's queue empty", lambda: postfix.queued() == [], timeout=120,
                     every=0.1)  # fmt: skip
    state = await hubs.drained("hub1", timeout=120)
    assert state["deliveries"]["Poison"] == 0, state


@pytest.fixture
async def lab(tmp_path, mail_servers: MailServers):
    cluster = three_nodes(tmp_path, defaults={"failover_after": None})
    hubs = Hubs(cluster, "hub1", mail_ports=True)
    await cluster.start()
    await cluster.wait_status("mbx2", "DB2", "Mounted")
    await cluster.ok("PUT", "mbx2", "/v1/databases/DB2/mailboxes/bob")
    await hubs.start("hub1")
    try:
        yield cluster, hubs, mail_servers
    finally:
        hubs.stop_all()
        await cluster.close()


async def test_postfix_relays_through_a_lossy_failover_each_message_once(lab):
    cluster, hubs, mail_servers = lab
    postfix = mail_servers.postfix((HOST, hubs.lmtp_ports["hub1"]))
    before = submit(postfix, *(f"<a{n}@example.org>" for n in range(20)))
    await all_relayed(postfix, hubs)
    assert set(await cluster.items("mbx2", "DB2", "bob")) == ids(before)
    await converged(cluster, "DB2", "mbx2", ["mbx3"])

    # relayed and durable on mbx2 while mbx3 copies nothing: lost with mbx2
    await cluster.ok("POST", "mbx3", "/v1/databases/DB2/copies/mbx3/suspend")
    lost = submit(postfix, *(f"<b{n}@example.org>" for n in range(15)))
    await all_relayed(postfix, hubs)
    assert set(await cluster.items("mbx2", "DB2", "bob")) == ids(before | lost)
    cluster.kill("mbx2")
    # accepted while DB2 has no active: Postfix hands them over, the transport keeps them
    during = submit(postfix, *(f"<c{n}@example.org>" for n in range(10)))
    await cluster.ok("POST", "mbx3", "/v1/databases/DB2/copies/mbx3/resume")
    await cluster.wait_status("mbx3", "DB2", "DisconnectedAndHealthy")
    activated = await cluster.ok("POST", "mbx3", "/v1/databases/DB2/activate",
                                 json={"node": "mbx3"})  # fmt: skip
    assert activated["lost_logs"] >= 1
    await cluster.wait_status("mbx3", "DB2", "Mounted")
    after = submit(postfix, *(f"<d{n}@example.org>" for n in range(10)))

    async def redelivered() -> bool:
        report = (await cluster.status("mbx3"))["DB2"]
        return "Success" in (report.get("redelivery") or "")

    await cluster.wait_for("the dumpster's redelivery to succeed", redelivered)
    await all_relayed(postfix, hubs)
    sent = before | lost | during | after
    bob = await cluster.items("mbx3", "DB2", "bob")
    assert set(bob) == ids(sent), "every message Postfix took, exactly once"
    _, state = await hubs.call("GET", "hub1", "/v1/queue")
    assert state["deliveries"] == {"Queued": 0, "Delivered": len(sent), "Poison": 0}
    assert postfix.log().count("status=sent") == len(sent)
    await stored_as_sent(cluster, "mbx3", sent)


async def stored_as_sent(cluster, node: str, sent: dict[str, bytes]) -> None:
    """Each message's bytes on `node` end with what was given to Postfix (above it: the
    trace headers Postfix and the transport add)."""
    for m, raw in sent.items():
        status, body = await cluster.call(
            "GET", node, f"/v1/databases/DB2/mailboxes/bob/items/{item_id_for(m)}/message"
        )
        assert status == 200 and isinstance(body, bytes), (m, status, body)
        assert body.endswith(raw), m


class Cut:
    """A relay between Postfix and the transport's LMTP that calls `cut` once, at the moment
    asked, and drops that connection: `mid-data` after 64 KiB of the first message's DATA
    went through; `reply-lost` when the transport's reply to the end of that DATA comes
    (the message is queued), which Postfix then never hears."""

    def __init__(self, upstream: int, when: str, cut: Callable[[], Awaitable[None]]) -> None:
        self.upstream = upstream
        self.when = when
        self.cut = cut
        self.done = False
        self.server: asyncio.Server | None = None

    @property
    def port(self) -> int:
        assert self.server is not None
        return self.server.sockets[0].getsockname()[1]

    async def __aenter__(self) -> Cut:
        self.server = await asyncio.start_server(self.session, HOST, 0)
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self.server is not None
        self.server.close()

    async def session(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter):
        up_r, up_w = await asyncio.open_connection(HOST, self.upstream)
        cutting = not self.done
        self.done = True
        in_data = asyncio.Event()  # the client is past DATA's 354: the message flows
        end_sent = asyncio.Event()  # the client sent the message's ending dot

        async def client_to_server() -> None:
            seen = b""
            data_bytes = 0
            while chunk := await client_r.read(16384):
                if cutting and in_data.is_set():
                    data_bytes += len(chunk)
                    if self.when == "mid-data" and data_bytes >= 65536:
                        await self.cut()
                        return
                    # the ending dot; Postfix may send QUIT in the same packet
                    if b"\r\n.\r\n" in seen + chunk:
                        end_sent.set()
                seen = (seen + chunk)[-4:]
                up_w.write(chunk)
                await up_w.drain()

        async def server_to_client() -> None:
            while line := await up_r.readline():
                if cutting and line.startswith(b"354"):
                    in_data.set()
                if cutting and end_sent.is_set() and self.when == "reply-lost":
                    await self.cut()  # the 250 (queued) never reaches Postfix
                    return
                client_w.write(line)
                await client_w.drain()

        try:
            tasks = [asyncio.ensure_future(t) for t in (client_to_server(), server_to_client())]
            await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
            for t in tasks:
                t.cancel()
        finally:
            for w in (client_w, up_w):
                w.close()
                with contextlib.suppress(ConnectionError):
                    await w.wait_closed()


@pytest.mark.parametrize("when", ["mid-data", "reply-lost"])
async def test_a_transport_killed_during_a_data_gets_the_message_once_by_postfix_retry(lab, when):
    cluster, hubs, mail_servers = lab
    killed = asyncio.Event()

    async def kill() -> None:
        hubs.kill("hub1")  # kill -9
        killed.set()

    async with Cut(hubs.lmtp_ports["hub1"], when, kill) as cut:
        # a long retry: only the `postqueue -f` below tries it again
        slow = {k: "300s" for k in ("minimal_backoff_time", "maximal_backoff_time",
                                    "queue_run_delay")}  # fmt: skip
        postfix = mail_servers.postfix((HOST, cut.port), **slow)
        sent = submit(postfix, "<k1@example.org>", size=1 << 20)
        await wait_until("the transport killed", killed.is_set, timeout=60)
        await wait_until("postfix deferred it", lambda: "status=deferred" in postfix.log(),
                         timeout=120)  # fmt: skip
        assert len(postfix.queued()) == 1, "Postfix keeps what it was not told was delivered"

        await hubs.start("hub1")
        postfix.flush()
        await all_relayed(postfix, hubs)
    bob = await cluster.items("mbx2", "DB2", "bob")
    assert set(bob) == ids(sent)
    _, state = await hubs.call("GET", "hub1", "/v1/queue")
    assert state["deliveries"] == {"Queued": 0, "Delivered": 1, "Poison": 0}, "queued once"
    assert postfix.log().count("status=sent") == 1
    await stored_as_sent(cluster, "mbx2", sent)
