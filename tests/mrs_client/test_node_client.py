"""The mover's node client against two fake nodes on real aiohttp servers (port 0): it
follows a switchover within a fraction of a second instead of failing into a stall."""

from __future__ import annotations

import asyncio
import json
import time

import aiohttp
import pytest
from aiohttp import web

from dag_common.config import parse_config
from dag_common.items_query import ItemsQuery
from dag_common.node_client import NodeStoreClient
from dag_common.rfc822 import BodyFormat
from dag_common.store_api import Item
from mrs_client.errors import NodeCallError
from tests.cluster_harness import cluster_config, serve_app


class FakeNode:
    """Answers status and item writes for DB2 as the active, the quiesced active or a
    passive copy, as `cluster` says."""

    def __init__(self, name: str, cluster: dict) -> None:
        self.name = name
        self.cluster = cluster
        self.writes = 0
        self.url = ""

    async def status(self, request: web.Request) -> web.Response:
        if self.name in self.cluster.get("mounting", ()):
            return web.json_response(status_of(self.name, "Active", "Dismounted"))
        active = self.cluster["active"] == self.name
        return web.json_response(
            status_of(
                self.name, "Active" if active else "Passive", "Mounted" if active else "Healthy"
            )
        )

    async def put(self, request: web.Request) -> web.Response:
        self.writes += 1
        self.cluster["hook"](self)
        active = self.cluster["active"]
        if self.name in self.cluster.get("failing", ()):  # a dismounted active: 503
            return web.json_response({"error": "dismounted after a failure"}, status=503)
        if self.name in {*self.cluster.get("changing", ()), *self.cluster.get("mounting", ())}:
            # a real node whose copy changes role: it names no active yet
            return web.json_response(
                {
                    "error": f"the copy of DB2 on {self.name} is changing role",
                    "active_node": None,
                    "active_url": None,
                    "switching_to": None,
                },
                status=409,
            )
        if active != self.name:
            url = self.cluster["urls"][active]
            return web.json_response(
                {"error": "passive", "active_node": active, "active_url": url}, status=409
            )
        if self.cluster["switching_to"]:
            return web.json_response(
                {
                    "error": f"DB2 is being switched over to {self.cluster['switching_to']}",
                    "active_node": self.name,
                    "active_url": self.url,
                    "switching_to": self.cluster["switching_to"],
                },
                status=409,
            )
        epoch = self.cluster["epoch"]
        return web.json_response(
            {
                "change_number": 9,
                "epoch": epoch,
                "lsn": {"generation": 4, "offset": 0, "epoch": epoch},
            },
            status=201,
        )


def status_of(node: str, role: str, status: str) -> dict:
    """A node's whole /v1/status, as a real node answers it (the mover reads it typed)."""
    copy = {"database": "DB2", "node": node, "site": "s", "activation_preference": 1}
    return {"node": node, "site": "s", "copies": [{**copy, "role": role, "status": status}]}


@pytest.fixture
async def two_nodes(tmp_path):
    cluster = {"active": "a", "switching_to": None, "epoch": 1, "urls": {}, "hook": lambda n: None}
    nodes, runners = {}, []
    for name in ("a", "b"):
        node = FakeNode(name, cluster)
        app = web.Application()
        app.router.add_get("/v1/status", node.status)
        app.router.add_post("/v1/databases/DB2/mailboxes/{m}/items", node.put)
        runner, node.url = await serve_app(app)
        cluster["urls"][name] = node.url
        nodes[name] = node
        runners.append(runner)
    config = parse_config(
        cluster_config(
            [(n, "s", nodes[n].url) for n in ("a", "b")],
            [
                {
                    "name": "DB2",
                    "copies": [
                        {"node": "a", "activation_preference": 1},
                        {"node": "b", "activation_preference": 2},
                    ],
                }
            ],
            cluster="t",
        ),
        base_dir=tmp_path,
    )
    async with aiohttp.ClientSession() as session:
        yield cluster, nodes, config, session
    for runner in runners:
        await runner.cleanup()


