import asyncio
from datetime import timedelta

import pytest

from dag_common.clock import ManualClock
from replication_node.errors import LogStreamStopped, TransactionTooLarge
from replication_node.log import logfile
from replication_node.log.logdir import list_closed_generations
from tests.cluster_harness import wait_until
from tests.replication_node.helpers import mount, op

SIZE = 32 * 1024


async def test_rolls_on_size_and_headers_chain(tmp_path):
    copy = await mount(tmp_path, log_file_size=SIZE)
    for i in range(200):
        await copy.commit(op(i))
    gens = list_closed_generations(copy.paths.logs)
    assert gens == list(range(1, len(gens) + 1)) and len(gens) >= 3
    prev = None
    for gen in gens:
        path = copy.paths.logs / logfile.closed_log_name(gen)
        assert path.stat().st_size <= SIZE
        result = logfile.verify_closed(path.read_bytes(), gen)
        if prev is not None:
            assert result.header.prev_creation_time == prev.creation_time
            assert result.header.log_signature == prev.log_signature
        prev = result.header
    assert copy.stream.generation == gens[-1] + 1
    await copy.crash_close()


async def test_lsn_points_at_the_record(tmp_path):
    copy = await mount(tmp_path, log_file_size=SIZE)
    acks = [await copy.commit(op(i)) for i in range(100)]
    await copy.roll()
    for i, ack in enumerate(acks):
        path = copy.paths.logs / logfile.closed_log_name(ack.lsn.generation)
        records = logfile.verify_closed(path.read_bytes()).records
        (rec,) = [r for r in records if r.offset == ack.lsn.offset]
        assert rec.ops[0]["item_id"] == f"i{i}"
    await copy.crash_close()


async def test_roll_on_demand(tmp_path):
    copy = await mount(tmp_path)
    assert await copy.roll() is None, "an empty log is not closed without force"
    await copy.commit(op(0))
    assert await copy.roll() == 1
    assert await copy.roll(force=True) == 2, "the mover's roll closes even an empty log"
    assert list_closed_generations(copy.paths.logs) == [1, 2]
    await copy.crash_close()


async def test_idle_roll_only_closes_a_partly_filled_log(tmp_path):
    clock = ManualClock()
    copy = await mount(tmp_path, clock=clock)
    roller = asyncio.create_task(copy.stream.run_idle_roller(timedelta(minutes=1.5).seconds))
    await clock.advance(100)
    assert list_closed_generations(copy.paths.logs) == [], "idle and empty: no roll"
    await copy.commit(op(0))
    for _ in range(3):
        await clock.advance(90)
    await wait_until("the idle roll", lambda: list_closed_generations(copy.paths.logs), timeout=10)
    assert list_closed_generations(copy.paths.logs) == [1]
    roller.cancel()
    await copy.crash_close()


async def test_group_commit_shares_fsyncs(tmp_path):
    copy = await mount(tmp_path, log_file_size=1 << 20)
    before = copy.stream.fsyncs
    await asyncio.gather(*(copy.commit(op(i, 100)) for i in range(256)))
    used = copy.stream.fsyncs - before
    assert used < 256 / 4, f"{used} fsyncs for 256 concurrent commits"
    await copy.crash_close()


async def test_transaction_too_large_is_refused_and_changes_nothing(tmp_path):
    copy = await mount(tmp_path, log_file_size=SIZE)
    with pytest.raises(TransactionTooLarge):
        await copy.commit(op(0, SIZE))
    assert copy.stream.open_record_count == 0
    await copy.commit(op(1))
    assert copy.stream.open_record_count == 1
    await copy.crash_close()


class JumpingClock(ManualClock):
    """A wall clock an operator (or NTP) can set back."""

    def __init__(self) -> None:
        super().__init__()
        self.offset = timedelta(0)

    def now(self):
        return super().now() + self.offset


async def test_commit_and_close_times_never_go_backwards_when_the_clock_jumps_back(tmp_path):
    clock = JumpingClock()
    copy = await mount(tmp_path, log_file_size=SIZE, clock=clock)
    await clock.advance(60)
    before = await copy.commit(op(0))
    closed = await copy.roll(force=True)
    close_time = logfile.close_time_of(copy.paths.logs / logfile.closed_log_name(closed))
    clock.offset = -timedelta(hours=1)
    after = await copy.commit(op(1))
    # A write after the jump is never stamped before the log the copies already have: a
    # flush by commit time (replayed log time > commit time + skew) cannot call it replicated.
    assert after.commit_time >= close_time >= before.commit_time
    second = await copy.roll(force=True)
    second_close = logfile.close_time_of(copy.paths.logs / logfile.closed_log_name(second))
    assert second_close >= after.commit_time
    await copy.crash_close()
    # Reopened after a crash, the stream goes on from the latest time in its open log.
    reopened = await mount(tmp_path, log_file_size=SIZE, clock=clock)
    third = await reopened.commit(op(2))
    assert third.commit_time >= second_close
    await reopened.crash_close()


async def test_a_writer_that_fails_after_the_fsync_answers_every_waiter(tmp_path):
    """Whatever stops the writer after a batch is durable (here a listener's bug) answers
    the batch's committers with the failure and stops the stream: none waits forever.  A
    CI run saw a write on a deposed active never answered."""
    copy = await mount(tmp_path)
    await copy.commit(op(0))

    def buggy(event) -> None:
        raise RuntimeError("a listener's bug")

    copy.stream.add_listener(buggy)
    with pytest.raises(LogStreamStopped, match="the log writer failed"):
        await asyncio.wait_for(copy.commit(op(1)), 10)
    assert copy.stream.failed.is_set(), "its owner dismounts"
    with pytest.raises(LogStreamStopped):
        await asyncio.wait_for(copy.commit(op(2)), 10)
    await copy.crash_close()
