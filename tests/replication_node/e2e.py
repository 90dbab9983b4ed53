"""Shared by the replication_node tests over real node processes: the three nodes and two
databases most of them run, writing items, and waiting for the copies to converge."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.cluster_harness import THREE_NODES, LocalCluster


def databases(lag: str = "0s") -> list[dict[str, Any]]:
    """DB1 on mbx1, mbx2 and mbx3 (its copy lagged by `lag`); DB2 on mbx2 and mbx3."""
    return [
        {
            "name": "DB1",
            "copies": [
                {"node": "mbx1", "activation_preference": 1},
                {"node": "mbx2", "activation_preference": 2},
                {"node": "mbx3", "activation_preference": 3, "replay_lag_time": lag},
            ],
        },
        {
            "name": "DB2",
            "copies": [
                {"node": "mbx2", "activation_preference": 1},
                {"node": "mbx3", "activation_preference": 2},
            ],
        },
    ]


def three_nodes(root: Path, *, lag: str = "0s", **settings: Any) -> LocalCluster:
    """THREE_NODES serving `databases(lag)`, not started yet (`settings`: defaults, …)."""
    return LocalCluster(root, nodes=THREE_NODES, databases=databases(lag), **settings)


def two_nodes(root: Path, **defaults: Any) -> LocalCluster:
    """DB1 active on mbx1 with a copy on mbx2, both in redmond; the operator activates
    (no automatic failover); `defaults`: the config's other defaults."""
    return LocalCluster(
        root,
        nodes=[("mbx1", "redmond"), ("mbx2", "redmond")],
        databases=[
            {
                "name": "DB1",
                "copies": [
                    {"node": "mbx1", "activation_preference": 1},
                    {"node": "mbx2", "activation_preference": 2},
                ],
            }
        ],
        defaults={"failover_after": None, **defaults},
    )


async def write(
    cluster: LocalCluster, node: str, db: str, mailbox: str, start: int, n: int, body: int = 600
) -> None:
    """Items i{start}..i{start + n - 1} to `mailbox` on `node`, 50 a request."""
    for first in range(start, start + n, 50):
        await cluster.ok(
            "POST",
            node,
            f"/v1/databases/{db}/mailboxes/{mailbox}/items",
            json={
                "items": [
                    {"item_id": f"i{i}", "subject": f"s{i}", "body": f"{i}:" + "b" * body}
                    for i in range(first, min(start + n, first + 50))
                ]
            },
        )


async def converged(cluster: LocalCluster, db: str, active: str, passives: list[str]) -> int:
    """Roll the active's log, wait until every passive is Healthy and has replayed through
    it; the generation."""
    await cluster.ok("POST", active, f"/v1/databases/{db}/roll-log")
    generated = (await cluster.status(active))[db]["last_log_generated"]

    async def check() -> bool:
        for node in passives:
            copy = (await cluster.status(node))[db]
            if copy["status"] != "Healthy" or copy["last_log_replayed"] < generated:
                return False
        return True

    await cluster.wait_for(f"{db} replayed through {generated} on {passives}", check)
    return generated


async def mounted_on(cluster: LocalCluster, db: str, nodes: list[str], timeout: float = 90) -> str:
    """Wait until one of `nodes` reports its copy of `db` Mounted (a failover's new active);
    that node."""
    found: list[str] = []

    async def mounted() -> bool:
        for node in nodes:
            if (await cluster.status(node))[db]["status"] == "Mounted":
                found.append(node)
                return True
        return False

    await cluster.wait_for(f"{db} mounted on one of {nodes}", mounted, timeout=timeout)
    return found[0]


async def in_block_mode(cluster: LocalCluster, db: str, nodes: list[str]) -> None:
    """Wait until every copy of `db` on `nodes` follows its active in block mode."""

    async def following() -> bool:
        for node in nodes:
            if (await cluster.status(node))[db]["copy_mode"] != "Block":
                return False
        return True

    await cluster.wait_for(f"{db} in block mode on {nodes}", following)