ITEM = [Item("m1", "Inbox", "s", "b", 0)]


async def test_a_switchover_is_followed_within_a_second(two_nodes):
    cluster, nodes, config, session = two_nodes
    cluster["switching_to"] = "b"

    def role_moves_on_the_fourth_write(node):
        if node.name == "a" and node.writes == 4:
            cluster.update(active="b", switching_to=None, epoch=2)

    cluster["hook"] = role_moves_on_the_fourth_write
    client = NodeStoreClient(config, token="t", session=session, follow_interval=0.05)
    started = time.monotonic()
    written = await client.put_items("DB2", "alice", ITEM)
    assert written.epoch == 2, "the answer names the new active's epoch"
    assert time.monotonic() - started < 1.5
    assert nodes["a"].writes == 4 and nodes["b"].writes == 1


async def test_a_copy_changing_role_that_names_no_active_is_followed(two_nodes):
    """The old active, asked again right after a switchover, answers 409 naming nobody while
    its copy changes role (and no copy is mounted yet): followed, not failed into a stall."""
    cluster, nodes, config, session = two_nodes
    client = NodeStoreClient(config, token="t", session=session, follow_interval=0.05)
    await client.put_items("DB2", "alice", ITEM)  # a's url remembered
    cluster.update(active=None, changing={"a"})
    loop = asyncio.get_running_loop()
    loop.call_later(0.3, lambda: cluster.update(active="b", changing=set(), epoch=2))
    written = await client.put_items("DB2", "alice", ITEM)
    assert written.epoch == 2 and nodes["b"].writes == 1


async def test_a_switchover_that_never_ends_fails_the_call_after_the_follow_timeout(two_nodes):
    cluster, _, config, session = two_nodes
    cluster["switching_to"] = "b"
    client = NodeStoreClient(
        config, token="t", session=session, follow_interval=0.05, follow_timeout=0.3
    )
    with pytest.raises(NodeCallError, match="switched over") as caught:
        await client.put_items("DB2", "alice", ITEM)
    assert caught.value.status == 409


async def test_a_moved_active_is_asked_at_once(two_nodes):
    cluster, nodes, config, session = two_nodes
    client = NodeStoreClient(config, token="t", session=session)
    assert (await client.put_items("DB2", "alice", ITEM)).epoch == 1
    cluster.update(active="b", epoch=3)  # a failover the client has not heard of
    assert (await client.put_items("DB2", "alice", ITEM)).epoch == 3
    assert nodes["a"].writes == 2 and nodes["b"].writes == 1


async def test_a_moved_active_still_mounting_is_followed(two_nodes):
    """The switchover's race CI saw: the old active names the new one, whose copy is the
    active and not mounted yet (its status says Dismounted, a write 409 naming nobody).  The
    call follows the mount instead of failing with 'no mounted active copy'."""
    cluster, nodes, config, session = two_nodes
    client = NodeStoreClient(config, token="t", session=session, follow_interval=0.05)
    await client.put_items("DB2", "alice", ITEM)  # a's url remembered
    cluster.update(active="b", mounting={"b"})
    loop = asyncio.get_running_loop()
    loop.call_later(0.3, lambda: cluster.update(mounting=set(), epoch=2))
    written = await client.put_items("DB2", "alice", ITEM)
    assert written.epoch == 2 and nodes["b"].writes >= 2


async def test_a_mount_under_way_is_followed_by_a_client_that_knows_no_active(two_nodes):
    cluster, nodes, config, session = two_nodes
    cluster.update(active=None, mounting={"b"})
    loop = asyncio.get_running_loop()
    loop.call_later(0.3, lambda: cluster.update(active="b", mounting=set(), epoch=2))
    client = NodeStoreClient(config, token="t", session=session, follow_interval=0.05)
    written = await client.put_items("DB2", "alice", ITEM)
    assert written.epoch == 2 and nodes["b"].writes == 1


