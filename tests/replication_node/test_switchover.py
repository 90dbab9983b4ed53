"""The switchover's coordinator (`Switchover` over `HttpPeers`) against two fake nodes on
real aiohttp servers (port 0) and a real cluster store file, on an injected clock: what it
does when the copy taking over stops answering in the middle (the old active must not stay
quiesced, its writes refused, until the catch-up deadline)."""

from __future__ import annotations

import asyncio

import aiohttp
import pytest
from aiohttp import web

from dag_common.clock import ManualClock
from dag_common.cluster_store.embedded import EmbeddedClusterStore
from dag_common.config import parse_config
from replication_node.cluster.peers import HttpPeers
from replication_node.cluster.switchover import TARGET_SILENT_ABANDON, Switchover
from replication_node.errors import Conflict
from tests.cluster_harness import cluster_config, serve_app


def status_of(node: str, role: str, status: str, replayed: int) -> dict:
    copy = {
        "database": "DB1",
        "node": node,
        "site": "s",
        "activation_preference": 1,
        "role": role,
        "status": status,
        "last_log_replayed": replayed,
    }
    return {"node": node, "site": "s", "copies": [copy]}


class FakeActive:
    """The old active: quiesces at generation 7, and records an unquiesce."""

    def __init__(self) -> None:
        self.calls: list[str] = []
        self.quiesced: dict = {"last_log_generated": 7}

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_post("/v1/databases/DB1/quiesce", self.quiesce)
        app.router.add_post("/v1/databases/DB1/unquiesce", self.unquiesce)
        return app

    async def quiesce(self, request: web.Request) -> web.Response:
        self.calls.append("quiesce")
        return web.json_response(self.quiesced)

    async def unquiesce(self, request: web.Request) -> web.Response:
        self.calls.append("unquiesce")
        return web.json_response({})


class FakeTarget:
    """The copy taking over: Healthy, replayed through 5, until `gone` (then it answers
    nothing, like a node killed mid-switchover whose port still accepts)."""

    def __init__(self) -> None:
        self.gone = asyncio.Event()
        self.asked = 0

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/v1/status", self.status)
        return app

    async def status(self, request: web.Request) -> web.Response:
        self.asked += 1
        if self.gone.is_set():
            raise web.HTTPServiceUnavailable()
        return web.json_response(status_of("b", "Passive", "Healthy", 5))


@pytest.fixture
async def two_nodes(tmp_path):
    active, target = FakeActive(), FakeTarget()
    runners, urls = [], {}
    for name, fake in (("a", active), ("b", target)):
        runner, urls[name] = await serve_app(fake.app())
        runners.append(runner)
    config = parse_config(
        cluster_config(
            [(n, "s", urls[n]) for n in ("a", "b")],
            [
                {
                    "name": "DB1",
                    "copies": [
                        {"node": "a", "activation_preference": 1},
                        {"node": "b", "activation_preference": 2},
                    ],
                }
            ],
        ),
        base_dir=tmp_path,
    )
    store = EmbeddedClusterStore(tmp_path / "cluster.db")
    await store.set_active("DB1", "a", expected_epoch=0, start_generation=1)
    async with aiohttp.ClientSession() as session:
        yield config, store, session, active, target
    store.close()
    for runner in runners:
        await runner.cleanup()


async def test_a_target_that_stops_answering_ends_the_switchover_at_once(two_nodes):
    config, store, session, active, target = two_nodes
    clock = ManualClock()
    switchover = Switchover(
        config=lambda: config,
        cluster_store=store,
        peers=HttpPeers(session=session, token="t", config=lambda: config),
        clock=clock,
        timeout=60.0,
    )
    switching = asyncio.create_task(switchover.switch("DB1", "b"))
    while "quiesce" not in active.calls:
        await asyncio.sleep(0.01)
    target.gone.set()  # killed while it catches up: its status calls fail from now on
    waited = 0.0
    while not switching.done():
        if clock.pending_sleeps():
            await clock.advance(0.1)
            waited += 0.1
        else:
            await asyncio.sleep(0.005)
    with pytest.raises(Conflict, match=r"abandoned: b did not replay generation 7 \(not answ"):
        switching.result()
    assert active.calls == ["quiesce", "unquiesce"], "the old active takes writes again"
    assert waited < TARGET_SILENT_ABANDON + 1, f"abandoned after {waited:.1f}s, not at 60s"
    assert (await store.active("DB1")).node == "a", "the role did not move"


@pytest.mark.parametrize(
    ("answer", "generation"),
    [
        ({"last_log_generated": 7}, 7),
        ({"last_log_generated": "seven"}, None),  # not an answer: as if unreachable
        ({}, None),
    ],
)
async def test_a_quiesce_is_read_as_its_answer_or_as_no_answer(two_nodes, answer, generation):
    config, _, session, active, _ = two_nodes
    active.quiesced = answer
    peers = HttpPeers(session=session, token="t", config=lambda: config)
    assert await peers.quiesce("a", "DB1", "b") == generation
