"""What `mrs serve --http-listen` shows: the worker's metrics (promtool accepts them; the
batch's moves by state, MB copied and time stalled by reason are the store's; the process's
memory and the movers' memory budget), the status
page (names escaped) and /batches, over a real aiohttp server."""

from __future__ import annotations

import asyncio
from dataclasses import replace

import aiohttp
from aiohttp.test_utils import TestServer

from dag_common.memory import MemoryBudget
from mrs_client.fleet_view import app
from mrs_client.move_store.records import BatchSettings
from mrs_client.policy import MoveState
from tests.mrs_client.test_batches import make_batch
from tests.mrs_client.test_worker import fleet, stall_when_unhealthy, states, until_done, worker
from tests.prometheus import promtool_check, samples, value

NAME = "wave<1>&"


async def test_the_metrics_page_and_batches_of_a_worker(tmp_path):
    env = fleet(tmp_path)
    await make_batch(env, ("alice", "bob"), BatchSettings(max_mb_per_s=5))
    healthy = stall_when_unhealthy(env)
    w = worker(env)
    w._count_every = 0  # counted at every poll
    run = asyncio.create_task(w.run())
    await until_done(env, run, lambda: all(s is MoveState.STALLED for s in states(env).values()))
    await until_done(env, run, lambda: env.clock.monotonic() > 20)
    healthy["yes"] = True
    await until_done(env, run, lambda: all(s is MoveState.COMPLETED for s in states(env).values()))
    await until_done(
        env, run, lambda: w.snapshot and w.snapshot.batches[0].by_state["Completed"] == 2
    )
    w.stop()
    await run
    w.snapshot = replace_name(w.snapshot)
    budget = MemoryBudget(256 << 20, wait=None)  # the movers' (mrs_client.body_budget)
    budget.take(3 << 20)
    async with TestServer(app(w, budget)) as server, aiohttp.ClientSession() as http:
        async with http.get(server.make_url("/metrics")) as resp:
            text = await resp.text()
        async with http.get(server.make_url("/")) as resp:
            page = await resp.text()
        async with http.get(server.make_url("/batches")) as resp:
            listed = await resp.json()
    promtool_check(text)
    found = samples(text)
    assert value(found, "mrs_batch_moves", batch=NAME, state="Completed") == 2
    assert value(found, "mrs_batch_copied_bytes_total", batch=NAME) == sum(
        r.bytes_copied for r in env.stored.list()
    )
    stalled = value(
        found,
        "mrs_batch_stalled_seconds_total",
        batch=NAME,
        reason="StalledDueToTarget_MdbReplication",
    )
    assert stalled >= 2 * 15
    assert value(found, "mrs_batch_cap_bytes_per_second", batch=NAME) == 5e6
    assert value(found, "mrs_worker_moves_ended_total", state="Completed") == 2
    assert value(found, "mrs_worker_moves_running") == 0
    assert value(found, "memory_budget_bytes") == 256 << 20
    assert value(found, "memory_budget_in_use_bytes") == 3 << 20
    assert value(found, "process_resident_memory_peak_bytes") > 0
    assert NAME not in page and "wave&lt;1&gt;&amp;" in page
    assert listed[0]["name"] == NAME and listed[0]["by_state"]["Completed"] == 2


def replace_name(snapshot):
    """The batch named as an operator might: markup in a name must stay text."""
    return replace(snapshot, batches=tuple(replace(b, name=NAME) for b in snapshot.batches))
