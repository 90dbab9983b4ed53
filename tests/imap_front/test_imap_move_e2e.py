"""An IMAP session follows its mailbox through a move (issue 50, step 6, the front's half),
over real processes: three TLS nodes (DB1 on mbx1/mbx2, DB2 on mbx2/mbx3), the guarantee
API, a transport with its LMTP listener, the front, and the mover in this process.

Two imaplib clients are selected in INBOX, one of them in IDLE, while alice's mailbox moves
DB1 -> DB2 and the transport delivers to it.  During the sync the selected client flags and
appends; while the move holds the source's lock it sends a STORE, which waits for the move's
end and is taken on DB2.  Afterwards its FETCH, STORE and APPEND reach DB2 (read back on
DB2's node), the idling client is told of a message delivered after the move, and every UID
means the message it meant: the same bytes before and after.  No sleeps: each wait is for
the thing itself (an answer, a log line), with a timeout that only bounds a failure."""

from __future__ import annotations

import asyncio
import re
import smtplib
import subprocess
import sys

import pytest

from tests.cluster_harness import ROOT, wait_until
from tests.imap_front.harness import Front
from tests.imap_front.test_imap_e2e import MIME, PASSWORD, logged_in
from tests.imap_front.test_imap_idle_e2e import Idler
from tests.mrs_client.e2e import active_of, mover_in_process, outcome, shorten_guarantee_waits
from tests.mrs_client.test_move_e2e import databases
from tests.tls_cluster import tls_cluster
from tests.transport.harness import tls_mail_hub

pytestmark = pytest.mark.slow

SOURCE = "/v1/databases/DB1/mailboxes/alice"
TARGET = "/v1/databases/DB2/mailboxes/alice"


async def guarantee_api(cluster, pki) -> subprocess.Popen[bytes]:
    """`guarantee-api serve` over TLS (its own certificate: the config's names `{node}`);
    returned once it says it serves."""
    log_path = cluster.root / "guarantee.log"
    log = open(log_path, "ab")  # noqa: SIM115 - the child owns it
    proc = subprocess.Popen(
        [sys.executable, "-m", "guarantee_api.cli", "serve", "--config", str(cluster.config_path),
         "--tls-cert", str(pki / "guarantee.pem"), "--tls-key", str(pki / "guarantee.key")],
        stdout=log, stderr=subprocess.STDOUT, env=cluster.env(), cwd=ROOT,
    )  # fmt: skip

    async def serving() -> bool:
        if proc.poll() is not None:
            raise RuntimeError(f"guarantee-api exited: {log_path.read_text()[-2000:]}")
        return "guarantee-api serving gRPC" in log_path.read_text(errors="replace")

    await wait_until("guarantee-api serves", serving, timeout=60, every=0.05)
    return proc


@pytest.fixture
async def lab(tmp_path):
    cluster, pki, ca = tls_cluster(
        tmp_path,
        nodes=[("mbx1", "redmond"), ("mbx2", "redmond"), ("mbx3", "dublin")],
        databases=databases(),
        certs=("hub1", "imap1", "guarantee"),
        defaults={"failover_after": None},
    )
    shorten_guarantee_waits(cluster)
    hubs = tls_mail_hub(cluster)
    front = Front(cluster, "imap1", {"alice": ("alice", PASSWORD)},
                  max_line=8192, max_literal=200_000)  # fmt: skip
    await cluster.start()
    api = None
    try:
        api = await guarantee_api(cluster, pki)
        await cluster.wait_status("mbx1", "DB1", "Mounted")
        await cluster.ok("PUT", "mbx1", SOURCE)
        await hubs.start("hub1")
        await front.start()
        yield cluster, hubs, front, ca[0]
    finally:
        front.stop()
        hubs.stop_all()
        if api is not None:
            api.terminate()
            api.wait(timeout=20)
        await cluster.close()
    assert "Traceback" not in front.log(), front.log()[-3000:]


def deliver(hubs, n: int) -> bytes:
    raw = MIME.replace(b"<m1@", b"<move-%d@" % n).replace(b"report", b"report %d" % n)
    with smtplib.LMTP("127.0.0.1", hubs.lmtp_ports["hub1"]) as lmtp:
        lmtp.sendmail("bob@example.org", ["alice"], raw)
    return raw


def bodies(m) -> dict[int, bytes]:
    """UID -> BODY[] of every message the session was shown."""
    typ, data = m.uid("FETCH", "1:*", "(UID BODY.PEEK[])")
    assert typ == "OK", data
    out = {}
    for part in data:
        if isinstance(part, tuple):
            out[int(re.search(rb"UID (\d+)", part[0]).group(1))] = part[1]
    return out


async def listing(c, node: str, box: str) -> dict[int, tuple[str, tuple[str, ...]]]:
    """UID -> (item id, flags) of Inbox as `node` lists it."""
    body = await c.ok("GET", node, f"{box}/folders/Inbox/uids")
    return {m[0]: (m[1], tuple(sorted(m[2]))) for m in body["messages"]}


