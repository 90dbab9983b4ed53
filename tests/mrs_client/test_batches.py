"""Migration batches over the move store and fake nodes: a batch is validated whole (every
bad line named, nothing queued), created at once, suspended and resumed, completed on
request; a move that failed by the stall limit is queued again later, a bounded number of
times; a batch's throughput cap holds over all its moves and changes while they run."""

from __future__ import annotations

import asyncio
from collections import Counter
from dataclasses import replace
from datetime import timedelta

import pytest

from dag_common.clock import ManualClock
from mrs_client import batches
from mrs_client.batches import BatchLine, BatchRejected, parse_csv
from mrs_client.errors import MoveRejected, NodeCallError
from mrs_client.move_store.records import BatchSettings
from mrs_client.policy import MovePriority, MoveState, MoveStep
from mrs_client.throttle import Throttle
from tests.mrs_client.fakes import MOVER_SETTINGS
from tests.mrs_client.test_worker import (
    BOXES,
    assert_whole,
    fleet,
    stall_when_unhealthy,
    states,
    until_done,
    worker,
)


async def make_batch(env, names, settings: BatchSettings):
    """Batch wave1 of `names`, DB1 to DB2, created as `mrs batch create` does."""
    lines = [BatchLine(0, name, "DB2") for name in names]
    return await batches.create(
        env.requests, env.mover(), "wave1", lines, settings, now=env.clock.now()
    )


def test_a_csv_is_read_with_exchanges_headers_or_ours():
    lines = parse_csv(
        "EmailAddress,TargetDatabase,Priority,Archive\nalice,DB2,High,yes\n\nbob,DB2,,no\n"
    )
    assert lines == [
        BatchLine(2, "alice", "DB2", MovePriority.HIGH, True),
        BatchLine(4, "bob", "DB2", None, False),
    ]
    assert parse_csv("mailbox,target_database\ncarol,DB2\n") == [BatchLine(2, "carol", "DB2")]


def test_a_csv_that_cannot_be_read_is_refused_with_each_bad_line_named():
    with pytest.raises(BatchRejected) as caught:
        parse_csv(
            "mailbox,target_database,priority,archive\n"
            "alice,DB2,Urgent,no\n"  # no such priority
            "bob,DB2,High\n"  # a field short
            "carol,DB2,Low,maybe\n"  # not a flag
            ",DB2,,\n"  # no mailbox
            "dave,DB2,,\n"  # good
        )
    problems = caught.value.problems
    assert [p.split(":")[0] for p in problems] == ["line 2", "line 3", "line 4", "line 5"]
    assert "unknown priority 'Urgent'" in problems[0]
    with pytest.raises(BatchRejected, match="no target_database column"):
        parse_csv("mailbox,where\nalice,DB2\n")
    with pytest.raises(BatchRejected, match="unknown column 'where'"):
        parse_csv("mailbox,target_database,where\nalice,DB2,x\n")


async def test_a_batch_with_bad_lines_is_refused_whole_and_queues_nothing(tmp_path):
    env = fleet(tmp_path)
    mover = env.mover()
    already = await mover.submit(await mover.request("erin", "DB2"))  # erin is moving
    lines = parse_csv(
        "mailbox,target_database,priority,archive\n"
        "alice,DB2,,no\n"  # good
        "nobody,DB2,,no\n"  # unknown mailbox
        "bob,DB2,,no\n"  # good
        "bob,DB2,,no\n"  # named twice
        "erin,DB2,,no\n"  # already moving
        "frank,DB9,,no\n"  # unknown database
        "carol,DB2,,yes\n"  # no archive
    )
    with pytest.raises(BatchRejected) as caught:
        await batches.create(
            env.requests, mover, "wave1", lines, BatchSettings(), now=env.clock.now()
        )
    problems = caught.value.problems
    assert [p.split(":")[0] for p in problems] == [f"line {n}" for n in (3, 5, 6, 7, 8)], problems
    assert "unknown mailbox 'nobody'" in problems[0]
    assert "named twice (also line 4)" in problems[1]
    assert f"already moving (move {already.id})" in problems[2]
    assert "unknown database 'DB9'" in problems[3]
    assert "no archive" in problems[4]
    assert [r.id for r in env.stored.list()] == [already.id]
    assert env.requests.call(env.requests._batch, "wave1") is None


