"""`mrs serve`'s worker over the move store (the embedded engine, its leases timed by the
test's clock) and fake nodes: it runs many moves at once within the limits, highest
priority first; a worker cut off from the store stops its moves when its lease runs out and
another takes them over, every mailbox whole; a stopping worker gives its moves back at a
safe point; a batch's synced moves wait for their completion."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from datetime import timedelta

from mrs_client.move_store.embedded import EmbeddedMoveStore
from mrs_client.move_store.interface import BatchRecord
from mrs_client.move_store.records import BatchSettings
from mrs_client.policy import (
    GuaranteeAnswer,
    GuaranteeStatus,
    MovePriority,
    MoveState,
    MoveStep,
)
from mrs_client.scheduling import MoveLimits
from mrs_client.worker import Worker
from tests.mrs_client.fakes import MOVER_SETTINGS, MoverEnv, StoredMoves

BOXES = ["alice", "bob", "carol", "dave", "erin", "frank"]


def fleet(tmp_path) -> MoverEnv:
    """Six mailboxes in DB1, DB2 empty; the store's leases timed by the test's clock."""
    env = MoverEnv(tmp_path, items=40)
    env.requests = EmbeddedMoveStore(tmp_path / "cluster.db", monotonic=env.clock.monotonic)
    env.stored = StoredMoves(env.requests)
    for name in BOXES[1:]:
        env.nodes.fill("DB1", name, 40)
        env.directory.entries[name] = "DB1"
    return env


def worker(env: MoverEnv, store=None, settings=MOVER_SETTINGS, **limits) -> Worker:
    store = store or env.requests

    def make_mover():
        mover = env.mover(settings)
        mover.requests = mover.gates.requests = store
        return mover

    async def active_node(db: str) -> str:
        return {"DB1": "mbx1", "DB2": "mbx2"}[db]

    return Worker(
        store=store,
        make_mover=make_mover,
        active_node=active_node,
        clock=env.clock,
        limits=MoveLimits(**limits),
        poll=1.0,
        grace=5.0,
    )


async def queue(env: MoverEnv, *names: str, **fields) -> list[str]:
    mover = env.mover()
    records = [await mover.request(n, "DB2") for n in names]
    records = [replace(r, **fields) for r in records]
    await env.requests.create(
        records, fields.get("batch") and BatchRecord(fields["batch"], env.clock.now())
    )
    return [r.id for r in records]


async def until_done(env: MoverEnv, run: asyncio.Task, done, watch=None) -> None:
    for _ in range(20_000):
        await env.settle()
        if watch is not None:
            watch()
        if done():
            return
        assert not run.done(), run
        await env.clock.advance(0.5)
    raise AssertionError("the moves did not end")


def stall_when_unhealthy(env: MoverEnv) -> dict[str, bool]:
    """The target's copies unhealthy until the switch says yes: moves stall at step 1."""
    healthy = {"yes": False}
    unhealthy = GuaranteeAnswer(
        GuaranteeStatus.NOT_SATISFIED, timedelta(0), "mbx2: status Suspended (maintenance)"
    )
    env.guarantee.on_health = lambda db: None if healthy["yes"] else unhealthy
    return healthy


def states(env: MoverEnv) -> dict[str, MoveState]:
    return {r.mailboxes[0]: r.state for r in env.stored.list()}


def assert_whole(env: MoverEnv, names) -> None:
    for name in names:
        source = env.nodes.dbs["DB1"].live(name)
        assert source and env.nodes.dbs["DB2"].live(name) == source, name
        assert env.directory.entries[name] == "DB2"


async def test_a_worker_runs_many_moves_at_once_within_the_target_database_limit(tmp_path):
    env = fleet(tmp_path)
    ids = await queue(env, *BOXES)
    w = worker(env, per_target_database=2)
    most: list[int] = []  # moves holding a lease, at every line a move says
    env.on_line.append(lambda _: most.append(len(env.requests.call(env.requests._holders))))
    run = asyncio.create_task(w.run())
    await until_done(env, run, lambda: all(s is MoveState.COMPLETED for s in states(env).values()))
    w.stop()
    await run
    assert max(most) == 2, "two moves ran at once into DB2, never more"
    assert len(ids) == 6 and w.stats.ended == {"Completed": 6}
    assert_whole(env, BOXES)


async def test_the_highest_priority_goes_first(tmp_path):
    env = fleet(tmp_path)
    for name in ("alice", "bob"):  # the older first, at the same priority
        await queue(env, name)
        await env.clock.advance(1)
    await queue(env, "carol", priority=MovePriority.HIGH)
    w = worker(env, per_target_database=1)
    order: list[str] = []  # the mailboxes in the order their moves start step 1
    env.on_line.append(
        lambda line: line.startswith("step 1:") and order.append(env.records[-1].mailboxes[0])
    )
    run = asyncio.create_task(w.run())
    await until_done(env, run, lambda: all(s is MoveState.COMPLETED for s in states(env).values()))
    w.stop()
    await run
    assert order == ["carol", "alice", "bob"]


