"""The embedded move store's calls run in threads of their own, as the cluster store's
(tests/dag_common/test_embedded_store_pool.py): a mover's work queued in asyncio's default
pool does not hold its lease, its saves or its reads back."""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import ThreadPoolExecutor

from mrs_client.move_store.embedded import EmbeddedMoveStore
from tests.mrs_client.fakes import record

STUCK = 10.0  # a bound on a failure, not a time the answers need


async def test_a_move_lease_and_a_save_are_answered_while_the_default_pool_is_busy(tmp_path):
    """The mover's store likewise: its claim, its writes (group commits) and its reads."""
    store = EmbeddedMoveStore(tmp_path / "cluster.db")
    loop = asyncio.get_running_loop()
    default = ThreadPoolExecutor(1, thread_name_prefix="default")
    loop.set_default_executor(default)
    release = threading.Event()
    busy = [asyncio.ensure_future(asyncio.to_thread(release.wait)) for _ in range(3)]
    try:
        move = record()
        calls = asyncio.ensure_future(asyncio.wait_for(_claim_and_read(store, move), timeout=STUCK))
        done, _ = await asyncio.wait({calls}, timeout=STUCK + 1)
        assert calls in done and calls.exception() is None, "queued behind the default pool"
        assert calls.result() == move.id
        assert not any(task.done() for task in busy), "the default pool was busy throughout"
    finally:
        release.set()
        await asyncio.gather(*busy, return_exceptions=True)
        default.shutdown(wait=True)
        await store.aclose()


async def _claim_and_read(store, move) -> str:
    await store.create([move])
    await store.claim(move.id, "mrs@here", 30.0)
    got = await store.get(move.id)
    assert got is not None
    return got.id
