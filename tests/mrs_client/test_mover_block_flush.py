"""Steps 6 and 9 without a log roll: when every passive copy of the target follows its log in
block mode, the mover flushes through the durable end of the target's open log (by LSN with
its offset) instead of rolling; when that is not Satisfied within `block_flush_wait` (a copy
left block mode), it rolls and flushes the generation.  In process, over the fakes, on a
ManualClock."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import timedelta

import pytest

from mrs_client.policy import GuaranteeAnswer, GuaranteeStatus
from tests.mrs_client.fakes import MOVER_SETTINGS, Crash, MoverEnv

SETTINGS = replace(MOVER_SETTINGS, block_flush_wait=timedelta(seconds=30))


def in_block_mode(env: MoverEnv) -> None:
    db = env.nodes.dbs["DB2"]
    db.block_followers = db.passive_copies
    db.generation = 5  # a stream that has closed generations: its copies claimed its epoch


def rolls(env: MoverEnv) -> int:
    return sum(1 for method, db in env.nodes.calls if (method, db) == ("roll_log", "DB2"))


def guarantee_holding_in_block_mode(env: MoverEnv, *, holds: bool = True) -> list[int]:
    """The service's judgement of a flush by offset: Satisfied only if the copies hold every
    byte the target made durable before the question (the point asked must cover the last
    write); `holds=False`: the copies left block mode and hold nothing of the open log.
    Returns the last record offsets the target had at each flush by offset."""
    db = env.nodes.dbs["DB2"]
    seen: list[int] = []
    asked = env.guarantee.flush_offsets

    def on_flush(database, generation, epoch):
        offset = asked[-1]
        if database != "DB2" or offset is None:
            return None
        seen.append(db.last_offset)
        covered = generation == db.generation and offset >= db.last_offset
        if holds and covered:
            return None  # Satisfied (the fake's default)
        return GuaranteeAnswer(
            GuaranteeStatus.NOT_SATISFIED,
            timedelta(0),
            "DB2\\mbx3: last log replayed 3, needs generation 4",
            epoch=db.epoch,
        )

    env.guarantee.on_flush = on_flush
    return seen


async def test_with_every_copy_in_block_mode_the_move_flushes_without_a_roll(tmp_path):
    env = MoverEnv(tmp_path, knows_epochs=True)
    in_block_mode(env)
    seen = guarantee_holding_in_block_mode(env)
    record = await env.move(SETTINGS)
    env.assert_completed_equal(record)
    assert rolls(env) == 0
    # Steps 6 and 9 each asked once, by the LSN of the open log's last durable byte, which
    # lies at or past the start of the last transaction the target had written.
    target = env.nodes.dbs["DB2"]
    offsets = [o for o in env.guarantee.flush_offsets if o is not None]
    assert len(offsets) == 2 and len(seen) == 2
    assert all(o >= last for o, last in zip(offsets, seen, strict=True))
    assert offsets[1] == target.durable - 1  # the unlock's flush covers the unlock itself
    assert record.final_position is not None
    assert record.final_position.generation == target.generation and record.final_position.offset
    assert any("held in block mode by mbx2, mbx3" in line for line in env.lines), env.lines


async def test_a_copy_in_file_mode_means_a_roll(tmp_path):
    env = MoverEnv(tmp_path, knows_epochs=True)
    env.nodes.dbs["DB2"].block_followers = ("mbx2",)  # mbx3 follows closed logs only
    record = await env.move(SETTINGS)
    env.assert_completed_equal(record)
    assert rolls(env) == 2  # steps 6 and 9
    assert env.guarantee.flush_offsets == [None, None]
    assert record.final_position is not None and record.final_position.offset == 0


async def test_a_block_mode_flush_not_satisfied_in_time_rolls_and_flushes_the_generation(
    tmp_path,
):
    env = MoverEnv(tmp_path, knows_epochs=True)
    in_block_mode(env)
    guarantee_holding_in_block_mode(env, holds=False)  # the copies fell back to file mode
    started = env.clock.now()
    record = await env.move(SETTINGS)
    env.assert_completed_equal(record)
    assert rolls(env) == 2
    assert record.final_position is not None and record.unlock_position is not None
    assert record.final_position.offset == 0 and record.unlock_position.offset == 0
    # Each phase asked by offset for block_flush_wait, then by the generation rolled.
    waited = env.clock.now() - started
    assert waited >= 2 * SETTINGS.block_flush_wait
    assert any("not flushed in block mode within 30s" in line for line in env.lines), env.lines
    answers = env.stored.answers(record.id)
    unsatisfied = [a for a in answers if a.status == GuaranteeStatus.NOT_SATISFIED]
    assert unsatisfied, "the waits are recorded as the move's stalls"


@pytest.mark.parametrize("step", [6, 9])
async def test_a_crash_during_a_block_mode_flush_resumes_it(tmp_path, step):
    env = MoverEnv(tmp_path, knows_epochs=True)
    in_block_mode(env)
    guarantee_holding_in_block_mode(env)

    def crash():
        raise Crash()

    env.at_step(step + 1, crash)  # the flush of `step` was Satisfied, the next step crashes
    with pytest.raises(Crash):
        await env.move(SETTINGS)
    (stored,) = env.stored.list()
    assert stored.steps_done == step
    point = stored.final_position if step == 6 else stored.unlock_position
    assert point is not None and point.offset, "the point inside the open log is saved"
    # ... in the format of before Position: a move crashed there by an older mover resumes.
    saved = json.loads(env.stored.body(stored.id))
    prefix = "final" if step == 6 else "unlock"
    assert (saved[f"{prefix}_generation"], saved[f"{prefix}_offset"]) == point
    assert "final_position" not in saved and "unlock_position" not in saved
    record = await env.move(SETTINGS, move_id=stored.id)
    env.assert_completed_equal(record)
    assert rolls(env) == 0


async def test_a_failover_of_the_target_during_a_block_mode_flush_flushes_again(tmp_path):
    """The target loses the open log's tail in a failover while the flush by offset waits:
    the answer says the point was lost; the mover reconciles and flushes again in the new
    epoch, never taking the old point as flushed."""
    env = MoverEnv(tmp_path, knows_epochs=True)
    in_block_mode(env)
    target = env.nodes.dbs["DB2"]
    lost = []

    def on_flush(database, generation, epoch):
        offset = env.guarantee.flush_offsets[-1]
        if database == "DB2" and offset is not None and not lost:
            lost.append((generation, offset, epoch))
            target.failover(lose=3)  # the final sync's last writes never reached a copy
            return GuaranteeAnswer(
                GuaranteeStatus.NOT_SATISFIED,
                timedelta(0),
                f"the record at generation {generation} byte {offset} was lost in a failover",
                epoch=target.epoch,
                lost=True,
            )
        return None

    env.guarantee.on_flush = on_flush
    record = await env.move(SETTINGS)
    env.assert_completed_equal(record)
    assert lost and record.reconciles >= 1
    assert record.flush_epoch == target.epoch != lost[0][2]


async def test_a_new_database_is_rolled_even_with_every_copy_in_block_mode(tmp_path):
    """No generation closed yet: the copies have claimed no epoch to be counted by inside the
    open log, so the final sync's flush rolls at once instead of waiting `block_flush_wait`
    out; the unlock's, after that roll, goes by offset."""
    env = MoverEnv(tmp_path, knows_epochs=True)
    in_block_mode(env)
    env.nodes.dbs["DB2"].generation = 1
    started = env.clock.now()
    record = await env.move(SETTINGS)
    env.assert_completed_equal(record)
    assert rolls(env) == 1
    offsets = env.guarantee.flush_offsets
    assert offsets[0] is None and len(offsets) == 2 and offsets[1] is not None
    assert env.clock.now() - started < SETTINGS.block_flush_wait