class CutOff:
    """A worker's view of the store that stops answering at `cut()`: the worker is cut off
    from the store; its moves still reach the nodes (the worst case, where it could go on
    writing if it did not count its own lease)."""

    def __init__(self, store: EmbeddedMoveStore) -> None:
        self._store = store
        self.is_cut = False

    def cut(self) -> None:
        self.is_cut = True

    def __getattr__(self, name):
        method = getattr(self._store, name)

        async def call(*args, **kwargs):
            if self.is_cut:
                raise ConnectionError("the store cannot be reached")
            return await method(*args, **kwargs)

        return call


async def test_a_worker_cut_off_stops_its_moves_and_another_takes_them_over(tmp_path):
    env = fleet(tmp_path)
    await queue(env, *BOXES[:4])
    view = CutOff(env.requests)
    a = worker(env, store=view, per_target_database=4)
    healthy = stall_when_unhealthy(env)
    run_a = asyncio.create_task(a.run())
    # A runs the four moves, stalled on the target's copies; cut it off from the store.
    await until_done(env, run_a, lambda: all(s is MoveState.STALLED for s in states(env).values()))
    view.cut()
    # Its saves fail, or its leases run out by its own count: it stops each move.
    await until_done(env, run_a, lambda: not a.running)
    a.stop()
    await run_a
    assert a.stats.lost + a.stats.cut_off == 4 and not a.stats.ended, a.stats
    saved = {r.id: r.updated for r in env.stored.list()}
    healthy["yes"] = True
    b = worker(env, per_target_database=4)
    run_b = asyncio.create_task(b.run())
    await until_done(
        env, run_b, lambda: all(s is MoveState.COMPLETED for s in states(env).values())
    )
    b.stop()
    await run_b
    assert_whole(env, BOXES[:4])
    assert b.stats.ended == {"Completed": 4}
    assert all(r.updated > saved[r.id] for r in env.stored.list())


async def test_a_stopping_worker_gives_its_moves_back_at_a_safe_point(tmp_path):
    env = fleet(tmp_path)
    await queue(env, "alice", "bob")
    a = worker(env)
    healthy = stall_when_unhealthy(env)
    run_a = asyncio.create_task(a.run())
    await until_done(env, run_a, lambda: all(s is MoveState.STALLED for s in states(env).values()))
    a.stop()
    await until_done(env, run_a, lambda: run_a.done() or not a.running)
    await run_a
    held = env.requests.call(env.requests._holders)
    assert held == {}, "given back: no lease left to wait out"
    assert all(r.state is not MoveState.COMPLETED for r in env.stored.list())
    healthy["yes"] = True
    b = worker(env)
    run_b = asyncio.create_task(b.run())
    await until_done(
        env, run_b, lambda: all(s is MoveState.COMPLETED for s in states(env).values())
    )
    b.stop()
    await run_b
    assert_whole(env, ["alice", "bob"])


async def test_a_batch_waiting_for_its_completion_keeps_its_moves_synced(tmp_path):
    env = fleet(tmp_path)
    settings = BatchSettings(suspend_when_ready_to_complete=True, incremental_sync_interval=60)
    batch = BatchRecord("wave1", env.clock.now(), settings=settings)
    mover = env.mover()
    records = [replace(await mover.request(n, "DB2"), batch="wave1") for n in ("alice", "bob")]
    await env.requests.create(records, replace(batch, moves=tuple(r.id for r in records)))
    w = worker(env)
    run = asyncio.create_task(w.run())
    await until_done(env, run, lambda: all(s is MoveState.SYNCED for s in states(env).values()))
    # Synced: the source is its users' still (never locked), the target a locked copy.
    for name in ("alice", "bob"):
        assert not env.nodes.dbs["DB1"].boxes[name].locked
        assert env.directory.entries[name] == "DB1"
    assert all(r.steps_done == MoveStep.INCREMENTAL_SYNC for r in env.stored.list())
    # New mail meanwhile is synced at the next incremental sync, 60 s later.
    env.nodes.fill("DB1", "alice", 5, first=1000)
    synced_at = env.clock.now()
    await until_done(
        env,
        run,
        lambda: (
            env.clock.now() - synced_at > timedelta(seconds=61)
            and all(s is MoveState.SYNCED for s in states(env).values())
        ),
    )
    # `mrs batch complete`: they complete.
    stored = env.requests.call(env.requests._batch, "wave1")
    env.requests.call(env.requests._save_batch, replace(stored, complete_requested=env.clock.now()))
    await until_done(env, run, lambda: all(s is MoveState.COMPLETED for s in states(env).values()))
    w.stop()
    await run
    assert_whole(env, ["alice", "bob"])
