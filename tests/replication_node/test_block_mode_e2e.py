"""Block mode over real node processes: a kill -9 of the active under eight concurrent
writers, then automatic failover.  With one synchronous copy and the Lossless dial nothing
acknowledged is lost; without, the loss is counted and within the dial."""

from __future__ import annotations

import asyncio
import re

import aiohttp
import pytest

from tests.cluster_harness import THREE_NODES, LocalCluster, wait_until
from tests.replication_node.e2e import in_block_mode, mounted_on

pytestmark = pytest.mark.slow

ITEMS = "/v1/databases/DB1/mailboxes/m/items"


def cluster_of(tmp_path, *, dial: str, synchronous: int) -> LocalCluster:
    return LocalCluster(
        tmp_path,
        nodes=THREE_NODES,
        databases=[
            {
                "name": "DB1",
                "auto_database_mount_dial": dial,
                "synchronous_copies": synchronous,
                "copies": [
                    {"node": "mbx1", "activation_preference": 1},
                    {"node": "mbx2", "activation_preference": 2},
                    {"node": "mbx3", "activation_preference": 3},
                ],
            }
        ],
        defaults={"failover_after": "2s", "lease_ttl": "2s", "log_file_size": "1MiB"},
    )


async def write_until_killed(cluster: LocalCluster, writers: int = 8) -> list[str]:
    """Eight writers putting items to mbx1 until it dies; every item acknowledged."""
    acked: list[str] = []
    timeout = aiohttp.ClientTimeout(total=10)

    async def writer(w: int) -> None:
        i = 0
        while True:
            item = f"w{w}-{i}"
            try:
                code, _ = await cluster.call(
                    "POST", "mbx1", ITEMS, json={"items": [{"item_id": item}]}, timeout=timeout
                )
            except (aiohttp.ClientError, TimeoutError):
                return  # the node is gone
            if code < 300:
                acked.append(item)
            i += 1

    tasks = [asyncio.create_task(writer(w)) for w in range(writers)]
    await wait_until("writes acknowledged", lambda: len(acked) >= 200, timeout=60)
    cluster.kill("mbx1")
    await asyncio.gather(*tasks)
    return acked


async def kill_under_load(cluster: LocalCluster) -> tuple[list[str], str, dict]:
    """Both copies in block mode, mbx1 killed under load, a copy mounted by automatic
    failover: the acknowledged items, the new active, and the items it has."""
    await cluster.start()
    await cluster.wait_status("mbx1", "DB1", "Mounted")
    await in_block_mode(cluster, "DB1", ["mbx2", "mbx3"])
    await cluster.ok("PUT", "mbx1", "/v1/databases/DB1/mailboxes/m")
    acked = await write_until_killed(cluster)
    active = await mounted_on(cluster, "DB1", ["mbx2", "mbx3"])
    return acked, active, await cluster.items(active, "DB1", "m")


async def test_with_one_synchronous_copy_a_kill_under_load_loses_no_acknowledged_write(
    tmp_path,
):
    cluster = cluster_of(tmp_path, dial="Lossless", synchronous=1)
    try:
        acked, active, items = await kill_under_load(cluster)
        lost = [item for item in acked if item not in items]
        assert not lost, f"{len(lost)} of {len(acked)} acknowledged writes lost: {lost[:5]}"
        log = cluster.log(active)
        assert "block-mode buffer kept as generation" in log, log[-3000:]
    finally:
        await cluster.close()


async def test_without_synchronous_copies_the_loss_is_counted_and_within_the_dial(tmp_path):
    cluster = cluster_of(tmp_path, dial="BestAvailability", synchronous=0)
    try:
        acked, active, items = await kill_under_load(cluster)
        lost = [item for item in acked if item not in items]
        said = re.search(r"(\d+) log\(s\) lost", cluster.log(active))
        assert said is not None, cluster.log(active)[-3000:]
        assert int(said.group(1)) <= 6, "BestAvailability allows at most 6 lost logs"
        # Block mode keeps what the copy held: at most the commits in flight are lost.
        assert len(lost) <= 8 * 2, f"{len(lost)} acknowledged writes lost with 8 writers"
    finally:
        await cluster.close()
