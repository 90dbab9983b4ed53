"""The mover in process, over in-memory fakes and a ManualClock: an epoch change of either
end at any step makes it reconcile by content, and the move either completes with the
target holding exactly the source's live items or fails with the source kept."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import pytest

from mrs_client.errors import NodeCallError
from mrs_client.policy import GuaranteeAnswer, GuaranteeStatus, MoveState
from tests.mrs_client.fakes import MOVER_SETTINGS, Crash, MoverEnv

SETTINGS = MOVER_SETTINGS


async def test_a_move_without_failures_verifies_once_and_completes(tmp_path):
    env = MoverEnv(tmp_path)
    record = await env.move()
    env.assert_completed_equal(record)
    assert record.reconciles == 0 and record.verified_epoch == record.target_epoch == 1
    assert sum(1 for m, d in env.nodes.calls if m == "digest") == 2  # one per end


@pytest.mark.parametrize(
    ("step", "lose"),
    [
        (3, 1),  # the target mailbox itself was lost
        (4, 3),  # the last batches of the initial sync
        (5, 2),
        (6, 2),
        (7, 2),  # after the final flush was Satisfied: only the digests can tell
        (8, 2),
        (9, 2),  # verified, the directory updated, not unlocked yet
        (10, 1),  # the unlock was lost
        (10, 0),  # a switchover: nothing lost, the unlock kept
    ],
)
@pytest.mark.parametrize("knows_epochs", [False, True])
async def test_a_target_epoch_change_at_each_step_makes_the_mover_reconcile(
    tmp_path, step, lose, knows_epochs
):
    env = MoverEnv(tmp_path, knows_epochs=knows_epochs)
    env.at_step(step, lambda: env.nodes.dbs["DB2"].failover(lose=lose))
    record = await env.move()
    env.assert_completed_equal(record)
    assert record.reconciles >= 1
    assert record.target_epoch == record.verified_epoch == 2
    assert any(line.startswith("reconcile needed") for line in env.lines)
    if lose and step < 10:
        assert record.items_repaired > 0 or step == 3


async def test_a_target_failover_in_the_middle_of_the_initial_sync(tmp_path):
    env = MoverEnv(tmp_path, items=300)

    def kill(method, db, n):
        if (method, db, n) == ("put_items", "DB2", 6):
            env.nodes.dbs["DB2"].failover(lose=3)  # the 3 batches before this one

    env.nodes.before.append(kill)
    record = await env.move()
    env.assert_completed_equal(record)
    assert record.items_repaired >= 30


async def test_a_failover_while_a_write_fails_is_reconciled_after_the_stall(tmp_path):
    env = MoverEnv(tmp_path)
    state = {"down": 0}

    def unreachable(method, db, n):
        if db == "DB2" and method == "put_items" and n == 4 and not state["down"]:
            state["down"] = 1
            env.nodes.dbs["DB2"].failover(lose=2)
        if db == "DB2" and state["down"] and state["down"] < 3:
            state["down"] += 1
            raise NodeCallError("no mounted active copy of DB2 can be reached")

    env.nodes.before.append(unreachable)
    record = await env.move()
    env.assert_completed_equal(record)
    assert record.time_stalled >= 1


async def test_a_source_failover_with_lost_and_new_items_ends_with_the_source_as_it_is(tmp_path):
    env = MoverEnv(tmp_path)
    source = env.nodes.dbs["DB1"]

    def failover_and_write():
        # The last 7 transactions are gone: 5 deletes (m75 is back) and 20 items the initial
        # sync copied (m100-m119)
        source.failover(lose=7)
        # the new active numbers from its own highest: the lost numbers, again
        env.nodes.fill("DB1", "alice", 10, first=1000, body="after the failover")

    env.at_step(4, failover_and_write)
    record = await env.move()
    env.assert_completed_equal(record)
    assert "m119" not in env.target() and "m1009" in env.target() and "m75" in env.target()
    assert record.source_epoch == 2


@pytest.mark.parametrize("step", [6, 7, 8])
async def test_a_source_failover_after_the_lock_locks_again_and_keeps_the_new_state(tmp_path, step):
    env = MoverEnv(tmp_path)
    db = env.nodes.dbs["DB1"]
    env.at_step(step, lambda: db.failover(lose=1))  # the lock (the last transaction) is lost
    record = await env.move()
    env.assert_completed_equal(record)
    assert env.nodes.calls.count(("lock", "DB1")) == 2, "locked again in the new epoch"
    assert record.reconciles == 1 and record.source_epoch == 2


async def test_a_lost_flush_answer_leads_to_repair_and_a_new_flush(tmp_path):
    env = MoverEnv(tmp_path, knows_epochs=True)
    target = env.nodes.dbs["DB2"]

    def lost_once(database, generation, epoch):
        if len(env.guarantee.flushes) == 1:
            target.failover(lose=2)  # the final sync's writes, never shipped
            return GuaranteeAnswer(
                GuaranteeStatus.NOT_SATISFIED,
                timedelta(0),
                "the stream forked below this LSN",
                epoch=target.epoch,
                lost=True,
            )
        return None

    env.guarantee.on_flush = lost_once
    env.nodes.fill("DB1", "alice", 30, first=500)  # so that the final sync has work
    env.at_step(5, lambda: env.nodes.fill("DB1", "alice", 25, first=600))
    record = await env.move()
    env.assert_completed_equal(record)
    first, second = env.guarantee.flushes[0], env.guarantee.flushes[1]
    assert first[2] == 1 and second[2] == 2, "flushed again, in the new epoch"
    answers = env.stored.answers(record.id)
    assert any(a.lost for a in answers)


async def test_a_mismatch_it_cannot_repair_fails_the_move_and_keeps_the_source(tmp_path):
    env = MoverEnv(tmp_path)
    env.nodes.drops = {"m7"}  # the target acknowledges m7 and never holds it
    record = await env.move()
    assert record.state is MoveState.FAILED
    assert "still differs" in record.failure and "alice" in record.failure, record.failure
    assert record.verify_rounds == SETTINGS.max_verify_rounds + 1
    source_box = env.nodes.dbs["DB1"].boxes["alice"]
    assert not source_box.soft_deleted and env.source()
    assert env.directory.entries["alice"] == "DB1"
    assert not [e for e in env.nodes.trace if e[0] == "soft-delete"]


async def test_a_target_that_changed_after_its_unlock_is_not_soft_deleted_over(tmp_path):
    env = MoverEnv(tmp_path)
    target = env.nodes.dbs["DB2"]

    def switch_and_user_writes():
        target.failover(lose=0)  # kept the unlock
        env.nodes.fill("DB2", "alice", 1, first=9000, body="the user's own")

    env.at_step(10, switch_and_user_writes)
    record = await env.move()
    assert record.state is MoveState.FAILED
    assert "not soft-deleted" in record.failure, record.failure
    assert not env.nodes.dbs["DB1"].boxes["alice"].soft_deleted
    assert "m9000" in env.target(), "the user's item is not undone"


async def test_kill_9_in_the_middle_of_a_reconcile_then_resume(tmp_path):
    env = MoverEnv(tmp_path, items=200)
    env.at_step(4, lambda: env.nodes.dbs["DB2"].failover(lose=6))
    reconciling = []
    env.on_line.append(lambda line: line.startswith("reconciling") and reconciling.append(line))

    def crash(method, db, n):
        if reconciling and (method, db) == ("put_items", "DB2"):
            raise Crash()  # the reconcile's first repair write, before it is made

    env.nodes.before.append(crash)
    with pytest.raises(Crash):
        await env.move()
    (stored,) = env.stored.list()
    assert stored.reconcile_pending and stored.state is not MoveState.COMPLETED
    env.nodes.before.clear()
    env.on_line.clear()
    record = await env.move(move_id=stored.id)
    env.assert_completed_equal(record)
    assert record.items_repaired > 0


async def test_an_old_record_without_epochs_reconciles_on_resume(tmp_path):
    env = MoverEnv(tmp_path)
    env.at_step(4, lambda: (_ for _ in ()).throw(Crash()))
    with pytest.raises(Crash):
        await env.move()
    (stored,) = env.stored.list()
    env.stored.save(replace(stored, target_epoch=0, source_epoch=0), env.clock.now())
    env.nodes.dbs["DB2"].failover(lose=2)
    env.on_line.clear()
    record = await env.move(move_id=stored.id)
    env.assert_completed_equal(record)
    assert record.reconciles == 1


async def test_the_bench_setting_skips_only_the_digest_comparison(tmp_path):
    env = MoverEnv(tmp_path)
    record = await env.move(replace(SETTINGS, verify=False))
    assert record.state is MoveState.COMPLETED and env.target() == env.source()
    assert not [c for c in env.nodes.calls if c[0] == "digest"]