async def test_a_batch_is_created_with_its_lines_priorities_and_runs(tmp_path):
    env = fleet(tmp_path)
    lines = parse_csv("mailbox,target_database,priority\nalice,DB2,High\nbob,DB2,\n")
    settings = BatchSettings(priority=MovePriority.LOW)
    batch, made = await batches.create(
        env.requests, env.mover(), "wave1", lines, settings, now=env.clock.now()
    )
    assert batch.moves == tuple(r.id for r in made)
    assert {r.mailboxes[0]: r.priority for r in made} == {
        "alice": MovePriority.HIGH,
        "bob": MovePriority.LOW,
    }
    with pytest.raises(Exception, match="exists already"):
        await batches.create(
            env.requests, env.mover(), "wave1", lines, settings, now=env.clock.now()
        )
    w = worker(env)
    run = asyncio.create_task(w.run())
    await until_done(env, run, lambda: all(s is MoveState.COMPLETED for s in states(env).values()))
    w.stop()
    await run
    assert_whole(env, ["alice", "bob"])
    report = batches.report(
        env.requests.call(env.requests._batch, "wave1"),
        env.stored.list(),
        Counter(),
        env.clock.now(),
    )
    assert report["by_state"]["Completed"] == 2
    assert sum(m["items"] for m in report["move_reports"]) == 38 + 40  # their live items
    assert all(m["started"] and m["completed"] for m in report["move_reports"])


async def test_a_move_failed_by_the_stall_limit_is_queued_again_a_bounded_number_of_times(
    tmp_path,
):
    env = fleet(tmp_path)
    short = replace(MOVER_SETTINGS, stall_limit=timedelta(seconds=20))
    settings = BatchSettings(stall_retries=2, stall_retry_after=100)
    await make_batch(env, ("alice", "bob"), settings)
    healthy = stall_when_unhealthy(env)
    w = worker(env, settings=short)
    run = asyncio.create_task(w.run())
    # Each fails at the stall limit and is queued again twice, 100 s after each failure...
    await until_done(
        env,
        run,
        lambda: all(r.state is MoveState.FAILED and r.retries == 2 for r in env.stored.list()),
    )
    failed_at = env.clock.now()
    for r in env.stored.list():
        assert r.failed_stalled == "StalledDueToTarget_MdbReplication"
        assert r.stalled_by["StalledDueToTarget_MdbReplication"] >= 3 * 20
    # ...then left failed: no more retries however long it waits.
    await until_done(env, run, lambda: env.clock.now() - failed_at > timedelta(seconds=300))
    assert all(r.state is MoveState.FAILED for r in env.stored.list())
    assert w.stats.retried == 4
    # One retried move once the copies recover completes: a retry that finds them healthy.
    healthy["yes"] = True
    alice = next(r for r in env.stored.list() if r.mailboxes == ("alice",))
    env.requests.call(
        env.requests._save_batch,
        replace(env.requests.call(env.requests._batch, "wave1"), settings=BatchSettings()),
    )
    await until_done(env, run, lambda: env.stored.get(alice.id).state is MoveState.COMPLETED)
    w.stop()
    await run
    assert_whole(env, ["alice"])


