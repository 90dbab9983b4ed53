"""The new active's asking of the transports after a lossy activation, in one process: a
real cluster store file, transports as aiohttp servers on port 0, a manual clock."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import aiohttp
import pytest
from aiohttp import web

from dag_common.clock import ManualClock
from dag_common.cluster_store.embedded import EmbeddedClusterStore
from dag_common.config import parse_config
from replication_node.active.redelivery import DumpsterRedelivery, loss_window
from tests.cluster_harness import cluster_config, serve_app


class FakeHub:
    """A transport's /v1/redeliver: answers as `answer` says, remembers what it was asked."""

    def __init__(self) -> None:
        self.asked: list[dict] = []
        self.answer: tuple[int, dict] = (200, {"status": "Success", "messages": 3})

    async def redeliver(self, request: web.Request) -> web.Response:
        self.asked.append(await request.json())
        status, body = self.answer
        return web.json_response(body, status=status)


@pytest.fixture
async def setup(tmp_path):
    hubs, runners = {}, []
    for name in ("hub1", "hub2"):
        hub = FakeHub()
        app = web.Application()
        app.router.add_post("/v1/redeliver", hub.redeliver)
        runner, hub.url = await serve_app(app)
        hubs[name], runners = hub, [*runners, runner]
    raw = cluster_config(
        [("mbx1", "s", "http://127.0.0.1:1"), ("mbx2", "s", "http://127.0.0.1:2")],
        [{"name": "DB1", "copies": [
            {"node": "mbx1", "activation_preference": 1},
            {"node": "mbx2", "activation_preference": 2, "replay_lag_time": "1h"},
        ]}],
    )  # fmt: skip
    raw["transports"] = [
        {"name": n, "site": "s", "url": hubs[n].url, "data_dir": n} for n in ("hub1", "hub2")
    ]
    config = parse_config(raw, base_dir=tmp_path)
    store = EmbeddedClusterStore(tmp_path / "cluster.db")
    clock = ManualClock(datetime(2026, 11, 24, 12, 0, tzinfo=UTC))
    async with aiohttp.ClientSession() as session:

        def asker(node: str, epoch: int) -> DumpsterRedelivery:
            return DumpsterRedelivery(
                config=config, database="DB1", node=node, epoch=epoch, cluster_store=store,
                clock=clock, token="t", session=session,
            )  # fmt: skip

        yield store, clock, hubs, asker
    store.close()
    for runner in runners:
        await runner.cleanup()


async def activate(store, node: str, *, lost_logs: int) -> int:
    current = await store.active("DB1")
    record = await store.set_active(
        "DB1", node, expected_epoch=current.epoch if current else 0, start_generation=5,
        lost_logs=lost_logs,
    )  # fmt: skip
    return record.epoch


def test_the_loss_window_is_padded_12_hours_back_and_4_forward():
    inspected = datetime(2026, 11, 24, 11, 0, tzinfo=UTC)
    now = datetime(2026, 11, 24, 12, 0, tzinfo=UTC)
    assert loss_window(inspected, now) == (
        inspected - timedelta(hours=12),
        now + timedelta(hours=4),
    )
    # a log time ahead of this node's clock: the window still starts 12 h before now
    assert loss_window(now + timedelta(hours=1), now)[0] == now - timedelta(hours=12)


async def test_a_lossless_activation_asks_nobody(setup):
    store, clock, _, asker = setup
    epoch = await activate(store, "mbx1", lost_logs=0)
    await asker("mbx1", epoch).require_if_lossy(clock.now())
    assert await store.redelivery("DB1") is None


async def test_a_lossy_activation_asks_every_transport_until_each_says_success(setup):
    store, clock, hubs, asker = setup
    epoch = await activate(store, "mbx1", lost_logs=2)
    ask = asker("mbx1", epoch)
    inspected = clock.now() - timedelta(minutes=5)
    await ask.require_if_lossy(inspected)
    hubs["hub2"].answer = (503, {"error": "busy"})
    record = await ask.ask_once()
    assert record.servers == ("hub2",) and record.answered == ("hub1",) and record.required
    assert hubs["hub1"].asked == [{
        "database": "DB1",
        "start": (inspected - timedelta(hours=12)).isoformat(),
        "end": (clock.now() + timedelta(hours=4)).isoformat(),
    }]  # fmt: skip
    assert "pending from hub2; answered: hub1" in record.describe()
    hubs["hub2"].answer = (200, {"status": "Success", "messages": 0})
    record = await ask.ask_once()
    assert record.ended == "Success" and len(hubs["hub1"].asked) == 1, "hub1 is not asked again"
    assert record.describe().endswith(": Success")


async def test_a_transport_that_never_answers_is_given_up_after_max_dumpster_time(setup):
    store, clock, hubs, asker = setup
    epoch = await activate(store, "mbx1", lost_logs=1)
    ask = asker("mbx1", epoch)
    await ask.require_if_lossy(clock.now())
    for hub in hubs.values():
        hub.answer = (500, {"error": "down"})
    await clock.advance(timedelta(days=6).total_seconds())
    assert (await ask.ask_once()).required
    await clock.advance(timedelta(days=1, seconds=1).total_seconds())
    record = await ask.ask_once()
    assert record.ended == "Expired" and record.servers == ("hub1", "hub2")


async def test_a_lagged_copy_activated_lossily_never_asks(setup):
    """The seeds: "a lossy activation on an SCR target will never invoke the transport
    dumpster"."""
    store, clock, hubs, asker = setup
    epoch = await activate(store, "mbx2", lost_logs=3)
    await asker("mbx2", epoch).require_if_lossy(clock.now())
    assert await store.redelivery("DB1") is None
    assert hubs["hub1"].asked == []
