"""The transport over real processes: three nodes, a transport, messages that are never lost
and never delivered twice — through a locked mailbox, a transport killed with messages
queued, a switchover, and a lossy failover whose new active asks for redelivery."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys

import pytest

from dag_common.api_types import item_id_for
from tests.cluster_harness import ROOT, wait_until
from tests.human_output import reprs
from tests.mrs_client.e2e import shorten_guarantee_waits
from tests.mrs_client.test_move_e2e import FAST, mrs
from tests.replication_node.e2e import converged, three_nodes
from tests.transport.harness import Hubs

pytestmark = pytest.mark.slow


@pytest.fixture
async def lab(tmp_path):
    cluster = three_nodes(tmp_path, defaults={"failover_after": None})
    cluster.config["databases"][1]["max_item_size"] = "200KiB"  # DB2
    hubs = Hubs(cluster, "hub1")
    await cluster.start()
    await cluster.wait_status("mbx2", "DB2", "Mounted")
    await cluster.ok("PUT", "mbx2", "/v1/databases/DB2/mailboxes/bob")
    await hubs.start("hub1")
    try:
        yield cluster, hubs
    finally:
        hubs.stop_all()
        await cluster.close()


async def items_of(cluster, node: str, mailbox: str = "bob") -> dict[str, dict]:
    return await cluster.items(node, "DB2", mailbox)


def ids(*message_ids: str) -> set[str]:
    return {item_id_for(m) for m in message_ids}


async def test_messages_are_delivered_once_and_bad_ones_refused_with_a_reason(lab):
    cluster, hubs = lab
    sent = [f"<m{n}@example>" for n in range(40)]
    answers = await asyncio.gather(*(hubs.submit("hub1", m, "bob") for m in sent))
    assert {status for status, _ in answers} == {201}
    # the same message id again (a sender that did not hear the answer): nothing queued
    status, body = await hubs.submit("hub1", sent[0], "bob")
    assert status == 200 and body["accepted"] is False
    state = await hubs.drained("hub1")
    assert state["deliveries"]["Delivered"] == 40
    assert state["dumpsters"] == [
        {"database": "DB2", "messages": 40, "bytes": state["dumpsters"][0]["bytes"]}
    ]
    bob = await items_of(cluster, "mbx2")
    assert set(bob) == ids(*sent)
    assert bob[item_id_for(sent[3])]["subject"] == f"subject of {sent[3]}"

    status, body = await hubs.submit("hub1", "<x@example>", "bob", "nobody")
    assert status == 400 and body["unknown_recipients"] == ["nobody"]
    status, body = await hubs.submit("hub1", "<big@example>", "bob", body="x" * 300_000)
    assert status == 413 and body["max_item_size"] == 200 * 1024
    status, body = await hubs.call("POST", "hub1", "/v1/messages", json={"recipients": ["bob"]})
    assert status == 400 and "message_id" in body["error"]
    status, _ = await hubs.call("POST", "hub1", "/v1/messages", data=b"{", headers={})
    assert status == 400
    status, _ = await hubs.call(
        "GET", "hub1", "/v1/queue", headers={"Authorization": "Bearer wrong"}
    )
    assert status == 401
    assert set(await items_of(cluster, "mbx2")) == ids(*sent), "a refused message wrote nothing"
    states = (await hubs.drained("hub1"))["deliveries"]
    assert states == {"Queued": 0, "Delivered": 40, "Poison": 0}


async def test_messages_wait_for_a_locked_mailbox_and_survive_a_killed_transport(lab):
    cluster, hubs = lab
    await cluster.ok("POST", "mbx2", "/v1/databases/DB2/mailboxes/bob/lock")
    sent = [f"<q{n}@example>" for n in range(20)]
    for m in sent:
        assert (await hubs.submit("hub1", m, "bob"))[0] == 201
    _, state = await hubs.call("GET", "hub1", "/v1/queue")
    assert state["deliveries"]["Queued"] == 20, "locked by a move: they wait"
    hubs.kill("hub1")  # kill -9 with every message queued
    await cluster.ok("POST", "mbx2", "/v1/databases/DB2/mailboxes/bob/unlock")
    await hubs.start("hub1")
    await hubs.drained("hub1")
    assert set(await items_of(cluster, "mbx2")) == ids(*sent)


async def test_delivery_follows_a_switchover_losing_and_doubling_nothing(lab):
    cluster, hubs = lab
    sent: list[str] = []

    async def keep_sending() -> None:
        for n in range(150):
            m = f"<s{n}@example>"
            status, body = await hubs.submit("hub1", m, "bob")
            assert status == 201, body
            sent.append(m)
            await asyncio.sleep(0.01)

    # the target must be a copy a switchover may move to (seeded, following): the
    # switchover is what is under test, under delivery, not its refusal of a new copy
    await cluster.wait_status("mbx3", "DB2", "Healthy")
    sender = asyncio.create_task(keep_sending())
    await wait_until("messages flowing", lambda: len(sent) >= 10)
    switched = await asyncio.to_thread(
        cluster.node_cli, "db", "switchover", "DB2", "--to", "mbx3", "--json"
    )
    assert switched.returncode == 0, switched.stderr
    await sender
    await hubs.drained("hub1")
    assert set(await items_of(cluster, "mbx3")) == ids(*sent)


async def test_a_lossy_failover_is_made_whole_by_the_dumpster(lab):
    cluster, hubs = lab
    before = [f"<a{n}@example>" for n in range(30)]
    for m in before:
        await hubs.submit("hub1", m, "bob")
    await hubs.drained("hub1")
    await converged(cluster, "DB2", "mbx2", ["mbx3"])
    # delivered (durable on the active, in its open log) while mbx3 copies nothing: lost
    # with mbx2, as the seeds' lossy failover loses what was not yet copied
    await cluster.ok("POST", "mbx3", "/v1/databases/DB2/copies/mbx3/suspend")
    lost = [f"<b{n}@example>" for n in range(20)]
    for m in lost:
        await hubs.submit("hub1", m, "bob")
    await hubs.drained("hub1")
    assert set(await items_of(cluster, "mbx2")) == ids(*before, *lost)
    cluster.kill("mbx2")
    await cluster.ok("POST", "mbx3", "/v1/databases/DB2/copies/mbx3/resume")
    await cluster.wait_status("mbx3", "DB2", "DisconnectedAndHealthy")
    activated = await cluster.ok(
        "POST", "mbx3", "/v1/databases/DB2/activate", json={"node": "mbx3"}
    )
    assert activated["lost_logs"] >= 1
    await cluster.wait_status("mbx3", "DB2", "Mounted")

    async def redelivered() -> bool:
        report = (await cluster.status("mbx3"))["DB2"]
        return "Success" in (report.get("redelivery") or "")

    await cluster.wait_for("the dumpster's redelivery to succeed", redelivered)
    await hubs.drained("hub1")
    bob = await items_of(cluster, "mbx3")
    assert set(bob) == ids(*before, *lost), "every accepted message, exactly once"
    # the window is the seeds' (12 h back): every message this transport delivered to DB2
    assert "transport hub1 redelivered 50 messages" in cluster.log("mbx3")
    status = await asyncio.to_thread(cluster.node_cli, "status", "--json")
    assert status.returncode == 1, "mbx2 is down: said, with the rest shown"
    copies = json.loads(status.stdout)
    (db2,) = [c for c in copies if c["database"] == "DB2" and c.get("role") == "Active"]
    assert "Success" in db2["redelivery"]


async def test_two_lossy_failovers_in_a_row_with_the_transport_down_widen_one_redelivery(lab):
    """The seeds: "if multiple lossy failures take place, the new loss window is added to
    the previous one"; a transport that cannot be reached is asked again every interval,
    until it answers (here: once it is back, after the second failover)."""
    cluster, hubs = lab
    await cluster.ok("PUT", "mbx1", "/v1/databases/DB1/mailboxes/carol")
    first = [f"<c{n}@example>" for n in range(20)]
    for m in first:
        await hubs.submit("hub1", m, "carol")
    await hubs.drained("hub1")
    await converged(cluster, "DB1", "mbx1", ["mbx2", "mbx3"])
    for node in ("mbx2", "mbx3"):
        await cluster.ok("POST", node, f"/v1/databases/DB1/copies/{node}/suspend")
    lost = [f"<d{n}@example>" for n in range(10)]
    for m in lost:
        await hubs.submit("hub1", m, "carol")
    await hubs.drained("hub1")
    hubs.kill("hub1")  # down through both failovers
    cluster.kill("mbx1")
    for node in ("mbx2", "mbx3"):
        await cluster.ok("POST", node, f"/v1/databases/DB1/copies/{node}/resume")
    await cluster.wait_status("mbx2", "DB1", "DisconnectedAndHealthy")
    one = await cluster.ok("POST", "mbx2", "/v1/databases/DB1/activate", json={"node": "mbx2"})
    assert one["lost_logs"] >= 1
    await cluster.wait_status("mbx2", "DB1", "Mounted")
    history = await asyncio.to_thread(cluster.node_cli, "db", "history", "DB1")
    assert "pending from hub1" in history.stdout, history.stdout
    # the second: mbx2 acknowledges writes mbx3 never copies, then is lost too
    await converged(cluster, "DB1", "mbx2", ["mbx3"])
    await cluster.ok("POST", "mbx3", "/v1/databases/DB1/copies/mbx3/suspend")
    await cluster.ok(
        "POST", "mbx2", "/v1/databases/DB1/mailboxes/carol/items",
        json={"item_id": "direct", "subject": "not through a transport"},
    )  # fmt: skip
    cluster.kill("mbx2")
    await cluster.ok("POST", "mbx3", "/v1/databases/DB1/copies/mbx3/resume")
    await cluster.wait_status("mbx3", "DB1", "DisconnectedAndHealthy")
    two = await cluster.ok("POST", "mbx3", "/v1/databases/DB1/activate", json={"node": "mbx3"})
    assert two["lost_logs"] >= 1
    await cluster.wait_status("mbx3", "DB1", "Mounted")
    history = await cluster.ok("GET", "mbx3", "/v1/databases/DB1/history")
    record = history["redelivery"]
    assert record["epochs"] == [one["epoch"], two["epoch"]] and record["servers"] == ["hub1"]
    assert record["required"] is True

    await hubs.start("hub1")

    async def answered() -> bool:
        body = await cluster.ok("GET", "mbx3", "/v1/databases/DB1/history")
        return body["redelivery"]["ended"] == "Success"

    await cluster.wait_for("hub1's answer to the widened redelivery", answered)
    await hubs.drained("hub1")
    carol = await cluster.items("mbx3", "DB1", "carol")
    assert set(carol) == ids(*first, *lost), "every message, once; the direct write is lost"
    history = await asyncio.to_thread(cluster.node_cli, "db", "history", "DB1")
    assert "Success" in history.stdout.splitlines()[-1], history.stdout


async def test_delivery_follows_a_move_of_the_mailbox(tmp_path):
    """Messages for bob keep coming while a real `mrs move` takes bob from DB2 to DB1: the
    transport waits out the locked source and follows the directory to the new database;
    nobody needs to tell it where bob went."""
    cluster = three_nodes(tmp_path, defaults={"failover_after": None})
    shorten_guarantee_waits(cluster)
    hubs = Hubs(cluster, "hub1")
    await cluster.start()
    api = await cluster.start_guarantee_api()
    try:
        await cluster.wait_status("mbx2", "DB2", "Mounted")
        await cluster.ok("PUT", "mbx2", "/v1/databases/DB2/mailboxes/bob")
        await hubs.start("hub1")
        sent: list[str] = []
        moving = asyncio.Event()

        async def keep_sending() -> None:
            n = 0
            while not moving.is_set() or n < 40:
                m = f"<v{n}@example>"
                status, body = await hubs.submit("hub1", m, "bob", body="x" * 2000)
                assert status == 201, body
                sent.append(m)
                n += 1
                await asyncio.sleep(0.02)

        sender = asyncio.create_task(keep_sending())
        await asyncio.sleep(0.5)
        moved = await asyncio.to_thread(
            mrs, cluster, "move", "--mailbox", "bob", "--to", "DB1", *FAST
        )
        moving.set()
        await sender
        assert moved.returncode == 0, moved.stdout + moved.stderr
        where = await asyncio.to_thread(cluster.node_cli, "mailbox", "where", "bob", "--json")
        assert json.loads(where.stdout)["database"] == "DB1"
        await hubs.drained("hub1")
        bob = {k: v for k, v in (await cluster.items("mbx1", "DB1", "bob")).items()}
        assert {k for k, v in bob.items() if not v["deleted"]} == ids(*sent)
        _, state = await hubs.call("GET", "hub1", "/v1/queue")
        databases = {d["database"] for d in state["dumpsters"]}
        assert databases == {"DB1", "DB2"}, "delivered to both, each kept in its dumpster"
    finally:
        hubs.stop_all()
        api.terminate()
        api.wait(timeout=20)
        await cluster.close()


async def test_a_message_no_try_can_deliver_ends_in_the_poison_queue_with_why(lab):
    cluster, hubs = lab
    message = {"message_id": "<nofolder@example>", "recipients": ["bob"], "folder": "Archive"}
    status, _ = await hubs.call("POST", "hub1", "/v1/messages", json=message)
    assert status == 201, "accepted: the folder is the mailbox's to have or not"

    async def poisoned() -> bool:
        _, body = await hubs.call("GET", "hub1", "/v1/poison")
        return bool(body["poison"])

    await cluster.wait_for("the message in the poison queue", poisoned)
    listed = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "transport.cli", "poison", "--config", str(cluster.config_path),
         "--via", "hub1"],
        capture_output=True, text=True, env=cluster.env(), cwd=ROOT, timeout=60,
    )  # fmt: skip
    assert listed.returncode == 0, listed.stderr
    assert "<nofolder@example> -> bob after 5 tries" in listed.stdout
    assert "has no folder 'Archive'" in listed.stdout
    assert set(await items_of(cluster, "mbx2")) == set(), "nothing written"


def transport_cli(
    cluster, *args: str, token: str | None = None
) -> subprocess.CompletedProcess[str]:
    env = {**cluster.env(), **({"DG_AUTH_TOKEN": token} if token else {})}
    return subprocess.run(
        [sys.executable, "-m", "transport.cli", *args, "--config", str(cluster.config_path)],
        capture_output=True, text=True, env=env, cwd=ROOT, timeout=60,
    )  # fmt: skip


async def test_the_command_line_says_what_it_did_in_words(lab):
    """Issue 48: `transport submit` said `accepted for ['alice', 'bob']`."""
    cluster, hubs = lab
    await cluster.ok("PUT", "mbx2", "/v1/databases/DB2/mailboxes/carol")
    sent = ["submit", "--via", "hub1", "--to", "bob", "--to", "carol", "--message-id", "<w@x>"]
    first = await asyncio.to_thread(transport_cli, cluster, *sent)
    assert (first.returncode, first.stdout, first.stderr) == (
        0, "<w@x>: accepted for bob, carol\n", ""
    )  # fmt: skip
    again = await asyncio.to_thread(transport_cli, cluster, *sent)
    assert again.stdout == "<w@x>: already accepted (nothing queued again)\n", again.stderr
    await hubs.drained("hub1")
    status = await asyncio.to_thread(transport_cli, cluster, "status", "--via", "hub1")
    assert status.returncode == 0, status.stderr
    assert status.stdout.startswith("transport hub1: 0 waiting, 0 queued, 2 in the dumpster")
    assert reprs(status.stdout) == [], status.stdout
    # A token the transport refuses is said as every command says it: one line, exit 2.
    for args in (("status", "--via", "hub1"), ("poison", "--via", "hub1"), sent):
        refused = await asyncio.to_thread(
            transport_cli, cluster, *args, token="not-the-cluster-token-0123"
        )
        assert (refused.returncode, refused.stdout) == (2, ""), (args, refused)
        assert refused.stderr == "error: authentication failed (check the token)\n", refused
