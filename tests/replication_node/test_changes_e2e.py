"""A mailbox's change feed (`GET …/mailboxes/{mb}/changes`, issue 50's step 3) over real
node processes: a waiter is answered by a put made while it waits, a quiet wait ends with
the cursor it was given, a lock reaches it as a state, a switchover wakes every waiter with
an answer that says the copy is no longer the active (and the node client, following it,
learns the new epoch), bad input is refused, the node's waiters are capped (503 with
Retry-After), and a caller that goes away frees its slot.

Clock-free: no test sleeps.  A waiter asks for a wait of 60 s over a session that gives up
after 30 s: any answer it gets came before its wait's end, woken by what the test did."""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp
import pytest
from prometheus_client.parser import text_string_to_metric_families

from dag_common.auth import bearer
from dag_common.config import ClusterConfig
from dag_common.node_client import NodeStoreClient
from tests.cluster_harness import TOKEN, LocalCluster
from tests.replication_node.e2e import converged, two_nodes

pytestmark = pytest.mark.slow

BOX = "/v1/databases/DB1/mailboxes/alice"
FEED = f"{BOX}/changes"
LONG = "60"  # seconds: longer than the session's 30 s, so an answer means a wake
MAX = 2**63 - 1  # a change number no mailbox reaches: only the end of the feed answers


@pytest.fixture
async def cluster(tmp_path):
    c = two_nodes(tmp_path)
    for node in c.config["nodes"]:
        node["change_waiters"] = 2
    c.write_config()
    await c.start()
    await c.wait_status("mbx1", "DB1", "Mounted")
    await c.ok("PUT", "mbx1", BOX)
    yield c
    await c.close()


async def waiters(c: LocalCluster, node: str = "mbx1") -> float | None:
    """The node's `replication_change_waiters`."""
    text = (await c.call("GET", node, "/metrics"))[1].decode()
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "replication_change_waiters":
                return sample.value
    return None


async def waiting(c: LocalCluster, n: int) -> None:
    async def reached() -> bool:
        return await waiters(c) == n

    await c.wait_for(f"{n} change-feed waiters on mbx1", reached)


def feed(c: LocalCluster, node: str = "mbx1", **params: Any) -> asyncio.Task[tuple[int, Any]]:
    """GET the feed on `node` as a task (`params` its query)."""
    query = {k: str(v) for k, v in params.items()}
    return asyncio.ensure_future(c.call("GET", node, FEED, params=query))


async def test_a_waiter_is_answered_by_a_put_and_a_quiet_wait_by_its_cursor(cluster):
    c = cluster
    code, first = await c.call("GET", "mbx1", FEED, params={"since_change": "0", "wait": "0"})
    assert code == 200, first
    assert first["changed"] is True and first["state"] == "live"
    cursor, epoch = first["last_change_number"], first["epoch"]
    assert epoch == (await c.ok("GET", "mbx1", BOX))["epoch"] > 0

    # A waiter, then a put while it waits: it is answered with the put, in its folder.
    task = feed(c, since_change=cursor, wait=LONG, epoch=epoch)
    await waiting(c, 1)
    written = await c.ok("POST", "mbx1", f"{BOX}/items", json={"folder": "Inbox", "body": "hi"})
    code, answer = await task
    assert code == 200, answer
    assert answer["changed"] is True and answer["folders"] == ["Inbox"]
    assert answer["last_change_number"] >= written["change_number"] > cursor
    assert answer["epoch"] == epoch and answer["since_change"] == cursor
    await waiting(c, 0)

    # A quiet wait ends unchanged, with the cursor it was given.
    cursor = answer["last_change_number"]
    code, quiet = await c.call(
        "GET", "mbx1", FEED, params={"since_change": str(cursor), "wait": "0.3"}
    )
    assert code == 200, quiet
    assert quiet["changed"] is False and quiet["last_change_number"] == cursor
    assert quiet["folders"] == []

    # A change of another mailbox does not answer it; a lock of its own does, as a state.
    await c.ok("PUT", "mbx1", "/v1/databases/DB1/mailboxes/bob")
    task = feed(c, since_change=cursor, wait=LONG)
    await waiting(c, 1)
    await c.ok("POST", "mbx1", "/v1/databases/DB1/mailboxes/bob/items", json={"body": "x"})
    await c.ok("POST", "mbx1", f"{BOX}/lock")
    code, locked = await task
    assert code == 200 and locked["changed"] is True and locked["state"] == "locked", locked
    assert locked["folders"] == []  # the mailbox's own change: its state says it

    # An epoch the caller names that is not the copy's: answered at once, unchanged.
    cursor = locked["last_change_number"]
    code, moved = await c.call(
        "GET",
        "mbx1",
        FEED,
        params={"since_change": str(cursor), "wait": LONG, "epoch": str(epoch + 7)},
    )
    assert code == 200 and moved["changed"] is False and moved["epoch"] == epoch, moved

    # The node client's call.
    async with aiohttp.ClientSession() as session:
        client = NodeStoreClient(
            ClusterConfig.model_validate(c.config), token=TOKEN, session=session
        )
        changes = await client.changes("DB1", "alice", cursor, wait=0.2, epoch=epoch)
        assert changes is not None and not changes.changed
        assert changes.last_change_number == cursor and changes.state == "locked"
        assert await client.changes("DB1", "carol", 0, wait=0) is None