async def test_no_active_and_no_mount_under_way_fails_at_once(two_nodes):
    """An outage (every copy passive, none mounting) is not followed: the call fails with the
    reason, well before the follow timeout."""
    cluster, _, config, session = two_nodes
    cluster.update(active=None)
    client = NodeStoreClient(
        config, token="t", session=session, follow_interval=0.05, follow_timeout=30.0
    )
    started = time.monotonic()
    with pytest.raises(NodeCallError, match="no mounted active copy of DB2 can be reached"):
        await client.put_items("DB2", "alice", ITEM)
    assert time.monotonic() - started < 10, "failed at once, not after following for 30 s"


async def test_an_active_answering_503_is_looked_for_again_on_the_next_call(two_nodes):
    """A dismounted active (503) is not asked again and again while another copy has been
    made active: the next call finds the active afresh."""
    cluster, _, config, session = two_nodes
    client = NodeStoreClient(config, token="t", session=session)
    await client.put_items("DB2", "alice", ITEM)  # a's url remembered
    cluster.update(failing={"a"})
    with pytest.raises(NodeCallError) as caught:
        await client.put_items("DB2", "alice", ITEM)
    assert caught.value.status == 503
    cluster.update(active="b", epoch=2)  # a still answers 503: it is the failed old active
    assert (await client.put_items("DB2", "alice", ITEM)).epoch == 2


@pytest.fixture
async def broken_node(tmp_path):
    """One node that says it is DB2's active, then answers writes as `mode` says."""
    state = {"mode": "html500"}

    async def status(request: web.Request) -> web.Response:
        if state["mode"] == "401":
            return web.json_response({"error": "missing or wrong cluster token"}, status=401)
        return web.json_response(status_of("a", "Active", "Mounted"))

    async def put(request: web.Request) -> web.StreamResponse:
        mode = state["mode"]
        if mode == "html500":
            return web.Response(
                status=500, text="<html><body>500 Internal Server Error</body></html>",
                content_type="text/html",
            )  # fmt: skip
        if mode == "cut":
            resp = web.StreamResponse(status=201, headers={"Content-Length": "500"})
            await resp.prepare(request)
            await resp.write(b'{"change_number": 9, "ep')
            request.transport.close()  # type: ignore[union-attr]
            return resp
        if mode == "empty200":
            return web.Response(status=200, body=b"")
        return web.json_response({"error": "missing or wrong cluster token"}, status=401)

    async def listing(request: web.Request) -> web.Response:
        # As the standard library's json.dumps writes it: a lone surrogate as "\ud800"
        return web.Response(body=state["listing"], content_type="application/json")

    app = web.Application()
    app.router.add_get("/v1/status", status)
    app.router.add_post("/v1/databases/DB2/mailboxes/{m}/items", put)
    app.router.add_get("/v1/databases/DB2/mailboxes/{m}/items", listing)
    runner, url = await serve_app(app)
    config = parse_config(
        cluster_config(
            [("a", "s", url)],
            [{"name": "DB2", "copies": [{"node": "a", "activation_preference": 1}]}],
            cluster="t",
        ),
        base_dir=tmp_path,
    )
    async with aiohttp.ClientSession() as session:
        yield state, NodeStoreClient(config, token="t", session=session)
    await runner.cleanup()


@pytest.mark.parametrize(
    ("mode", "status", "fragment"),
    [
        ("html500", 500, "HTTP 500 with a body that is not JSON: '<html><body>500 Internal"),
        ("cut", None, "node a (http://127.0.0.1:"),  # its answer was cut short
        ("empty200", None, "HTTP 200 with a body that is not JSON: 'an empty body'"),
        ("401", 401, "authentication failed"),
    ],
    ids=["HTML 500", "connection closed mid-answer", "empty 200", "wrong token"],
)
async def test_a_broken_answer_is_a_failed_call_never_a_crash(broken_node, mode, status, fragment):
    state, client = broken_node
    state["mode"] = mode
    with pytest.raises(NodeCallError) as caught:
        await client.put_items("DB2", "alice", ITEM)
    assert caught.value.status == status
    assert fragment in str(caught.value)