async def test_a_suspended_batch_stops_its_moves_and_resumes_them(tmp_path):
    env = fleet(tmp_path)
    await make_batch(env, BOXES[:3], BatchSettings())
    healthy = stall_when_unhealthy(env)
    w = worker(env, per_target_database=3)
    run = asyncio.create_task(w.run())
    await until_done(env, run, lambda: all(s is MoveState.STALLED for s in states(env).values()))
    await batches.suspend(env.requests, "wave1", clock=env.clock)
    await until_done(env, run, lambda: all(s is MoveState.SUSPENDED for s in states(env).values()))
    healthy["yes"] = True
    suspended_at = env.clock.now()
    await until_done(env, run, lambda: env.clock.now() - suspended_at > timedelta(seconds=30))
    assert all(s is MoveState.SUSPENDED for s in states(env).values()), "none restarted"
    line = await batches.resume(env.requests, "wave1", clock=env.clock)
    assert "3 suspended move(s) queued again" in line
    await until_done(env, run, lambda: all(s is MoveState.COMPLETED for s in states(env).values()))
    w.stop()
    await run
    assert_whole(env, BOXES[:3])


async def test_batch_complete_completes_synced_moves_at_once(tmp_path):
    env = fleet(tmp_path)
    settings = BatchSettings(suspend_when_ready_to_complete=True, incremental_sync_interval=3600)
    await make_batch(env, ("alice", "bob"), settings)
    w = worker(env)
    run = asyncio.create_task(w.run())
    await until_done(env, run, lambda: all(s is MoveState.SYNCED for s in states(env).values()))
    assert all(r.steps_done == MoveStep.INCREMENTAL_SYNC for r in env.stored.list())
    asked = env.clock.now()
    line = await batches.complete(env.requests, "wave1", clock=env.clock)
    assert "2 synced move(s) complete now" in line
    await until_done(env, run, lambda: all(s is MoveState.COMPLETED for s in states(env).values()))
    assert env.clock.now() - asked < timedelta(minutes=5), "not at the next sync, an hour on"
    w.stop()
    await run
    assert_whole(env, ["alice", "bob"])


async def test_a_throttle_keeps_to_its_rate_and_takes_a_new_one_at_once():
    clock = ManualClock()
    throttle = Throttle(clock, rate=1e6)
    done: list[float] = []

    async def write(n: int) -> None:
        for _ in range(n):
            await throttle.take(250_000)
            done.append(clock.monotonic())

    task = asyncio.create_task(write(40))  # 10 MB at 1 MB/s: 9 s (a second's burst)
    while not task.done():
        await asyncio.sleep(0)
        await clock.advance(0.05)
        if clock.monotonic() >= 4 and throttle.rate == 1e6:
            throttle.rate = 4e6  # `mrs batch set --max-mb-per-s 4`
    # 4 s at 1 MB/s (and the burst) is 5 MB; the other 5 MB at 4 MB/s take 1.25 s more
    assert 5.0 <= done[-1] <= 6.0, done[-1]
    for i, t in enumerate(done):  # never ahead of the rate allowed at the time
        assert (i + 1) * 250_000 <= 1e6 * (1 + t) + 3e6 * max(0.0, t - 4) + 1


async def test_a_capped_batch_moves_no_faster_than_its_cap(tmp_path):
    env = fleet(tmp_path)
    for name in BOXES[:3]:
        env.nodes.fill("DB1", name, 40, body="x" * 50_000)
    await make_batch(env, BOXES[:3], BatchSettings(max_mb_per_s=0.5))
    w = worker(env, per_target_database=3)
    started = env.clock.now()
    run = asyncio.create_task(w.run())
    await until_done(env, run, lambda: all(s is MoveState.COMPLETED for s in states(env).values()))
    w.stop()
    await run
    moved = sum(r.bytes_copied for r in env.stored.list())
    took = (env.clock.now() - started).total_seconds()
    assert moved > 5e6
    assert moved / 1e6 <= 0.5 * took + 1.5, (moved, took)  # the cap, and a second's burst each
    assert_whole(env, BOXES[:3])


async def test_a_wrong_token_is_said_once_not_for_every_line(tmp_path):
    env = fleet(tmp_path)

    def refused(method, database, n):
        raise NodeCallError(f"{method} {database}: authentication failed", status=401)

    env.nodes.before.append(refused)
    with pytest.raises(MoveRejected) as caught:
        await make_batch(env, BOXES, BatchSettings())
    assert not isinstance(caught.value, BatchRejected)
    assert "authentication failed" in str(caught.value)
    assert env.stored.list() == []