async def node_bytes(c, node: str, box: str, item_id: str) -> bytes:
    async with c.session.get(f"{c.url(node)}{box}/items/{item_id}/message") as r:
        assert r.status == 200, await r.text()
        return await r.read()


async def test_a_session_follows_its_mailbox_through_a_move(lab):
    c, hubs, front, ca = lab
    for n in (1, 2, 3):
        await asyncio.to_thread(deliver, hubs, n)

    async def stored() -> bool:  # LMTP's 250 is the transport's queue; then the node's
        return len(await listing(c, "mbx1", SOURCE)) == 3

    await wait_until("the three messages delivered to DB1", stored, timeout=120, every=0.05)
    user = await asyncio.to_thread(logged_in, front.port, ca)
    typ, data = await asyncio.to_thread(user.select, "INBOX")
    assert (typ, data) == ("OK", [b"3"])
    validity = user.untagged_responses["UIDVALIDITY"][0]
    before = await asyncio.to_thread(bodies, user)
    assert sorted(before) == [1, 2, 3]
    idler = await asyncio.to_thread(Idler, front.port, ca)
    assert idler.exists == 3

    async with mover_in_process(c) as (start, _):
        run = await start()
        # in the sync, after the target's first write: the user works on the source
        written = run.nodes.pause(lambda method, db, n: (method, db) == ("put_items", "DB2"))
        locked = run.nodes.pause(lambda method, db, n: (method, db) == ("set_state", "DB1"))
        await asyncio.wait_for(written.reached.wait(), timeout=240)
        await asyncio.to_thread(deliver, hubs, 4)
        told = await asyncio.to_thread(idler.until, b"* 4 EXISTS")
        flagged = await asyncio.to_thread(user.uid, "STORE", "1", "+FLAGS", r"(\Flagged)")
        assert flagged[0] == "OK", flagged
        appended = b"Subject: appended during the move\r\n\r\nduring\r\n"
        answer = await asyncio.to_thread(user.append, "INBOX", None, None, appended)
        assert re.search(rb"APPENDUID \d+ 5\]", answer[1][0]), answer
        told += await asyncio.to_thread(idler.until, b"* 5 EXISTS")
        await asyncio.to_thread(user.noop)
        before = await asyncio.to_thread(bodies, user)  # on the source, as the move runs
        assert sorted(before) == [1, 2, 3, 4, 5] and before[5] == appended
        written.release.set()

        # the source locked (the move's last step): a STORE waits for the move's end
        await asyncio.wait_for(locked.reached.wait(), timeout=240)
        store = asyncio.create_task(
            asyncio.to_thread(user.uid, "STORE", "2", "+FLAGS", r"(\Answered)")
        )

        async def waiting() -> bool:
            return "locked by a move; waiting" in front.log()

        await wait_until("the STORE waits on the lock", waiting, timeout=60, every=0.05)
        assert not store.done()
        locked.release.set()
        await outcome(c, run)
        stored = await asyncio.wait_for(store, timeout=120)
    assert stored[0] == "OK", stored

    target = await active_of(c, "DB2")
    on_db2 = await listing(c, target, TARGET)
    assert on_db2[1][1] == ("\\Flagged",) and on_db2[2][1] == ("\\Answered",), on_db2

    # after the move: the idling client hears of a delivery (on DB2 only)
    later = await asyncio.to_thread(deliver, hubs, 6)
    told += await asyncio.to_thread(idler.until, b"* 6 EXISTS")
    assert not any(b"EXPUNGE" in line for line in told), told
    done = await asyncio.to_thread(idler.done)
    assert done.split()[1] == b"OK", done

    def after_move() -> dict:
        out: dict = {"noop": user.noop()}
        out["bodies"] = bodies(user)
        out["store"] = user.uid("STORE", "3", "+FLAGS", r"(\Seen)")
        out["append"] = user.append("INBOX", r"(\Draft)", None, b"Subject: after\r\n\r\nafter\r\n")
        out["select"] = user.select("INBOX")
        out["validity"] = user.untagged_responses.get("UIDVALIDITY")
        user.logout()
        return out

    out = await asyncio.to_thread(after_move)
    assert out["store"][0] == "OK", out["store"]
    assert re.search(rb"APPENDUID %s 7\]" % validity, out["append"][1][0]), out["append"]
    assert out["select"] == ("OK", [b"7"]) and out["validity"] == [validity], out
    # no UID changed meaning: each one's bytes as before the move, and as DB2 holds them
    assert out["bodies"] == {**before, 6: out["bodies"].get(6)}, sorted(out["bodies"])
    assert out["bodies"][6].endswith(later)  # as delivered, below the transport's Received:
    on_db2 = await listing(c, target, TARGET)
    assert sorted(on_db2) == [1, 2, 3, 4, 5, 6, 7]
    assert on_db2[3][1] == ("\\Seen",) and on_db2[7][1] == ("\\Draft",), on_db2
    for uid, raw in out["bodies"].items():
        assert await node_bytes(c, target, TARGET, on_db2[uid][0]) == raw, uid
    text = await asyncio.to_thread(front.log)
    assert "following it from DB1 to DB2" in text
