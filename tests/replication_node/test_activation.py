"""The mount decision of an activation (pure), table-driven."""

from __future__ import annotations

import pytest

from dag_common.model import AutoDatabaseMountDial, CopyRole, CopyStatus, CopyStatusReport
from replication_node.activation import mount_decision

LOSSLESS = AutoDatabaseMountDial.LOSSLESS
GOOD = AutoDatabaseMountDial.GOOD_AVAILABILITY
BEST = AutoDatabaseMountDial.BEST_AVAILABILITY


def copy(inspected=10, status=CopyStatus.HEALTHY, role=CopyRole.PASSIVE, error=None):
    return CopyStatusReport(
        database="DB1",
        node="mbx2",
        site="s",
        role=role,
        status=status,
        activation_preference=2,
        last_log_inspected=inspected,
        error=error,
    )


@pytest.mark.parametrize(
    ("c", "generated", "dial", "reachable", "allowed", "lost", "words"),
    [
        (copy(10), 10, LOSSLESS, False, True, 0, "0 log(s) lost"),
        (copy(9), 10, LOSSLESS, False, False, 1, "more than Lossless allows (0)"),
        (copy(7), 10, GOOD, False, True, 3, "within GoodAvailability"),
        (copy(6), 10, GOOD, False, False, 4, "more than GoodAvailability allows (3)"),
        (copy(4), 10, BEST, False, True, 6, "within BestAvailability"),
        (copy(3), 10, BEST, False, False, 7, "more than BestAvailability allows (6)"),
        (copy(12), 10, LOSSLESS, False, True, 0, "0 log(s) lost"),
        (copy(status=CopyStatus.DISCONNECTED_AND_HEALTHY), 10, LOSSLESS, False, True, 0, "lost"),
        (copy(10), 10, BEST, True, False, 0, "switchover"),
        (None, 10, BEST, False, False, 0, "cannot be reached"),
        (
            copy(role=CopyRole.ACTIVE, status=CopyStatus.MOUNTED),
            10,
            BEST,
            False,
            False,
            0,
            "already",
        ),
        (
            copy(status=CopyStatus.SUSPENDED, error="disk"),
            10,
            BEST,
            False,
            False,
            0,
            "Suspended: disk",
        ),
        (copy(status=CopyStatus.FAILED_AND_SUSPENDED), 10, BEST, False, False, 0, "FailedAndSus"),
        (copy(status=CopyStatus.SEEDING), 10, BEST, False, False, 0, "Seeding"),
    ],
)
def test_mount_decision(c, generated, dial, reachable, allowed, lost, words):
    decision = mount_decision(
        node="mbx2",
        copy=c,
        last_log_generated=generated,
        dial=dial,
        active_reachable=reachable,
        active_node="mbx1",
    )
    assert (decision.allowed, decision.lost_logs) == (allowed, lost)
    assert words in decision.reason


def test_best_copy_has_inspected_the_most_then_the_lowest_preference():
    from replication_node.activation import best_copy

    def at(node, inspected, pref, status=CopyStatus.DISCONNECTED_AND_HEALTHY):
        return copy(inspected, status).model_copy(
            update={"node": node, "activation_preference": pref}
        )

    assert best_copy([at("a", 8, 2), at("b", 9, 3)])[0] == "b"
    assert best_copy([at("a", 9, 3), at("b", 9, 2)])[0] == "b"
    assert best_copy([at("a", 12, 2, CopyStatus.SUSPENDED), at("b", 9, 3)])[0] == "b"
    assert best_copy([at("a", 12, 1, CopyStatus.FAILED_AND_SUSPENDED)]) == (
        None,
        "no passive copy is Healthy or DisconnectedAndHealthy",
    )
    mounted = copy(role=CopyRole.ACTIVE, status=CopyStatus.MOUNTED)
    assert best_copy([mounted])[0] is None
