"""A front whose last call to a database went to the copy a switchover has since demoted
(issue 50: "never sees its cache lied to"), over real processes: two TLS nodes serving DB1,
a transport with its LMTP listener, two fronts (imap1, imap2), imaplib clients.

A passive copy answers the node's reads (`reader_for`), as of where its replay is: behind
the active by a replication lag, or by as much as it likes while suspended.  A front whose
node client last found the active on mbx1 carries on calling mbx1 after the switchover
until a call is refused there; a read that is not refused answers from the demoted copy.
A client shown a message through one front (a UID, UIDNEXT past it) that then asks the
other front (a second connection of the same client, or its reconnection after a front
died) must not be told an older state: the message gone, UIDNEXT back.

No sleeps: each wait is for the thing itself (a status, an answer)."""

from __future__ import annotations

import asyncio
import re

import pytest

from tests.imap_front.test_imap_e2e import logged_in
from tests.imap_front.test_imap_failover_e2e import deliver, lab  # noqa: F401 - the fixture
from tests.imap_front.test_imap_idle_e2e import SAY

pytestmark = pytest.mark.slow


def status(port: int, ca) -> dict[str, int]:
    """STATUS INBOX (MESSAGES UIDNEXT) asked in a session of its own."""
    m = logged_in(port, ca)
    m.sock.settimeout(SAY)
    typ, data = m.status("INBOX", "(MESSAGES UIDNEXT)")
    m.logout()
    assert typ == "OK", data
    said = data[0].decode()
    return {k: int(v) for k, v in re.findall(r"(MESSAGES|UIDNEXT) (\d+)", said)}


def selected(port: int, ca) -> tuple[int, int, bytes]:
    """SELECT INBOX: EXISTS, UIDNEXT, and the answer to UID FETCH 2 BODY.PEEK[] (b"": none)."""
    m = logged_in(port, ca)
    m.sock.settimeout(SAY)
    typ, data = m.select("INBOX")
    assert typ == "OK", data
    exists = int(data[0])
    uid_next = int(m.untagged_responses["UIDNEXT"][-1])
    typ, fetched = m.uid("FETCH", "2", "(BODY.PEEK[])")
    m.logout()
    body = fetched[0][1] if typ == "OK" and fetched and isinstance(fetched[0], tuple) else b""
    return exists, uid_next, body


async def test_no_front_answers_from_the_copy_a_switchover_demoted(lab):  # noqa: F811
    cluster, hubs, (one, two), ca = lab
    first = await asyncio.to_thread(deliver, hubs, 1)
    await cluster.wait_status("mbx2", "DB1", "Healthy")
    # imap2's node client finds the active (mbx1) and keeps it
    assert await asyncio.to_thread(status, two.port, ca) == {"MESSAGES": 1, "UIDNEXT": 2}

    switched = await asyncio.to_thread(
        cluster.node_cli, "db", "switchover", "DB1", "--to", "mbx2", "--json"
    )
    assert switched.returncode == 0, switched.stderr
    # The demoted copy replicates as a passive, then stops replaying (suspended): it
    # answers reads, behind the active from now on.
    await cluster.wait_status("mbx1", "DB1", "Healthy")
    suspended = await asyncio.to_thread(
        cluster.node_cli, "db", "suspend", "DB1", "--node", "mbx1", "--json"
    )
    assert suspended.returncode == 0, suspended.stderr
    second = await asyncio.to_thread(deliver, hubs, 2)

    # The client is shown the new message through imap1 (its node client found mbx2) ...
    exists, uid_next, body = await asyncio.to_thread(selected, one.port, ca)
    assert (exists, uid_next, body.endswith(second)) == (2, 3, True), body  # a Received: first
    # ... and then asks imap2, which last called mbx1: the same state, not mbx1's.
    assert await asyncio.to_thread(status, two.port, ca) == {"MESSAGES": 2, "UIDNEXT": 3}
    assert await asyncio.to_thread(selected, two.port, ca) == (2, 3, body)
    assert not body.endswith(first)
