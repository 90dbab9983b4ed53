"""Read load does not fail the active over (issue 50, the IMAP benchmark), over real node
processes: IMAP sessions opened eight at a time, each SELECT listing a 10,000-message
folder's UIDs, made mbx1's lease renewal time out after 7.6 s and DB1 was dismounted.

Here eight clients list a 10,000-item folder over and over while a status call is asked
during one of the listings: the status is answered before that listing ends (before, each
listing was built and written whole on the node's loop), and DB1 stays mounted on mbx1 at the
same epoch throughout, its lease renewed (no dismount, no failover, no epoch change).
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import aiohttp
import pytest

from tests.cluster_harness import wait_until
from tests.replication_node.e2e import two_nodes

pytestmark = pytest.mark.slow

BOX = "/v1/databases/DB1/mailboxes/alice"
UIDS = f"{BOX}/folders/Inbox/uids"
ITEMS = 10_000
BATCH = 1_000
LISTERS = 8
ROUNDS = 3
LONG = aiohttp.ClientTimeout(total=300)


async def mounted(c, node: str) -> dict:
    async def ready() -> bool:
        return (await c.status(node))["DB1"]["status"] == "Mounted"

    await wait_until(f"DB1 mounted on {node}", ready, timeout=60, tolerate=(KeyError,))
    return (await c.status(node))["DB1"]


async def fill(c) -> None:
    """ITEMS small items in Inbox, written BATCH at a time (one transaction each)."""
    await c.ok("PUT", "mbx1", BOX, json={"folders": ["Inbox"]})
    for first in range(0, ITEMS, BATCH):
        items = [
            {"item_id": f"m{i:05}", "subject": f"message {i}", "body": f"{i}: " + "x" * 200}
            for i in range(first, first + BATCH)
        ]
        await c.ok("POST", "mbx1", f"{BOX}/items", json={"items": items}, timeout=LONG)


async def test_a_status_and_the_lease_are_answered_through_many_large_uid_listings(
    tmp_path: Path,
) -> None:
    # A short lease: a loop held for two seconds loses it (the benchmark's held it 7.6 s).
    c = two_nodes(tmp_path, lease_ttl="2s", log_file_size="1MiB")
    await c.start()
    try:
        before = await mounted(c, "mbx1")
        await fill(c)
        listed = await c.ok("GET", "mbx1", UIDS, timeout=LONG)
        assert len(listed["messages"]) == ITEMS

        async def list_all() -> None:
            for _ in range(ROUNDS):
                body = await c.ok("GET", "mbx1", UIDS, timeout=LONG)
                assert len(body["messages"]) == ITEMS

        background = [asyncio.create_task(list_all()) for _ in range(LISTERS - 1)]
        # The watched listing: a status asked once it was sent is answered before it is.
        watched = asyncio.create_task(c.ok("GET", "mbx1", UIDS, timeout=LONG))
        await asyncio.sleep(0)  # sent: the request is on its way before the status's
        asked = time.monotonic()
        status = await c.status("mbx1")
        latency = time.monotonic() - asked
        answered_during = not watched.done()
        assert len((await watched)["messages"]) == ITEMS
        await asyncio.gather(*background)
        assert status["DB1"]["status"] == "Mounted"
        assert answered_during, (
            f"the status call was answered only once the listing had been ({latency:.2f}s)"
        )

        after = await mounted(c, "mbx1")
        assert after["epoch"] == before["epoch"], (before, after)
        assert (await c.status("mbx2"))["DB1"]["status"] != "Mounted"
        log = c.log("mbx1")
        assert "cannot renew the active's lease" not in log, log[-3000:]
    finally:
        await c.close()