async def test_bad_input_is_refused_a_passive_names_the_active_and_a_dismount_answers(cluster):
    c = cluster
    for params, word in [
        ({"since_change": "abc"}, "since_change"),
        ({"since_change": "-1"}, "since_change"),
        ({"since_change": str(2**63)}, "since_change"),
        ({"wait": "61"}, "wait"),
        ({"wait": "-1"}, "wait"),
        ({"wait": "nan"}, "wait"),
        ({"wait": "soon"}, "wait"),
        ({"epoch": "x"}, "epoch"),
    ]:
        code, body = await c.call("GET", "mbx1", FEED, params=params)
        assert code == 400 and word in body["error"], (params, body)
    code, body = await c.call("GET", "mbx1", "/v1/databases/DB1/mailboxes/carol/changes")
    assert code == 404 and "carol" in body["error"], body
    code, body = await c.call("GET", "mbx1", "/v1/databases/DB9/mailboxes/alice/changes")
    assert code == 404, body
    code, body = await c.call("GET", "mbx1", "/v1/databases/DB1/mailboxes/a%20b/changes")
    assert code == 400, body
    code, body = await c.call("GET", "mbx2", FEED, params={"wait": "0"})
    assert code == 409 and body["active_node"] == "mbx1", body
    async with aiohttp.ClientSession() as anonymous, anonymous.get(f"{c.url('mbx1')}{FEED}") as r:
        assert r.status == 401
    assert await waiters(c) == 0, "nothing refused was counted as waiting"

    # An operator's dismount answers the waiter: 503, saying so; a mount serves it again.
    task = feed(c, wait=LONG, since_change=MAX)
    await waiting(c, 1)
    await c.ok("POST", "mbx1", "/v1/databases/DB1/dismount")
    code, body = await task
    assert code == 503 and "dismounted" in body["error"], body
    await c.ok("POST", "mbx1", "/v1/databases/DB1/mount")
    code, body = await c.call("GET", "mbx1", FEED, params={"wait": "0"})
    assert code == 200 and body["changed"] is True, body


async def test_the_waiters_are_capped_and_a_caller_gone_frees_its_slot(cluster):
    c = cluster
    cursor = (await c.ok("GET", "mbx1", FEED, params={"wait": "0"}))["last_change_number"]
    stays = feed(c, since_change=cursor, wait=LONG)
    leaving = aiohttp.ClientSession(headers=bearer(TOKEN))
    url = f"{c.url('mbx1')}{FEED}?since_change={cursor}&wait={LONG}"
    leaves = asyncio.ensure_future(leaving.get(url))
    await waiting(c, 2)

    code, body = await c.call(
        "GET", "mbx1", FEED, params={"since_change": str(cursor), "wait": "0"}
    )
    assert code == 503 and "change_waiters" in body["error"], body
    async with c.session.get(f"{c.url('mbx1')}{FEED}") as resp:  # type: ignore[union-attr]
        assert resp.status == 503 and int(resp.headers["Retry-After"]) > 0

    leaves.cancel()
    await leaving.close()  # its connection closed: the node frees the slot
    await waiting(c, 1)
    await c.ok("POST", "mbx1", f"{BOX}/items", json={"body": "for the one that stayed"})
    code, answer = await stays
    assert code == 200 and answer["changed"] is True, answer
    await waiting(c, 0)
    text = (await c.call("GET", "mbx1", "/metrics"))[1].decode()
    assert "replication_change_waiters_refused_total 2.0" in text


async def test_a_switchover_wakes_every_waiter(cluster):
    c = cluster
    await c.ok("POST", "mbx1", f"{BOX}/items", json={"body": "before"})
    first = await c.ok("GET", "mbx1", FEED, params={"wait": "0"})
    cursor, epoch = first["last_change_number"], first["epoch"]
    await converged(c, "DB1", "mbx1", ["mbx2"])

    raw = feed(c, since_change=cursor, wait=LONG, epoch=epoch)
    async with aiohttp.ClientSession() as session:
        client = NodeStoreClient(
            ClusterConfig.model_validate(c.config),
            token=TOKEN,
            session=session,
            follow_interval=0.1,
        )
        followed = asyncio.ensure_future(
            client.changes("DB1", "alice", cursor, wait=float(LONG), epoch=epoch)
        )
        await waiting(c, 2)
        await c.ok("POST", "mbx1", "/v1/databases/DB1/switchover", json={"target": "mbx2"})

        # The old active's waiter: told the copy is not the active any more.
        code, told = await raw
        assert code == 409 and "active_url" in told, told
        # The node client's: followed to the new active, which names its own epoch.
        changes = await asyncio.wait_for(followed, 30)
        assert changes is not None and changes.epoch > epoch, changes
        assert changes.last_change_number >= cursor and changes.state == "live"

    new_epoch = changes.epoch
    code, there = await c.call(
        "GET", "mbx2", FEED,
        params={"since_change": str(cursor), "wait": "0", "epoch": str(new_epoch)},
    )  # fmt: skip
    assert code == 200 and there["epoch"] == new_epoch and there["changed"] is False, there
    # A number from before the new active's mount: its store answers, naming the folders.
    code, old = await c.call("GET", "mbx2", FEED, params={"since_change": "0", "wait": "0"})
    assert code == 200 and old["changed"] is True and old["folders"] == ["Inbox"], old
    code, here = await c.call("GET", "mbx1", FEED, params={"wait": "0"})
    assert code == 409 and here["active_node"] == "mbx2", here
