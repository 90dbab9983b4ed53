"""The mover in process, over in-memory fakes: large items (over the target's max_item_size,
as the config says) and bad items (changes the source cannot read) are skipped up to the
move's limits and listed; one more fails the move before step 8, naming them, with the
source untouched; the verification leaves out exactly what was skipped."""

from __future__ import annotations

import asyncio

import pytest

from dag_common.store_api import Item
from mrs_client.item_limits import SkipReason
from mrs_client.policy import MoveState, MoveStep
from tests.mrs_client.fakes import Crash, MoverEnv

LIMIT = 1000  # DB2's max_item_size in these tests
BIG = "x" * 1500  # a body over it


def env_with(tmp_path, *, large=(), bad=(), items=60, **limits) -> MoverEnv:
    """alice in DB1 with `items` small items (m0…), then large items named in `large`
    and items whose rows DB1 cannot read named in `bad` (each followed by a readable one);
    DB2 takes items of LIMIT bytes."""
    env = MoverEnv(tmp_path, items=items)
    for name in large:
        put(env, name, BIG)
    for name in bad:
        put(env, name, "unreadable")
        env.nodes.damaged.add(("DB1", env.nodes.dbs["DB1"].cn))
        put(env, f"after-{name}", "readable")  # neighbours are found as one (source_reader)
    env.max_item_sizes = {"DB2": LIMIT}
    env.limits = limits
    return env


def put(env: MoverEnv, item_id: str, body: str) -> None:
    """A user writes `item_id` to the source (a new item, or a new version of it)."""
    db = env.nodes.dbs["DB1"]
    db.commit([("put", ("alice", Item(item_id, "Inbox", "subject", body, db.next_cn())))])


async def resume(env: MoverEnv, move_id: str, **limits):
    task = asyncio.create_task(env.mover().run(move_id, **limits))
    await env.drive(task)
    return task.result()


def source_less(env: MoverEnv, *skipped: str) -> dict:
    return {k: v for k, v in env.source().items() if k not in skipped}


def assert_untouched(env: MoverEnv, before: dict) -> None:
    box = env.nodes.dbs["DB1"].boxes["alice"]
    assert not box.soft_deleted and env.source() == before
    assert env.directory.entries["alice"] == "DB1"
    assert not [e for e in env.nodes.trace if e[0] == "soft-delete"]


def assert_completed_less(env: MoverEnv, record, *skipped: str) -> None:
    assert record.state is MoveState.COMPLETED, record.failure
    assert env.target() == source_less(env, *skipped)
    assert env.nodes.dbs["DB1"].boxes["alice"].soft_deleted
    assert env.directory.entries["alice"] == "DB2"
    assert record.verified_epoch == record.target_epoch


async def test_large_items_within_the_limit_are_skipped_listed_and_the_move_completes(tmp_path):
    env = env_with(tmp_path, large=["big1", "big2"], large_item_limit=2)
    put(env, "m70", "small again after them")
    record = await env.move()
    assert_completed_less(env, record, "big1", "big2")
    assert record.reconciles == 0, "verified at once: the source's digest less the two"
    assert [(s.item_id, s.reason, s.size, s.limit) for s in record.skipped] == [
        ("big1", SkipReason.LARGE, len("subject") + 1500, LIMIT),
        ("big2", SkipReason.LARGE, len("subject") + 1500, LIMIT),
    ]
    assert "m70" in env.target()
    assert any(line.startswith("skipping large item alice/big1") for line in env.lines), env.lines
    assert any("less 2 skipped items" in line for line in env.lines)
    stored = env.stored.get(record.id)
    assert stored is not None and stored.skipped == record.skipped
    assert stored.large_item_limit == 2


async def test_more_large_items_than_the_limit_fail_the_move_in_its_sync_naming_them(tmp_path):
    env = env_with(tmp_path, large=["big1", "big2"], items=0, large_item_limit=1)
    before = env.source()
    record = await env.move()
    assert record.state is MoveState.FAILED
    assert record.step is MoveStep.INITIAL_SYNC, "found on the first page, not at step 8"
    for words in ("2 large items, more than --large-item-limit 1", "alice/big1", "alice/big2"):
        assert words in record.failure, record.failure
    assert "1,507 bytes, over the target's max_item_size of 1,000" in record.failure
    assert "source is untouched" in record.failure
    assert_untouched(env, before)
    assert not env.nodes.dbs["DB1"].boxes["alice"].locked
    assert env.target() == {}, "nothing of the page was written"
    assert [s.item_id for s in env.stored.get(record.id).skipped] == ["big1", "big2"]

    # resumed as it was, it fails at once; with the limit raised it goes on and completes
    again = await resume(env, record.id)
    assert again.state is MoveState.FAILED and "as the move was resumed" in again.failure
    done = await resume(env, record.id, large_item_limit=2)
    assert_completed_less(env, done, "big1", "big2")
    assert done.large_item_limit == 2


