"""The embedded cluster store's calls run in a pool of their own: work queued in asyncio's
default pool (a folder listing, a backup) does not hold an active's lease renewal back."""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import ThreadPoolExecutor

from dag_common.cluster_store.embedded import EmbeddedClusterStore

# How long the test waits for the renewal before it calls it stuck: a bound on a failure,
# not a time the answer needs (it comes in milliseconds).
STUCK = 10.0


async def test_a_renewal_is_answered_while_the_default_pool_is_busy(tmp_path):
    store = EmbeddedClusterStore(tmp_path / "cluster.db")
    await store.set_active("DB1", "a", expected_epoch=0, start_generation=1)
    loop = asyncio.get_running_loop()
    default = ThreadPoolExecutor(1, thread_name_prefix="default")
    loop.set_default_executor(default)
    release = threading.Event()
    # The default pool's one thread is taken, and more work waits behind it.
    busy = [asyncio.ensure_future(asyncio.to_thread(release.wait)) for _ in range(3)]
    try:
        renewal = asyncio.ensure_future(store.renew_lease("DB1", "a", 1, 6.0))
        done, _ = await asyncio.wait({renewal}, timeout=STUCK)
        assert renewal in done, "the renewal queued behind the default pool's work"
        assert renewal.result() is True
        assert not any(task.done() for task in busy), "the default pool was busy throughout"
        assert (await store.lease("DB1")).node == "a"
    finally:
        release.set()
        await asyncio.gather(*busy, renewal, return_exceptions=True)
        default.shutdown(wait=True)
        store.close()
