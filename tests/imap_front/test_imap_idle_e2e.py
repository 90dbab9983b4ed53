"""IDLE on the node's change feed, over real processes (two TLS nodes, a transport with its
LMTP listener, the front): an idling imaplib client is told `* n EXISTS` of each message the
transport delivers, `* n EXPUNGE` of a message another session expunges or moves out, and
carries on through a switchover of the database.  No sleeps: each untagged answer is read
with a socket timeout that only bounds a failure."""

from __future__ import annotations

import asyncio
import smtplib

import aiohttp
import pytest

from tests.imap_front.test_imap_e2e import MIME, lab, logged_in  # noqa: F401 - the fixture

pytestmark = pytest.mark.slow

SAY = 30.0  # seconds a client waits for an answer before the test fails


def deliver(hubs, n: int) -> None:
    with smtplib.LMTP("127.0.0.1", hubs.lmtp_ports["hub1"]) as lmtp:
        lmtp.sendmail("bob@example.org", ["alice"], MIME.replace(b"<m1@", b"<idle-%d@" % n))


class Idler:
    """An imaplib session selected on INBOX, in IDLE, its untagged answers read one by one."""

    def __init__(self, port: int, ca) -> None:
        self.m = logged_in(port, ca)
        self.capability = self.m.capability()[1][0].split()
        typ, data = self.m.select("INBOX")
        assert typ == "OK", data
        self.exists = int(data[0])
        self.tag = self.m._new_tag()
        self.m.send(self.tag + b" IDLE\r\n")
        self.m.sock.settimeout(SAY)
        said = self.m.readline()
        assert said.startswith(b"+"), said

    def until(self, wanted: bytes) -> list[bytes]:
        """The untagged lines up to and including `wanted` (a TimeoutError past SAY)."""
        lines = []
        while True:
            line = self.m.readline()
            assert line, "the front closed the connection"
            lines.append(line.rstrip())
            if line.rstrip() == wanted:
                return lines

    def done(self) -> bytes:
        self.m.send(b"DONE\r\n")
        while not (line := self.m.readline()).startswith(self.tag):
            assert line, "the front closed the connection"
        self.m.logout()
        return line


async def test_an_idling_client_is_told_of_each_delivery_and_each_expunge(lab):  # noqa: F811
    _, hubs, front, ca = lab

    def run() -> dict:
        out: dict = {}
        idler = Idler(front.port, ca)
        out["caps"] = idler.capability
        out["before"] = idler.exists
        for n in (1, 2, 3):
            deliver(hubs, n)
            out[n] = idler.until(b"* %d EXISTS" % n)
        other = logged_in(front.port, ca)
        other.select("INBOX")
        other.uid("STORE", "1", "+FLAGS", r"(\Deleted)")
        other.expunge()
        out["expunged"] = idler.until(b"* 1 EXPUNGE")
        other.create("Kept")
        other.uid("MOVE", "2", "Kept")  # the source's expunged does not name it
        out["moved"] = idler.until(b"* 1 EXPUNGE")
        other.logout()
        out["done"] = idler.done()
        return out

    out = await asyncio.to_thread(run)
    assert b"IDLE" in out["caps"], out["caps"]
    assert out["before"] == 0
    assert out["done"].split()[1] == b"OK", out["done"]
    assert all(b"EXPUNGE" not in line for n in (1, 2, 3) for line in out[n]), out

    async with (
        aiohttp.ClientSession() as http,
        http.get(f"http://127.0.0.1:{front.metrics_port}/metrics") as resp,
    ):
        assert resp.status == 200
        text = await resp.text()
    wakeups = next(line for line in text.splitlines()
                   if line.startswith("imap_front_idle_wakeups_total "))  # fmt: skip
    assert float(wakeups.split()[1]) >= 5, text
    # each change after SELECT listed since the modseq shown (the MOVE out included)
    # (the idler's own listing, or the front's rows read since once for every idler woken)
    kinds = tuple(f'imap_front_folder_resyncs_total{{listing="{k}"}}' for k in ("since", "shared"))
    since = sum(float(x.split()[1]) for x in text.splitlines() if x.startswith(kinds))
    assert since >= 5, text
    assert 'imap_front_commands_total{command="IDLE",result="ok"} 1.0' in text, text
    assert 'imap_front_commands_total{command="LOGIN",result="ok"} 2.0' in text, text
    assert 'imap_front_sessions{state="idle"} 0.0' in text, text


async def test_idle_carries_on_through_a_switchover(lab):  # noqa: F811
    cluster, hubs, front, ca = lab
    await asyncio.to_thread(deliver, hubs, 1)
    await cluster.wait_status("mbx2", "DB1", "Healthy")
    idler = await asyncio.to_thread(Idler, front.port, ca)
    assert idler.exists == 1
    # The client idles on (its socket unread) while the database switches over.
    switched = await asyncio.to_thread(
        cluster.node_cli, "db", "switchover", "DB1", "--to", "mbx2", "--json"
    )
    assert switched.returncode == 0, switched.stderr

    def run() -> list[bytes]:
        deliver(hubs, 2)
        return idler.until(b"* 2 EXISTS")

    told = await asyncio.to_thread(run)
    assert b"* 1 EXPUNGE" not in told, told
    assert (await cluster.status("mbx2"))["DB1"]["status"] == "Mounted"
    async with (
        aiohttp.ClientSession() as http,
        http.get(f"http://127.0.0.1:{front.metrics_port}/metrics") as resp,
    ):
        text = await resp.text()
    # the idling poll was followed to the new active, which named its own epoch
    assert 'imap_front_feed_polls_total{outcome="epoch"} 1.0' in text, text
    done = await asyncio.to_thread(idler.done)
    assert done.split()[1] == b"OK", done


