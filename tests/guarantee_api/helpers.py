"""Building cluster configs and node status bodies for the guarantee API tests."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

from dag_common.config import ClusterConfig, parse_config
from dag_common.model import CopyRole, CopyStatus, CopyStatusReport, NodeStatus

T0 = datetime(2026, 11, 22, 12, 0, tzinfo=UTC)
SITES = {"mbx1": "redmond", "mbx2": "redmond", "mbx3": "dublin"}


def cluster_config(
    urls: dict[str, str], tmp: Path, *, db1_constraint: str = "SecondCopy", **api: object
) -> ClusterConfig:
    """A three-node, two-site cluster: DB1 on all three nodes, DB2 on mbx2 only."""
    return parse_config(
        {
            "cluster": "dag1",
            "nodes": [
                {"name": n, "site": SITES[n], "url": urls[n], "data_dir": f"./{n}"}
                for n in ("mbx1", "mbx2", "mbx3")
            ],
            "databases": [
                {
                    "name": "DB1",
                    "data_move_replication_constraint": db1_constraint,
                    "copies": [
                        {"node": "mbx1", "activation_preference": 1},
                        {"node": "mbx2", "activation_preference": 2},
                        {"node": "mbx3", "activation_preference": 3},
                    ],
                },
                {"name": "DB2", "copies": [{"node": "mbx2", "activation_preference": 1}]},
            ],
            "guarantee_api": {
                "listen": "127.0.0.1:0",
                "http_listen": "127.0.0.1:0",
                "history_dir": str(tmp / "history"),
                **api,
            },
        },
        base_dir=tmp,
    )


def report(
    node: str,
    database: str = "DB1",
    *,
    role: CopyRole = CopyRole.PASSIVE,
    status: CopyStatus | None = None,
    replayed: int = 100,
    cq: int = 0,
    rq: int = 0,
    replayed_time: datetime = T0,
    lag: timedelta = timedelta(0),
) -> CopyStatusReport:
    """One copy's status as its node would report it."""
    if status is None:
        status = CopyStatus.MOUNTED if role is CopyRole.ACTIVE else CopyStatus.HEALTHY
    generated = replayed + rq + cq
    return CopyStatusReport(
        database=database,
        node=node,
        site=SITES[node],
        role=role,
        status=status,
        activation_preference=int(node[-1]),
        last_log_generated=generated,
        last_log_copy_notified=generated,
        last_log_copied=replayed + rq,
        last_log_inspected=replayed + rq,
        last_log_replayed=generated if role is CopyRole.ACTIVE else replayed,
        copy_queue_length=cq,
        replay_queue_length=rq,
        last_inspected_log_time=replayed_time,
        last_replayed_log_time=replayed_time,
        replay_lag_time=lag,
    )


def node_status(node: str, *copies: CopyStatusReport) -> NodeStatus:
    return NodeStatus(node=node, site=SITES[node], copies=list(copies))


def healthy_cluster(**mbx2: object) -> dict[str, NodeStatus]:
    """DB1 active on mbx1, passive on mbx2 (tunable) and mbx3; DB2 active on mbx2."""
    return {
        "mbx1": node_status("mbx1", report("mbx1", role=CopyRole.ACTIVE)),
        "mbx2": node_status(
            "mbx2", report("mbx2", **mbx2), report("mbx2", "DB2", role=CopyRole.ACTIVE)
        ),
        "mbx3": node_status("mbx3", report("mbx3")),
    }
