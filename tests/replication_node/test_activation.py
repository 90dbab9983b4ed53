"""The loss computation and mount decision of an activation (pure), table-driven."""

from __future__ import annotations

import pytest

from dag_common.model import AutoDatabaseMountDial, CopyRole, CopyStatus, CopyStatusReport
from replication_node.cluster.mount_policy import (
    AtRisk,
    OpenLog,
    assess_loss,
    best_copy,
    generations_at_risk,
    mount_decision,
)

LOSSLESS = AutoDatabaseMountDial.LOSSLESS
GOOD = AutoDatabaseMountDial.GOOD_AVAILABILITY
BEST = AutoDatabaseMountDial.BEST_AVAILABILITY


def copy(inspected=10, status=CopyStatus.HEALTHY, role=CopyRole.PASSIVE, error=None, **kw):
    return CopyStatusReport(
        database="DB1",
        node="mbx2",
        site="s",
        role=role,
        status=status,
        activation_preference=2,
        last_log_inspected=inspected,
        error=error,
        **kw,
    )


def heard(generated, open_commits=0):
    """A copy's report of what it last heard from the active."""
    return copy(last_log_generated=generated, open_commits=open_commits)


@pytest.mark.parametrize(
    ("closed", "open_generation", "reports", "expected"),
    [
        # nothing announced beyond the closed generations
        (10, 0, [], AtRisk(10)),
        # the open log 11 was announced (before its first acknowledgement); no copy heard it
        (10, 11, [], AtRisk(11, OpenLog(11, None))),
        # a copy heard 30 commits in it: the count is known (at least 30)
        (10, 11, [heard(11, 30), heard(11, 12)], AtRisk(11, OpenLog(11, 30))),
        # the store's LastLogGenerated lags a roll: a copy heard 11 closed, 12 holds nothing
        (10, 11, [heard(11)], AtRisk(11)),
        # an open log announced and then closed by a roll: closed, not open
        (11, 11, [], AtRisk(11)),
        # a copy heard 11 open; the store knows 12 was announced since (11 closed meanwhile)
        (10, 12, [heard(11, 5)], AtRisk(12, OpenLog(12, None))),
        # only a copy heard the open log (the store was written, a report is older): counted
        (9, 0, [heard(10, 3)], AtRisk(10, OpenLog(10, 3))),
        # a fresh epoch: nothing yet
        (0, 0, [], AtRisk(0)),
    ],
)
def test_generations_at_risk(closed, open_generation, reports, expected):
    got = generations_at_risk(
        last_log_generated=closed, open_generation=open_generation, reports=reports
    )
    assert got == expected


@pytest.mark.parametrize(
    ("at_risk", "inspected", "dial", "allowed", "lost", "open_lost", "commits", "words"),
    [
        # closed generations only
        (AtRisk(10), 10, LOSSLESS, True, 0, False, None, "0 log(s) lost"),
        (AtRisk(10), 9, LOSSLESS, False, 1, False, None, "1 log(s) lost: generation 10 ("),
        (AtRisk(10), 7, GOOD, True, 3, False, None, "generations 8-10 (inspected through 7"),
        (AtRisk(10), 6, GOOD, False, 4, False, None, "more than GoodAvailability allows (3)"),
        (AtRisk(10), 4, BEST, True, 6, False, None, "within the 6 BestAvailability allows"),
        (AtRisk(10), 3, BEST, False, 7, False, None, "more than BestAvailability allows (6)"),
        (AtRisk(10), 12, LOSSLESS, True, 0, False, None, "0 log(s) lost"),
        # the open log holds acknowledged commits: it counts
        (
            AtRisk(11, OpenLog(11, 30)),
            10,
            LOSSLESS,
            False,
            1,
            True,
            30,
            "1 log(s) lost: generation 11, the open log E00.log with at least 30 acknowledged",
        ),
        (
            AtRisk(11, OpenLog(11, None)),
            10,
            LOSSLESS,
            False,
            1,
            True,
            None,
            "the open log E00.log with acknowledged commits (count unknown: mbx1 is unreachable)",
        ),
        (
            AtRisk(15, OpenLog(15, 30)),
            13,
            GOOD,
            True,
            2,
            True,
            30,
            "2 log(s) lost: generations 14-15, 15 being the open log E00.log with at least 30",
        ),
        (AtRisk(15, OpenLog(15, 2)), 13, LOSSLESS, False, 2, True, 2, "until mbx1 returns"),
        (AtRisk(11, OpenLog(11, 1)), 10, BEST, True, 1, True, 1, "within the 6 BestAvailab"),
        # an open log holding only its header is not at risk (it is not in AtRisk at all):
        # under Lossless the copy that inspected every closed generation mounts at once
        (AtRisk(10), 10, LOSSLESS, True, 0, False, None, "within the 0 Lossless allows"),
    ],
)
def test_assess_loss(at_risk, inspected, dial, allowed, lost, open_lost, commits, words):
    loss = assess_loss(
        at_risk=at_risk, last_log_inspected=inspected, dial=dial, node="mbx2", active_node="mbx1"
    )
    assert (loss.allowed, loss.lost_logs, loss.lost_open_log, loss.lost_commits) == (
        allowed,
        lost,
        open_lost,
        commits,
    )
    assert words in loss.sentence, loss.sentence