def row(item_id, cn, **changes):
    base = {"item_id": item_id, "folder": "Inbox", "subject": "s", "body": "b"}
    return {**base, "change_number": cn, "deleted": False, **changes}


@pytest.mark.parametrize("first_body", ["b", "x" * (2 << 20)], ids=["small", "over 1 MiB"])
async def test_an_item_of_a_listing_that_is_not_one_comes_back_unreadable(broken_node, first_body):
    """The rest of the page as it is: the mover skips that one as a bad item.  (A page over
    1 MiB is parsed from text, its bytes let go first: the same items.)"""
    state, client = broken_node
    rows = [
        row("m1", 1, body=first_body),
        row("m2", 2, subject="\ud800"),  # text UTF-8 cannot carry
        row("m3", 3, body=None),
        {"item_id": "m4", "change_number": 4},
        row("m5", 5, body="été"),
    ]
    state["listing"] = json.dumps({"items": rows, "last_change_number": 5, "epoch": 2}).encode()
    listed = await client.items("DB2", "alice", ItemsQuery(0, 10))
    assert [(i.item_id, i.change_number, bool(i.unreadable)) for i in listed.items] == [
        ("m1", 1, False),
        ("m2", 2, True),
        ("m3", 3, True),
        ("m4", 4, True),
        ("m5", 5, False),
    ]
    assert "lone surrogate" in listed.items[1].unreadable
    assert "NoneType" in listed.items[2].unreadable
    assert "folder" in listed.items[3].unreadable
    assert listed.items[4].body == "été" and listed.epoch == 2
    assert listed.items[0].body == first_body


async def test_an_items_format_is_read_and_one_the_mover_does_not_know_is_unreadable(
    broken_node,
):
    """Issue 49: a message is listed with its format (a text item without one); a format
    the mover does not know is never taken for text: the item is unreadable (skipped)."""
    state, client = broken_node
    rows = [row("m1", 1), row("m2", 2, format="message-8bit"), row("m3", 3, format="mbox")]
    state["listing"] = json.dumps({"items": rows, "last_change_number": 3}).encode()
    listed = await client.items("DB2", "alice", ItemsQuery(0, 10))
    assert [(i.format, bool(i.unreadable)) for i in listed.items] == [
        (BodyFormat.TEXT, False),
        (BodyFormat.MESSAGE_8BIT, False),
        (BodyFormat.TEXT, True),
    ]
    assert "mbox" in listed.items[2].unreadable


async def test_a_listing_without_bodies_comes_back_as_items_without_bodies(broken_node):
    state, client = broken_node
    head = {**row("m1", 1, size=3, body_hash="ab" * 32), "commit_time": "t"}
    del head["body"]
    older = row("m4", 4, body="été")  # a node older than `bodies=false` lists the body
    rows = [
        head,
        {**head, "item_id": "m2", "size": "3"},
        {**head, "item_id": "m3", "body_hash": 7},
        older,
    ]
    state["listing"] = json.dumps({"items": rows, "last_change_number": 4, "epoch": 2}).encode()
    listed = await client.items("DB2", "alice", ItemsQuery(0, 10, bodies=False))
    first, *bad, last = listed.items
    assert (first.body, first.body_hash, first.size, first.has_body) == ("", "ab" * 32, 4, False)
    assert [(i.item_id, bool(i.unreadable)) for i in bad] == [("m2", True), ("m3", True)]
    assert (last.body, last.size, last.has_body) == ("", 1 + 5, False)
    assert last.content() == Item("m4", "Inbox", "s", "été", 4).content()