async def node_waiters(cluster, node: str = "mbx1") -> float:
    """The node's `replication_change_waiters`: requests waiting on change feeds now."""
    text = (await cluster.call("GET", node, "/metrics"))[1].decode()
    line = next(x for x in text.splitlines() if x.startswith("replication_change_waiters "))
    return float(line.split()[1])


async def front_metric(front, name: str) -> float:
    async with (
        aiohttp.ClientSession() as http,
        http.get(f"http://127.0.0.1:{front.metrics_port}/metrics") as resp,
    ):
        text = await resp.text()
    return float(next(x for x in text.splitlines() if x.startswith(name + " ")).split()[1])


async def test_sessions_idling_on_one_mailbox_wait_on_one_request_to_the_node(lab):  # noqa: F811
    """Three sessions idling on one mailbox hold one long poll on the node between them, not
    one each (`feed_polls.py`: past 100 idlers, a poll each filled the front's pool to the
    nodes and stalled every other session's commands); a delivery reaches all three, each
    told from the front's rows, read once for the three (a listing each took 50 s for 1,000
    idlers on a 10,000-message folder)."""
    cluster, hubs, front, ca = lab
    await asyncio.to_thread(deliver, hubs, 1)
    idlers = [await asyncio.to_thread(Idler, front.port, ca) for _ in range(3)]
    assert [i.exists for i in idlers] == [1, 1, 1]

    async def all_idle() -> bool:
        idle = await front_metric(front, 'imap_front_sessions{state="idle"}')
        return idle == 3 and await node_waiters(cluster) >= 1

    await cluster.wait_for("three sessions idling, a poll on the node", all_idle)

    def other_session() -> None:  # commands of another session, after the polls were sent
        other = logged_in(front.port, ca)
        assert other.select("INBOX")[0] == "OK"
        assert other.noop()[0] == "OK"
        other.logout()

    await asyncio.to_thread(other_session)
    assert await node_waiters(cluster) == 1

    def run() -> list[bytes]:
        deliver(hubs, 2)
        return [line for i in idlers for line in i.until(b"* 2 EXISTS")] + [
            i.done() for i in idlers
        ]

    told = await asyncio.to_thread(run)
    assert all(line.split()[1] == b"OK" for line in told[-3:]), told
    # the three took their EXISTS from the front's rows, read since once for all of them
    assert await front_metric(front, 'imap_front_folder_resyncs_total{listing="shared"}') == 3


async def front_series(front, name: str) -> float:
    """A series of the front's metrics, 0 while it has none."""
    async with (
        aiohttp.ClientSession() as http,
        http.get(f"http://127.0.0.1:{front.metrics_port}/metrics") as resp,
    ):
        text = await resp.text()
    return next((float(x.split()[1]) for x in text.splitlines() if x.startswith(name + " ")), 0.0)


async def test_idlers_woken_go_back_to_idle_without_looking_their_folder_up(lab):  # noqa: F811
    """Ten sessions idling, two deliveries back to back (the second once every idler has
    seen the first, as bench/imap.py --scale sends them): each reaches all ten, and a woken
    idler goes back to IDLE on the front's rows, current as of what it was shown
    (`Folders.current`), with no lookup of its folder on the node.  A lookup each (pymap's
    `check_mailbox`: a state GET of the mailbox, counting a 10,000-message folder) was
    1,000 reads a delivery with 1,000 idlers: they held the node and the front's pool to it
    for 14-24 s, and a delivery right after the previous one reached no idler until they
    were done (bench/README.md, *IDLE fan-out*)."""
    cluster, hubs, front, ca = lab
    await asyncio.to_thread(deliver, hubs, 1)
    idlers = [await asyncio.to_thread(Idler, front.port, ca) for _ in range(10)]
    assert {i.exists for i in idlers} == {1}

    async def idling(n: int) -> bool:
        return await front_metric(front, 'imap_front_sessions{state="idle"}') == n

    await cluster.wait_for("ten sessions idling", lambda: idling(10))
    rows = 'imap_front_folder_lookups_total{source="rows"}'
    node = 'imap_front_folder_lookups_total{source="node"}'
    before = {k: await front_series(front, k) for k in (rows, node)}
    for n in (2, 3):

        def run(n: int = n) -> None:
            deliver(hubs, n)
            for i in idlers:
                i.until(b"* %d EXISTS" % n)

        await asyncio.to_thread(run)
        await cluster.wait_for(f"the ten idling again after delivery {n}", lambda: idling(10))
    after = {k: await front_series(front, k) for k in (rows, node)}
    assert after[rows] - before[rows] >= 20, (before, after)  # each idler, after each wake
    assert after[node] == before[node], (before, after)
    done = await asyncio.to_thread(lambda: [i.done() for i in idlers])
    assert all(line.split()[1] == b"OK" for line in done), done
