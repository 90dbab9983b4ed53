"""An active's reads of its own record before a mount, while the cluster store errs.

The mount waits on both `record` (the change-number ceiling) and `lost_logs` (what the
activation lost, for the UIDs it must not hand out again): each is asked again with a growing
wait until the store answers, and neither answers anything before the store does.  The store
is a real embedded cluster store file; only its failures are injected, by a wrapper that lets
the first calls of one method raise as a store that cannot be reached does.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pytest

from dag_common.backoff import wait_after
from dag_common.clock import ManualClock
from dag_common.cluster_store.embedded import EmbeddedClusterStore
from dag_common.cluster_store.interface import ActivationCause
from replication_node.active.publication import (
    STORE_RETRY_FIRST,
    STORE_RETRY_LONGEST,
    ActivePublication,
)


class Unreachable:
    """A real store whose method `name` raises for its first `failures` calls."""

    def __init__(self, store: EmbeddedClusterStore, name: str, failures: int) -> None:
        self._store, self._name, self.left, self.calls = store, name, failures, 0

    def __getattr__(self, attr: str):
        real = getattr(self._store, attr)
        if attr != self._name:
            return real

        async def failing(*args, **kwargs):
            self.calls += 1
            if self.left > 0:
                self.left -= 1
                raise ConnectionError("cluster store unreachable")
            return await real(*args, **kwargs)

        return failing


async def _store(tmp_path: Path, clock: ManualClock) -> EmbeddedClusterStore:
    store = EmbeddedClusterStore(tmp_path / "cluster.db", clock=clock)
    await store.set_active(
        "DB1", "a", expected_epoch=0, start_generation=1, cause=ActivationCause.FIRST_MOUNT
    )
    await store.set_active(
        "DB1", "b", expected_epoch=1, start_generation=9, lost_logs=3,
        cause=ActivationCause.AUTOMATIC_FAILOVER,
    )  # fmt: skip
    return store


async def _answer_after(clock: ManualClock, task: asyncio.Task, failures: int) -> list[float]:
    """Advance the clock by each wait the task sleeps until it is done; the waits."""
    waits: list[float] = []
    while not task.done():
        pending = clock.pending_sleeps()
        if not pending:
            await asyncio.sleep(0)
            continue
        waits.append(pending[0])
        await clock.advance(pending[0])
    assert len(waits) == failures
    return waits


@pytest.mark.parametrize("what", ["history", "active"])
async def test_a_mount_waits_for_the_store_and_reads_its_answer(tmp_path, caplog, what):
    clock = ManualClock()
    store = await _store(tmp_path, clock)
    flaky = Unreachable(store, what, failures=12)
    publication = ActivePublication(
        cluster_store=flaky, database="DB1", node="b", epoch=2, clock=clock
    )
    read = publication.lost_logs() if what == "history" else publication.record()
    with caplog.at_level(logging.WARNING, logger="replication_node.active.publication"):
        task = asyncio.ensure_future(read)
        waits = await _answer_after(clock, task, failures=12)
    answer = task.result()
    if what == "history":
        assert answer == 3, "the lost logs of this epoch's activation, once the store answers"
    else:
        assert (answer.node, answer.epoch) == ("b", 2)
    assert flaky.calls == 13
    # 50 ms, doubling to the longest and staying there
    expected = [wait_after(STORE_RETRY_FIRST, STORE_RETRY_LONGEST, n) for n in range(1, 13)]
    assert waits == pytest.approx(expected)
    assert waits[0] == STORE_RETRY_FIRST and waits[-1] == STORE_RETRY_LONGEST
    said = [r.getMessage() for r in caplog.records]
    assert len(said) == 2, "a warning the first time and the tenth, not at each attempt"
    assert all("DB1: mount waits: cannot read" in m for m in said), said


async def test_an_epoch_the_history_does_not_hold_is_not_known(tmp_path):
    clock = ManualClock()
    store = await _store(tmp_path, clock)
    publication = ActivePublication(
        cluster_store=store, database="DB1", node="b", epoch=7, clock=clock
    )
    assert await publication.lost_logs() is None
