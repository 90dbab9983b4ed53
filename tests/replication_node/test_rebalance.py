"""The rebalance plan (replication_node.rebalance), table-driven over status rows as nodes
report them: each database back to its most preferred healthy copy, by switchover only."""

from __future__ import annotations

import pytest

from dag_common.config import DatabaseConfig
from dag_common.model import CopyRole, CopyStatus, CopyStatusReport, NodeStatus
from replication_node.rebalance import Move, MoveKind, plan_database, plan_rebalance

DB1 = DatabaseConfig.model_validate(
    {
        "name": "DB1",
        "copies": [
            {"node": "mbx3", "activation_preference": 3},
            {"node": "mbx1", "activation_preference": 1},
            {"node": "mbx2", "activation_preference": 2},
        ],
    }
)
A, H = ("Active", "Mounted"), ("Passive", "Healthy")


def nodes(db: str = "DB1", **copies: tuple[str, str] | str) -> dict[str, NodeStatus | str]:
    """Each node's status with its copy of `db` as (role, status), or why it is missing."""
    out: dict[str, NodeStatus | str] = {}
    for node, state in copies.items():
        if isinstance(state, str):
            out[node] = state
            continue
        role, status = state
        report = CopyStatusReport(
            database=db,
            node=node,
            site="redmond",
            role=CopyRole(role),
            status=CopyStatus(status),
            activation_preference=1,
            error="patching" if status == "Suspended" else None,
        )
        out[node] = NodeStatus(node=node, site="redmond", copies=[report])
    return out


CASES = [
    (
        "on its preferred copy",
        nodes(mbx1=A, mbx2=H, mbx3=H),
        Move("DB1", MoveKind.STAY, "mbx1", None, "already on its preferred copy (mbx1)"),
    ),
    (
        "on its second copy, the first healthy",
        nodes(mbx1=H, mbx2=A, mbx3=H),
        Move("DB1", MoveKind.SWITCH, "mbx2", "mbx1", ""),
    ),
    (
        "on its third copy, the first unreachable: to the second",
        nodes(mbx1="unreachable: connection refused", mbx2=H, mbx3=A),
        Move(
            "DB1",
            MoveKind.SWITCH,
            "mbx3",
            "mbx2",
            "passing over mbx1: unreachable: connection refused",
        ),
    ),
    (
        "on its second copy, the first suspended: skipped with why",
        nodes(mbx1=("Passive", "Suspended"), mbx2=A, mbx3=H),
        Move(
            "DB1",
            MoveKind.SKIP,
            "mbx2",
            None,
            "the preferred copy cannot take over: mbx1 is Suspended (patching) (stays on mbx2)",
        ),
    ),
    (
        "the first still copying, the second failed: stays on the third",
        nodes(mbx1=("Passive", "Initializing"), mbx2=("Passive", "Failed"), mbx3=A),
        Move(
            "DB1",
            MoveKind.SKIP,
            "mbx3",
            None,
            "the preferred copy cannot take over: mbx1 is Initializing; mbx2 is Failed "
            "(stays on mbx3)",
        ),
    ),
    (
        "a node answering without the copy",
        nodes("DB2", mbx1=H) | nodes(mbx2=A),
        Move(
            "DB1",
            MoveKind.SKIP,
            "mbx2",
            None,
            "the preferred copy cannot take over: mbx1: reports no copy of DB1 (stays on mbx2)",
        ),
    ),
    (
        "a dismounted active is never switched over (nor activated)",
        nodes(mbx1=H, mbx2=("Active", "Dismounted"), mbx3=H),
        Move(
            "DB1",
            MoveKind.SKIP,
            "mbx2",
            None,
            "the active copy on mbx2 is Dismounted, not Mounted (a switchover needs a mounted "
            "active; see `db mount`, `db activate`)",
        ),
    ),
    (
        "no active reported: the lost active's node is named",
        nodes(mbx1="unreachable: connection refused", mbx2=H, mbx3=H),
        Move(
            "DB1",
            MoveKind.SKIP,
            None,
            None,
            "no copy reports a mounted active copy (mbx1: unreachable: connection refused)",
        ),
    ),
    (
        "an old active not told yet beside the mounted one: the mounted one counts",
        nodes(mbx1=("Active", "Failed"), mbx2=A, mbx3=H),
        Move(
            "DB1",
            MoveKind.SKIP,
            "mbx2",
            None,
            "the preferred copy cannot take over: mbx1 is Failed (stays on mbx2)",
        ),
    ),
]


@pytest.mark.parametrize(("case", "views", "expected"), CASES, ids=[c[0] for c in CASES])
def test_plan(case, views, expected):
    assert plan_database(DB1, views) == expected


def test_lines_read_as_an_operator_reads_them():
    switch = Move("DB1", MoveKind.SWITCH, "mbx3", "mbx2", "passing over mbx1: unreachable")
    assert switch.line(dry_run=True) == (
        "DB1: would switch over from mbx3 to mbx2 (passing over mbx1: unreachable)"
    )
    stay = plan_database(DB1, nodes(mbx1=A, mbx2=H))
    assert stay.line() == "DB1: already on its preferred copy (mbx1)"
    skip = plan_database(DB1, nodes(mbx1=("Passive", "Suspended"), mbx2=A))
    assert skip.line().startswith("DB1: skipped: the preferred copy cannot take over: mbx1 is")


def test_one_move_per_database_in_the_configs_order():
    db2 = DatabaseConfig.model_validate(
        {"name": "DB2", "copies": [{"node": "mbx2", "activation_preference": 1}]}
    )
    views = nodes(mbx1=H, mbx2=A)
    views["mbx2"] = views["mbx2"].model_copy(
        update={"copies": [*views["mbx2"].copies, *nodes("DB2", mbx2=A)["mbx2"].copies]}
    )
    plan = plan_rebalance([db2, DB1], views)
    assert [(m.database, m.kind) for m in plan] == [
        ("DB2", MoveKind.STAY),
        ("DB1", MoveKind.SWITCH),
    ]