def test_the_sentence_says_exactly_what_is_lost():
    loss = assess_loss(
        at_risk=AtRisk(15, OpenLog(15, 30)),
        last_log_inspected=13,
        dial=LOSSLESS,
        node="mbx2",
        active_node="mbx1",
    )
    assert loss.sentence == (
        "2 log(s) lost: generations 14-15, 15 being the open log E00.log with at least 30 "
        "acknowledged commit(s) (inspected through 13 on mbx2): more than Lossless allows (0); "
        "the copy stays passive until mbx1 returns with its logs, unless an operator accepts "
        "the loss (--mount-dial)"
    )


@pytest.mark.parametrize(
    ("c", "dial", "reachable", "allowed", "lost", "words"),
    [
        (copy(10), LOSSLESS, False, True, 0, "0 log(s) lost"),
        (copy(9), LOSSLESS, False, False, 1, "more than Lossless allows (0)"),
        (copy(status=CopyStatus.DISCONNECTED_AND_HEALTHY), LOSSLESS, False, True, 0, "lost"),
        (copy(10), BEST, True, False, 0, "switchover"),
        (None, BEST, False, False, 0, "cannot be reached"),
        (copy(role=CopyRole.ACTIVE, status=CopyStatus.MOUNTED), BEST, False, False, 0, "already"),
        (copy(status=CopyStatus.SUSPENDED, error="disk"), BEST, False, False, 0, "Suspended: disk"),
        (copy(status=CopyStatus.FAILED_AND_SUSPENDED), BEST, False, False, 0, "FailedAndSus"),
        (copy(status=CopyStatus.SEEDING), BEST, False, False, 0, "Seeding"),
        (
            copy(10).model_copy(
                update={"activation_suspended": True, "note": "activation suspended: patching"}
            ),
            BEST,
            False,
            False,
            0,
            "the copy on mbx2 is activation-suspended: patching; resume it first "
            "(replication-node db resume DB1 --node mbx2 --activation-only)",
        ),
    ],
)
def test_mount_decision(c, dial, reachable, allowed, lost, words):
    decision = mount_decision(
        node="mbx2",
        copy=c,
        at_risk=AtRisk(10),
        dial=dial,
        active_reachable=reachable,
        active_node="mbx1",
    )
    assert (decision.allowed, decision.lost_logs) == (allowed, lost)
    assert words in decision.reason


def test_mount_decision_counts_the_open_log():
    decision = mount_decision(
        node="mbx2",
        copy=copy(10, CopyStatus.DISCONNECTED_AND_HEALTHY),
        at_risk=AtRisk(11, OpenLog(11, 30)),
        dial=BEST,
        active_reachable=False,
        active_node="mbx1",
    )
    assert (decision.allowed, decision.lost_logs, decision.lost_open_log) == (True, 1, True)
    assert decision.lost_commits == 30


def test_best_copy_has_inspected_the_most_then_the_lowest_preference():
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
