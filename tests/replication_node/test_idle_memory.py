"""When a quiet node gives memory back (replication_node/storage/idle_memory.py), and the block-mode
buffer's blocks it lets go (log/blocks.py)."""

from __future__ import annotations

import asyncio

import pytest

from dag_common.clock import ManualClock
from dag_common.model import Position
from replication_node.log.blocks import Block, BlockFeed, FeedBehind
from replication_node.storage.idle_memory import Holders, IdleMemory, IdleState, release_due
from tests.cluster_harness import wait_until


@pytest.mark.parametrize(
    ("state", "mark", "due"),
    [
        (IdleState(), 1, False),  # the first tick: quiet for how long is not known
        (IdleState(last=1), 2, False),  # written since the last tick
        (IdleState(last=2), 2, True),  # quiet a whole interval
        (IdleState(last=2, released=2), 2, False),  # released already for this burst
        (IdleState(last=3, released=2), 3, True),  # a new burst, then quiet
    ],
)
def test_release_is_due_once_quiet_for_an_interval_once_per_burst(
    state: IdleState, mark: int, due: bool
) -> None:
    got, after = release_due(state, mark)
    assert got is due
    assert after == IdleState(last=mark, released=state.released)


def blocks(generation: int, count: int, size: int) -> list[Block]:
    return [Block(Position(generation, i * size), b"b" * size) for i in range(count)]


async def test_the_feed_lets_go_of_what_every_follower_was_sent_not_what_one_still_needs() -> None:
    feed = BlockFeed(generation=1, durable=0, capacity=1024)
    await feed.publish(blocks(1, 4, 1000))  # one publish: kept whole past the capacity
    assert feed.let_go_sent() == 0  # published since the last call: a joiner may want them
    assert feed.let_go_sent() == 4000  # no follower: all of them

    _, _, sequence = feed.position()
    await feed.publish(blocks(2, 3, 1000))
    follower = feed.follow(sequence, idle=5)
    assert (await anext(follower)).offset == 0  # it is sending the first block
    feed.let_go_sent()
    assert feed.let_go_sent() == 0  # the block being sent and the ones after it are kept
    assert (await anext(follower)).offset == 1000
    assert feed.let_go_sent() == 1000  # the first, sent
    assert (await anext(follower)).offset == 2000
    await follower.aclose()
    assert feed.let_go_sent() == 2000  # the follower gone: nothing kept for it

    stale = feed.follow(0, idle=5)
    with pytest.raises(FeedBehind):
        await asyncio.wait_for(anext(stale), 1)


async def test_quiet_ticks_after_a_release_trim_the_heap_and_writes_hold_it_off() -> None:
    """Released once per burst of writes (a block published); at each quiet tick after it
    the heap alone is trimmed again (reads write nothing: what they left in the heap goes
    back all the same); a tick after a write does neither."""
    feed = BlockFeed(generation=1, durable=0, capacity=1 << 20)
    dropped: list[int] = []
    holders = Holders(databases=[], feeds=[feed], let_go=(lambda: dropped.append(1),))
    clock = ManualClock()
    idle = IdleMemory(holders=lambda: holders, clock=clock, interval=5.0)
    task = asyncio.create_task(idle.run())

    def asleep() -> bool:
        return bool(clock.pending_sleeps())

    async def tick() -> tuple[int, int]:
        await clock.advance(5.0)
        # its release or trim runs in a worker thread; then it sleeps to the next tick
        await wait_until("the idle task asleep after its tick", asleep, timeout=30)
        return idle.releases, idle.trims

    try:
        await wait_until("the idle task asleep", asleep, timeout=30)
        assert [await tick() for _ in range(3)] == [(0, 0), (1, 0), (1, 1)]
        await feed.publish(blocks(1, 2, 100))  # a write
        assert await tick() == (1, 1), "written since the last tick: neither"
        assert [await tick() for _ in range(3)] == [(2, 1), (2, 2), (2, 3)]
        assert len(dropped) == 2  # the stager's buffers: once a burst
    finally:
        task.cancel()
