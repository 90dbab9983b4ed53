"""`mrs suspend` and `mrs cancel` in process, over the mover's fakes and a ManualClock: a move
running in "another process" (a task holding the move's flock) stops at its next safe point
when asked through the request store; a suspended move resumes to completion; a cancel before
step 8 leaves the source whole and usable and the mailbox free to move again, is refused
after it, and finishes when run again after being killed."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import pytest

from mrs_client import stopping
from mrs_client.errors import MoveRejected
from mrs_client.policy import GuaranteeAnswer, GuaranteeStatus, MoveState, StopRequest
from tests.mrs_client.fakes import Crash, MoverEnv

WAIT = timedelta(seconds=60)
UNHEALTHY = GuaranteeAnswer(GuaranteeStatus.NOT_SATISFIED, timedelta(0), "DB2\\mbx3: Suspended")


def yielding_writes(env: MoverEnv) -> None:
    """Item writes that yield to the event loop, as a call over a socket does: the operator's
    command (another task here) runs while the mover writes."""
    write = env.nodes.put_items

    async def put_items(database, mailbox, items):
        written = await write(database, mailbox, items)
        await asyncio.sleep(0)  # the answer comes back over the socket
        return written

    env.nodes.put_items = put_items


def unhealthy_from_step(env: MoverEnv, step: int) -> dict[str, bool]:
    """DB2's copies unhealthy from `step` on, until the returned switch's "healthy" is set."""
    switch = {"healthy": True}

    def turn() -> None:
        switch["healthy"] = False

    env.at_step(step, turn)
    env.guarantee.on_health = lambda db: None if switch["healthy"] else UNHEALTHY
    return switch


def suspend(env: MoverEnv, move_id: str) -> asyncio.Task:
    return asyncio.ensure_future(
        stopping.suspend(env.requests, move_id, clock=env.clock, wait=WAIT)
    )


def cancel(env: MoverEnv, move_id: str, wait: timedelta = WAIT):
    return stopping.cancel(
        env.requests,
        move_id,
        nodes=env.nodes,
        directory=env.directory,
        clock=env.clock,
        wait=wait,
    )


async def stalled_at(env: MoverEnv, step: int) -> tuple[asyncio.Task, str]:
    """A move running in a task, stalled on unhealthy copies at `step` (healthy again once
    it has stopped: `env.guarantee.on_health` cleared)."""
    unhealthy_from_step(env, step)
    task = await env.start()
    (record,) = env.stored.list()
    await env.drive(task, until=lambda: env.stored.get(record.id).state is MoveState.STALLED)
    assert env.stored.get(record.id).step == step
    return task, record.id


async def test_a_move_suspended_while_copying_stops_between_batches_and_resumes(tmp_path):
    baseline = await MoverEnv(tmp_path / "baseline").move()
    env = MoverEnv(tmp_path)
    yielding_writes(env)
    asked: list[asyncio.Task] = []

    def third_batch(method, database, n):
        if (method, database, n) == ("put_items", "DB2", 3):
            # The operator's request lands while the third batch is written (the suspend's
            # own write of it goes through the store's thread: it would land later).
            move_id = env.stored.list()[0].id
            env.stored.request_stop(move_id, StopRequest.SUSPEND, env.clock.now())
            asked.append(suspend(env, move_id))

    env.nodes.before.append(third_batch)
    task = await env.start()
    await env.drive(task)
    stopped = task.result()
    # It stopped after the batch being written when asked, its cursor saved with it.
    assert stopped.state is MoveState.SUSPENDED and int(stopped.step) == 3
    assert stopped.items_copied == 30 and stopped.sync_cursor["alice"] > 0
    assert "move stopped by `mrs suspend` at step 3 (2 done)" in env.lines
    await env.drive(asked[0])
    said = asked[0].result()
    assert said.done and said.line.startswith(f"move {stopped.id} suspended at step 3")
    assert env.stored.get(stopped.id).state is MoveState.SUSPENDED
    assert env.stored.stop_requested(stopped.id) is None
    # Suspended, it keeps its claim and its locked target.
    with pytest.raises(MoveRejected, match="DB2 already holds a mailbox 'alice'"):
        await env.mover().request("alice", "DB2")
    assert env.nodes.dbs["DB2"].boxes["alice"].locked
    # Resumed, it goes on from its cursor: nothing is copied twice.
    env.nodes.before.clear()
    record = await env.move(move_id=stopped.id)
    env.assert_completed_equal(record)
    assert record.items_copied == baseline.items_copied


async def test_a_stalled_move_is_suspended_before_it_waits_again(tmp_path):
    env = MoverEnv(tmp_path)
    task, move_id = await stalled_at(env, 2)
    asked = suspend(env, move_id)
    await env.drive(task)
    assert task.result().state is MoveState.SUSPENDED
    await env.drive(asked)
    assert asked.result().done
    stored = env.stored.get(move_id)
    assert stored.state is MoveState.SUSPENDED and stored.stall_reason is None
    assert stored.steps_done == 1  # stopped inside step 2, before its next wait
    env.on_line.clear()
    env.guarantee.on_health = None
    env.assert_completed_equal(await env.move(move_id=move_id))


async def test_suspend_of_a_move_nobody_runs_and_of_finished_ones(tmp_path):
    env = MoverEnv(tmp_path)
    mover = env.mover()
    queued = await mover.submit(await mover.request("alice", "DB2"))
    said = await stopping.suspend(env.requests, queued.id, clock=env.clock, wait=WAIT)
    assert said.done and said.record.state is MoveState.SUSPENDED
    assert env.stored.get(queued.id).state is MoveState.SUSPENDED
    again = await stopping.suspend(env.requests, queued.id, clock=env.clock, wait=WAIT)
    assert again.done and again.record.state is MoveState.SUSPENDED
    record = await env.move(move_id=queued.id)
    env.assert_completed_equal(record)
    with pytest.raises(MoveRejected, match=f"move {queued.id} is completed"):
        await stopping.suspend(env.requests, queued.id, clock=env.clock, wait=WAIT)
    with pytest.raises(MoveRejected, match="no move request 'nope'"):
        await stopping.suspend(env.requests, "nope", clock=env.clock, wait=WAIT)


async def test_a_running_move_cancelled_before_step_8_leaves_the_source_whole_and_usable(
    tmp_path,
):
    env = MoverEnv(tmp_path)
    task, move_id = await stalled_at(env, 7)  # source locked at step 5, final flush done
    assert env.nodes.dbs["DB1"].boxes["alice"].locked
    source_before = env.source()
    source_log = len(env.nodes.dbs["DB1"].log)
    asked = asyncio.ensure_future(cancel(env, move_id))
    await env.drive(task)
    assert task.result().state is MoveState.SUSPENDED
    assert "move stopped for `mrs cancel` at step 7 (6 done)" in env.lines, env.lines[-3:]
    await env.drive(asked)
    said = asked.result()
    assert said.line == (
        f"move {move_id} cancelled: target mailbox removed from DB2, source unlocked"
    )
    assert said.record.state is MoveState.CANCELLED
    assert env.stored.get(move_id).state is MoveState.CANCELLED
    # The target copy is gone; the source holds what it held, unlocked; only the unlock was
    # written to it; the directory never moved.
    assert "alice" not in env.nodes.dbs["DB2"].boxes
    source = env.nodes.dbs["DB1"].boxes["alice"]
    assert not source.locked and not source.soft_deleted and env.source() == source_before
    assert env.nodes.dbs["DB1"].log[source_log:] == [("state", ("alice", "locked", False))]
    assert env.directory.entries["alice"] == "DB1"
    # The claim is released: a new move of the mailbox is accepted and completes; the
    # cancelled one cannot be resumed.
    with pytest.raises(MoveRejected, match="was cancelled"):
        await env.mover().run(move_id)
    env.on_line.clear()
    env.guarantee.on_health = None
    env.assert_completed_equal(await env.move())


async def test_a_cancel_asked_during_a_step_stops_the_move_before_the_next_one_begins(tmp_path):
    # The end of step 5 and the beginning of step 6 are saved together: the safe point
    # between them stops the move with step 6 not begun, as if saved one after the other.
    env = MoverEnv(tmp_path)
    asked: list[asyncio.Task] = []

    def during_the_lock(method, database, n):
        if (method, database) == ("lock", "DB1"):
            move_id = env.stored.list()[0].id
            env.stored.request_stop(move_id, StopRequest.CANCEL, env.clock.now())
            asked.append(asyncio.ensure_future(cancel(env, move_id)))

    env.nodes.before.append(during_the_lock)
    task = await env.start()
    await env.drive(task)
    stopped = task.result()
    assert stopped.state is MoveState.SUSPENDED
    assert (int(stopped.step), stopped.steps_done) == (5, 5)
    assert "move stopped for `mrs cancel` at step 5 (5 done)" in env.lines, env.lines[-3:]
    assert not any(line.startswith("step 6:") for line in env.lines)
    await env.drive(asked[0])
    assert asked[0].result().record.state is MoveState.CANCELLED
    source = env.nodes.dbs["DB1"].boxes["alice"]
    assert not source.locked and not source.soft_deleted, "the lock taken was undone"
    assert "alice" not in env.nodes.dbs["DB2"].boxes


async def test_cancel_is_refused_once_the_directory_names_the_target(tmp_path):
    env = MoverEnv(tmp_path, knows_epochs=True)
    blocked = {"on": False}
    env.at_step(9, lambda: blocked.update(on=True))
    env.guarantee.on_flush = lambda db, generation, epoch: (
        GuaranteeAnswer(GuaranteeStatus.NOT_SATISFIED, timedelta(0), "ReplayQueue 3", epoch)
        if blocked["on"]
        else None
    )
    task = await env.start()
    (record,) = env.stored.list()
    await env.drive(task, until=lambda: env.stored.get(record.id).state is MoveState.STALLED)
    assert env.stored.get(record.id).steps_done == 8
    with pytest.raises(MoveRejected, match="since step 8, the move can only go forward"):
        await cancel(env, record.id)
    assert env.stored.stop_requested(record.id) is None  # the running move is left alone
    blocked["on"] = False
    await env.drive(task)
    env.assert_completed_equal(task.result())
    with pytest.raises(MoveRejected, match="is completed"):
        await cancel(env, record.id)


async def test_a_cancel_killed_half_way_is_finished_by_running_it_again(tmp_path):
    env = MoverEnv(tmp_path)
    task, move_id = await stalled_at(env, 7)
    asked = suspend(env, move_id)
    await env.drive(task)
    await env.drive(asked)

    def killed(method, database, n):
        if method == "delete_mailbox":
            raise Crash()  # mrs cancel killed after unlocking the source

    env.guarantee.on_health = None
    env.nodes.before.append(killed)
    with pytest.raises(Crash):
        await cancel(env, move_id)
    assert not env.nodes.dbs["DB1"].boxes["alice"].locked
    assert "alice" in env.nodes.dbs["DB2"].boxes
    # Half cancelled, the move cannot be resumed; it says how to finish.
    assert env.stored.stop_requested(move_id) is StopRequest.CANCEL
    with pytest.raises(MoveRejected, match=f"`mrs cancel {move_id}` finishes it"):
        await env.mover().run(move_id)
    env.nodes.before.clear()
    said = await cancel(env, move_id)
    assert said.line == (
        f"move {move_id} cancelled: target mailbox removed from DB2, source unlocked"
    )
    assert "alice" not in env.nodes.dbs["DB2"].boxes
    again = await cancel(env, move_id)
    assert again.done and again.line == f"move {move_id} was already cancelled"
    assert env.stored.stop_requested(move_id) is None
    with pytest.raises(MoveRejected, match="is cancelled"):
        await stopping.suspend(env.requests, move_id, clock=env.clock, wait=WAIT)


async def test_a_cancel_before_any_copy_touches_nothing_but_the_request(tmp_path):
    env = MoverEnv(tmp_path)
    mover = env.mover()
    queued = await mover.submit(await mover.request("alice", "DB2"))
    said = await cancel(env, queued.id)
    assert said.line == (
        f"move {queued.id} cancelled: no target mailbox in DB2, source untouched (never locked)"
    )
    assert len(env.nodes.dbs["DB1"].log) == len(MoverEnv(tmp_path / "b").nodes.dbs["DB1"].log)
    assert (await mover.submit(await mover.request("alice", "DB2"))).state is MoveState.QUEUED


async def test_cancel_is_refused_when_the_directory_moved_before_step_8_was_saved(tmp_path):
    env = MoverEnv(tmp_path)
    set_database = env.directory.set_mailbox_database

    async def killed_after(mailbox, database, *, expected):
        await set_database(mailbox, database, expected=expected)
        raise Crash()  # kill -9 between the directory's update and saving step 8 done

    env.directory.set_mailbox_database = killed_after
    with pytest.raises(Crash):
        await env.move()
    (stored,) = env.stored.list()
    assert stored.steps_done == 7 and env.directory.entries["alice"] == "DB2"
    with pytest.raises(MoveRejected, match="can only go forward"):
        await cancel(env, stored.id)
    assert "alice" in env.nodes.dbs["DB2"].boxes  # nothing undone
    assert env.stored.stop_requested(stored.id) is None
    env.directory.set_mailbox_database = set_database
    env.assert_completed_equal(await env.move(move_id=stored.id))
