"""The automatic failover's decisions (pure), table-driven: when a copy asks, and what it
decides from the active record and every copy's status."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from dag_common.model import CopyRole, CopyStatus, CopyStatusReport, FailoverPause
from replication_node.cluster.failover_policy import (
    FailoverVerdict,
    decide_failover,
    failover_due,
)

S = CopyStatus
V = FailoverVerdict


def report(
    node,
    status,
    *,
    inspected=10,
    preference=2,
    role=CopyRole.PASSIVE,
    held_for=None,
    barred=False,
):
    return CopyStatusReport(
        database="DB1", node=node, site="s", role=role, status=status,
        activation_preference=preference, last_log_inspected=inspected, held_for=held_for,
        activation_suspended=barred, note="activation suspended: patching" if barred else None,
    )  # fmt: skip


def active(status, **kw):
    return report("mbx1", status, role=CopyRole.ACTIVE, preference=1, **kw)


@pytest.mark.parametrize(
    ("status", "since", "now", "after", "due"),
    [
        (S.DISCONNECTED_AND_HEALTHY, 100.0, 115.0, timedelta(seconds=15), True),
        (S.DISCONNECTED_AND_HEALTHY, 100.0, 114.9, timedelta(seconds=15), False),
        (S.HEALTHY, None, 1e9, timedelta(seconds=15), False),  # connected
        (S.DISCONNECTED_AND_HEALTHY, 100.0, 1e9, None, False),  # failover off
        (S.SUSPENDED, 100.0, 1e9, timedelta(seconds=15), False),  # not a copy to mount
        (S.FAILED_AND_SUSPENDED, 100.0, 1e9, timedelta(seconds=15), False),
        (S.SEEDING, 100.0, 1e9, timedelta(seconds=15), False),
        (S.FAILED, 100.0, 1e9, timedelta(seconds=15), False),
    ],
)
def test_when_a_copy_asks(status, since, now, after, due):
    assert failover_due(status=status, disconnected_since=since, now=now, after=after) is due


@pytest.mark.parametrize(
    ("status", "since", "now", "after", "lease_live", "due"),
    [
        # the active's lease is gone: at once, not after `failover_after`
        (S.DISCONNECTED_AND_HEALTHY, 100.0, 100.5, timedelta(seconds=15), False, True),
        (S.DISCONNECTED_AND_HEALTHY, 100.0, 100.5, timedelta(seconds=15), True, False),
        # but only for a copy without its active, that could be mounted, with failover on
        (S.HEALTHY, None, 100.5, timedelta(seconds=15), False, False),
        (S.SUSPENDED, 100.0, 100.5, timedelta(seconds=15), False, False),
        (S.DISCONNECTED_AND_HEALTHY, 100.0, 100.5, None, False, False),
    ],
)
def test_a_lost_lease_hurries_the_question(status, since, now, after, lease_live, due):
    asks = failover_due(
        status=status, disconnected_since=since, now=now, after=after, lease_live=lease_live
    )
    assert asks is due


@pytest.mark.parametrize(
    ("active_node", "following", "reports", "verdict", "words"),
    [
        # no record, or this node is the active: nothing to replace
        (None, "mbx1", {}, V.NO_ACTIVE, "no active to replace"),
        ("mbx2", "mbx1", {}, V.NO_ACTIVE, "no active to replace"),
        # another copy was activated since this one lost its active
        ("mbx3", "mbx1", {}, V.FOLLOWS_NEW_ACTIVE, "mbx1 was lost and mbx3 is active now"),
        # the active is mounted and answers its peers: this copy's link is what failed
        (
            "mbx1", "mbx1",
            {"mbx1": active(S.MOUNTED), "mbx2": report("mbx2", S.DISCONNECTED_AND_HEALTHY)},
            V.ACTIVE_ANSWERS, "answers its peers",
        ),
        # dismounted by an operator: maintenance, no failover
        (
            "mbx1", "mbx1",
            {"mbx1": active(S.DISMOUNTED), "mbx2": report("mbx2", S.DISCONNECTED_AND_HEALTHY)},
            V.OPERATOR_DISMOUNT, "by an operator",
        ),
        # dismounted, holding its last logs for a copy after a crash: that is a failure
        (
            "mbx1", "mbx1",
            {"mbx1": active(S.DISMOUNTED, held_for="mbx2"),
             "mbx2": report("mbx2", S.DISCONNECTED_AND_HEALTHY)},
            V.ACTIVATE, "the active on mbx1 is Dismounted",
        ),
        # the active's node does not answer; this copy is the best: activate
        (
            "mbx1", "mbx1",
            {"mbx1": None, "mbx2": report("mbx2", S.DISCONNECTED_AND_HEALTHY, inspected=12),
             "mbx3": report("mbx3", S.DISCONNECTED_AND_HEALTHY, inspected=11, preference=3)},
            V.ACTIVATE, "mbx1 is lost; mbx2 has inspected through generation 12",
        ),
        # another copy inspected more: it is that copy's to mount
        (
            "mbx1", "mbx1",
            {"mbx1": None, "mbx2": report("mbx2", S.DISCONNECTED_AND_HEALTHY, inspected=11),
             "mbx3": report("mbx3", S.DISCONNECTED_AND_HEALTHY, inspected=12, preference=3)},
            V.NOT_BEST, "mbx3 has inspected through generation 12",
        ),
        # a tie goes to the lower activation preference
        (
            "mbx1", "mbx1",
            {"mbx1": None, "mbx2": report("mbx2", S.DISCONNECTED_AND_HEALTHY, preference=3),
             "mbx3": report("mbx3", S.DISCONNECTED_AND_HEALTHY, preference=2)},
            V.NOT_BEST, "mbx3 has inspected through generation 10 (activation preference 2)",
        ),
        # the failed active: activate, whatever it says of itself
        (
            "mbx1", "mbx1",
            {"mbx1": active(S.FAILED), "mbx2": report("mbx2", S.DISCONNECTED_AND_HEALTHY)},
            V.ACTIVATE, "the active on mbx1 is Failed",
        ),
        # this node's copy did not answer its own node (it stopped meanwhile): not this one
        (
            "mbx1", "mbx1",
            {"mbx1": None, "mbx2": report("mbx2", S.SUSPENDED),
             "mbx3": report("mbx3", S.DISCONNECTED_AND_HEALTHY, preference=3)},
            V.NOT_BEST, "mbx3 has inspected",
        ),
        # no copy can be mounted at all
        (
            "mbx1", "mbx1", {"mbx1": None, "mbx2": report("mbx2", S.SEEDING)},
            V.NOT_BEST, "no passive copy is Healthy or DisconnectedAndHealthy",
        ),
        # an activation-suspended copy is never chosen, however far ahead: the next best is
        (
            "mbx1", "mbx1",
            {"mbx1": None,
             "mbx2": report("mbx2", S.DISCONNECTED_AND_HEALTHY, inspected=12, preference=1,
                            barred=True),
             "mbx3": report("mbx3", S.DISCONNECTED_AND_HEALTHY, inspected=9, preference=3)},
            V.NOT_BEST, "mbx3 has inspected through generation 9 (activation preference 3) of "
            "mbx3 (mbx2: activation suspended)",
        ),
        # … and this node's copy is chosen when the better one is activation-suspended
        (
            "mbx1", "mbx1",
            {"mbx1": None,
             "mbx2": report("mbx2", S.DISCONNECTED_AND_HEALTHY, inspected=9, preference=3),
             "mbx3": report("mbx3", S.DISCONNECTED_AND_HEALTHY, inspected=12, preference=1,
                            barred=True)},
            V.ACTIVATE, "mbx2 has inspected through generation 9",
        ),
        # every copy that could be mounted is activation-suspended: none is
        (
            "mbx1", "mbx1",
            {"mbx1": None, "mbx2": report("mbx2", S.DISCONNECTED_AND_HEALTHY, barred=True),
             "mbx3": report("mbx3", S.SUSPENDED)},
            V.NOT_BEST, "no passive copy that is Healthy or DisconnectedAndHealthy may be "
            "activated (mbx2: activation suspended)",
        ),
    ],
)  # fmt: skip
def test_what_a_copy_decides(active_node, following, reports, verdict, words):
    decision = decide_failover(
        database="DB1", node="mbx2", active_node=active_node, active_epoch=4,
        following=following, reports=reports,
    )  # fmt: skip
    assert decision.verdict is verdict, decision.sentence
    assert words in decision.sentence, decision.sentence
    assert decision.sentence.startswith("DB1: ")


def test_an_unreachable_active_is_said_so_for_the_wait_on_its_last_logs():
    reports = {"mbx1": None, "mbx2": report("mbx2", S.DISCONNECTED_AND_HEALTHY)}
    decision = decide_failover(
        database="DB1", node="mbx2", active_node="mbx1", active_epoch=4, following="mbx1",
        reports=reports,
    )  # fmt: skip
    assert decision.active_unreachable and decision.lost == "mbx1 is lost"
    reports["mbx1"] = active(S.FAILED)
    decision = decide_failover(
        database="DB1", node="mbx2", active_node="mbx1", active_epoch=4, following="mbx1",
        reports=reports,
    )  # fmt: skip
    assert not decision.active_unreachable


PAUSE = FailoverPause(
    since=datetime(2026, 11, 23, 9, 30, tzinfo=UTC), by="ops@admin1", reason="patching mbx1"
)
LOST_WITH_BEST = {
    "mbx1": None,
    "mbx2": report("mbx2", S.DISCONNECTED_AND_HEALTHY, inspected=12),
    "mbx3": report("mbx3", S.DISCONNECTED_AND_HEALTHY, inspected=11, preference=3),
}


@pytest.mark.parametrize(
    ("active_node", "following", "reports", "paused", "verdict", "words"),
    [
        # the active is lost and this copy is the best: while paused, nothing is activated
        ("mbx1", "mbx1", LOST_WITH_BEST, PAUSE, V.PAUSED,
         "mbx1 is lost; automatic failover paused since"),
        ("mbx1", "mbx1", LOST_WITH_BEST, None, V.ACTIVATE, "mbx1 is lost; mbx2 has inspected"),
        # a failed active, another copy the best: paused is what this node says too
        ("mbx1", "mbx1",
         {"mbx1": active(S.FAILED), "mbx2": report("mbx2", S.DISCONNECTED_AND_HEALTHY),
          "mbx3": report("mbx3", S.DISCONNECTED_AND_HEALTHY, inspected=12, preference=3)},
         PAUSE, V.PAUSED, "by ops@admin1: patching mbx1: no copy is activated automatically"),
        # where there is nothing to fail over, the pause changes nothing that is said
        ("mbx1", "mbx1", {"mbx1": active(S.MOUNTED)}, PAUSE, V.ACTIVE_ANSWERS, "answers"),
        ("mbx1", "mbx1", {"mbx1": active(S.DISMOUNTED)}, PAUSE, V.OPERATOR_DISMOUNT, "operator"),
        ("mbx3", "mbx1", {}, PAUSE, V.FOLLOWS_NEW_ACTIVE, "mbx3 is active now"),
        (None, "mbx1", {}, PAUSE, V.NO_ACTIVE, "no active to replace"),
    ],
)  # fmt: skip
def test_a_paused_cluster_activates_nothing_automatically(
    active_node, following, reports, paused, verdict, words
):
    decision = decide_failover(
        database="DB1", node="mbx2", active_node=active_node, active_epoch=4,
        following=following, reports=reports, paused=paused,
    )  # fmt: skip
    assert decision.verdict is verdict, decision.sentence
    assert words in decision.sentence, decision.sentence
