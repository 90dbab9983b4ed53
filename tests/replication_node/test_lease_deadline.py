"""A renewal's deadline is judged by the store's answer, not by a held loop: the answer that
came while the event loop was held (a long listing) is taken when the loop runs again, its
validity still counted from before the request; a store that does not answer still fails
the renewal.  A real embedded store; the loop is held for real (that is the case), briefly."""

from __future__ import annotations

import asyncio
import threading
import time

from dag_common.clock import SystemClock
from dag_common.cluster_store.embedded import EmbeddedClusterStore
from replication_node.active.lease import SAFETY, LeaseKeeper
from replication_node.errors import LeaseLost

TTL = 0.6  # the deadline is ttl/3 of the loop's time: 0.2 s
HELD = 0.5  # the loop held well past it, not past the TTL


class AnswerWhileHeld(EmbeddedClusterStore):
    """The real store; `sent` is set once a renewal is in its thread, `answered` once its
    answer is out (the loop may still be held)."""

    def __init__(self, path) -> None:
        super().__init__(path)
        self.sent = asyncio.Event()
        self.answered = threading.Event()
        self.silent = False  # the store never answers a renewal

    def _renew_lease(self, database, node, epoch, ttl):
        granted = super()._renew_lease(database, node, epoch, ttl)
        self.answered.set()
        return granted

    async def renew_lease(self, database, node, epoch, ttl):
        self.sent.set()
        if self.silent:
            await asyncio.Event().wait()
        return await super().renew_lease(database, node, epoch, ttl)


async def _keeper(tmp_path) -> tuple[AnswerWhileHeld, LeaseKeeper]:
    store = AnswerWhileHeld(tmp_path / "cluster.db")
    await store.set_active("DB1", "a", expected_epoch=0, start_generation=1)
    keeper = LeaseKeeper(
        cluster_store=store, database="DB1", node="a", epoch=1, ttl=TTL, clock=SystemClock()
    )
    return store, keeper


def _hold_the_loop(seconds: float) -> None:
    time.sleep(seconds)  # the loop is held, as by a listing built on it


async def test_an_answer_that_came_while_the_loop_was_held_is_taken(tmp_path):
    store, keeper = await _keeper(tmp_path)
    try:
        sent_at = time.monotonic()
        renewal = asyncio.ensure_future(keeper.confirm())
        await store.sent.wait()
        assert store.answered.wait(TTL), "the store answered (in its own thread)"
        _hold_the_loop(HELD)  # the deadline is due meanwhile, and fires late
        assert await renewal is None, "granted: the late timer is not the store's answer"
        assert keeper.failing is None
        # counted from before the request, so it is already shorter by the held time
        assert keeper.valid_until is not None
        assert keeper.valid_until <= sent_at + HELD + TTL * SAFETY
        assert keeper.expires_in() < TTL * SAFETY - HELD + 0.1
        assert (await store.lease("DB1")).node == "a"
    finally:
        store.close()


async def test_a_store_that_does_not_answer_still_fails_the_renewal(tmp_path):
    store, keeper = await _keeper(tmp_path)
    store.silent = True
    try:
        renewal = asyncio.ensure_future(keeper.confirm())
        await store.sent.wait()
        _hold_the_loop(HELD)
        failure = await renewal
        assert isinstance(failure, LeaseLost), failure
        assert keeper.failing is not None and "no answer" in keeper.failing
        assert not keeper.held()
    finally:
        store.close()