async def test_a_large_item_written_before_the_lock_fails_the_move_in_the_final_sync(tmp_path):
    env = env_with(tmp_path)
    env.at_step(5, lambda: put(env, "late", BIG))
    record = await env.move()
    assert record.state is MoveState.FAILED and record.step is MoveStep.FINAL_SYNC_AND_FLUSH
    assert "alice/late" in record.failure and "--large-item-limit 0" in record.failure
    box = env.nodes.dbs["DB1"].boxes["alice"]
    assert box.locked and not box.soft_deleted, "locked since step 5, as any failure after it"
    assert env.directory.entries["alice"] == "DB1"


async def test_the_skipped_set_follows_the_items_written_again_or_deleted(tmp_path):
    env = env_with(tmp_path, large=["shrinks", "goes"], large_item_limit=2)

    def users_write():
        put(env, "m5", BIG)  # copied small by the initial sync, now too large
        put(env, "shrinks", "small now")
        env.nodes.delete("DB1", "alice", "goes")

    env.at_step(4, users_write)
    record = await env.move()
    assert_completed_less(env, record, "m5")
    assert "m5" not in env.target(), "the target's older version was deleted"
    assert env.target()["shrinks"][2] == "small now"
    assert [s.item_id for s in record.skipped] == ["m5"]


async def test_a_raised_max_item_size_copies_the_skipped_items_when_resumed(tmp_path):
    env = env_with(tmp_path, large=["big1", "big2"])
    record = await env.move()
    assert record.state is MoveState.FAILED and "2 large items" in record.failure
    env.max_item_sizes = {"DB2": 10_000}  # the operator raised DB2's max_item_size
    done = await resume(env, record.id)
    assert_completed_less(env, done)
    assert done.skipped == () and done.reconciles == 1
    assert {"big1", "big2"} <= set(env.target())


async def test_bad_items_within_the_limit_are_skipped_and_the_source_summed_by_the_mover(
    tmp_path,
):
    env = env_with(tmp_path, bad=["b1", "b2"], bad_item_limit=2)
    record = await env.move()
    assert_completed_less(env, record, "b1", "b2")
    assert record.reconciles == 0
    changes = sorted(cn for (_, cn) in env.nodes.damaged)
    assert [(s.item_id, s.change_number, s.reason) for s in record.skipped] == [
        ("", changes[0], SkipReason.BAD),
        ("", changes[1], SkipReason.BAD),
    ]
    assert "HTTP 500" in record.skipped[0].detail
    # the source's node cannot hash the mailbox (it cannot read the row): it was never asked
    assert ("digest", "DB1") not in env.nodes.calls


async def test_more_bad_items_than_the_limit_fail_the_move_naming_their_changes(tmp_path):
    env = env_with(tmp_path, bad=["b1"], large=["big"], large_item_limit=1)
    before = env.source()
    record = await env.move()
    assert record.state is MoveState.FAILED and record.step < MoveStep.UPDATE_DIRECTORY
    change = next(iter(env.nodes.damaged))[1]
    assert f"1 bad item, more than --bad-item-limit 0: alice/? (change {change})" in (
        record.failure
    )
    assert "large" not in record.failure.split("bad item")[0], "the large one is within"
    assert_untouched(env, before)


async def test_a_difference_other_than_the_skipped_items_still_fails_the_move(tmp_path):
    env = env_with(tmp_path, large=["big"], large_item_limit=1)
    env.nodes.drops = {"m7"}  # the target acknowledges m7 and never holds it
    record = await env.move()
    assert record.state is MoveState.FAILED and "still differs" in record.failure
    assert "1 skipped item left out" in record.failure
    assert env.directory.entries["alice"] == "DB1"
    assert not env.nodes.dbs["DB1"].boxes["alice"].soft_deleted


async def test_a_failover_that_loses_the_target_keeps_the_skipped_items_out(tmp_path):
    env = env_with(tmp_path, large=["big"], bad=["bad"], large_item_limit=1, bad_item_limit=1)
    env.at_step(7, lambda: env.nodes.dbs["DB2"].failover(lose=2))
    record = await env.move()
    assert_completed_less(env, record, "big", "bad")
    assert record.reconciles >= 1 and len(record.skipped) == 2


async def test_kill_9_after_a_skip_then_resume_keeps_the_limits_and_the_skipped(tmp_path):
    env = env_with(tmp_path, large=["big"], large_item_limit=1)

    def crash(line):
        if line.startswith("skipping"):
            raise Crash()

    env.on_line.append(crash)
    with pytest.raises(Crash):
        await env.move()
    (stored,) = env.stored.list()
    assert [s.item_id for s in stored.skipped] == ["big"] and stored.large_item_limit == 1
    env.on_line.clear()
    record = await env.move(move_id=stored.id)
    assert_completed_less(env, record, "big")
    assert [s.item_id for s in record.skipped] == ["big"]
