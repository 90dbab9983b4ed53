"""The constraint fractions are the guarantee service's own answers: cross-checked against
`evaluate_health` fed the real reports, sample by sample."""

from __future__ import annotations

from datetime import timedelta

from dag_common.guarantee.values import Limits
from dag_common.model import DataMoveReplicationConstraint as Constraint
from spark_metrics.constraints import CONSTRAINTS, FRACTION_COLUMNS, satisfaction_counts
from tests.spark_metrics.scenarios import (
    pandas_input,
    reference_fractions,
    reference_satisfied,
    sample_rows,
)


def test_fractions_equal_the_rules_on_the_real_reports():
    rows = sample_rows(70)
    got = satisfaction_counts(pandas_input(rows, 60), Limits())
    got = got.sort_values("window_start").reset_index(drop=True)
    expected = reference_fractions(rows, 60)
    assert len(got) == len(expected) > 1
    for g, e in zip(got.to_dict("records"), expected, strict=True):
        assert g["samples"] == e["samples"]
        for col in FRACTION_COLUMNS.values():
            assert g[col] / g["samples"] == e[col], (col, e["window_start"])


def test_the_reference_is_not_trivial():
    """Each constraint is met at some samples and missed at others (else the test above could
    not fail), and the cases read from the rules' own wording hold."""
    verdicts = list(reference_satisfied(sample_rows(7)).values())
    by_constraint = dict(zip(CONSTRAINTS, zip(*verdicts, strict=True), strict=True))
    assert all(by_constraint[Constraint.NONE])
    for c in CONSTRAINTS[1:]:
        assert True in by_constraint[c] and False in by_constraint[c], c
    # sample 2: the active is unreachable; SecondDatacenter still judges by its last-known
    # site and is met by mbx3 in dublin, while AllDatacenters needs it mounted.
    assert by_constraint[Constraint.SECOND_DATACENTER][2] is True
    assert by_constraint[Constraint.ALL_DATACENTERS][2] is False
    # sample 4: a replay queue of 900 s within ReplayLagTime 600 s + 10 min is fine
    assert by_constraint[Constraint.ALL_COPIES][4] is True
    assert by_constraint[Constraint.ALL_COPIES][3] is False


def test_custom_limits_reach_the_rules():
    rows = sample_rows(4)
    strict = Limits(replay_queue_over_lag=timedelta(0))  # mbx3's 30 s replay queue is too much
    loose = satisfaction_counts(pandas_input(rows, 3600), Limits())
    tight = satisfaction_counts(pandas_input(rows, 3600), strict)
    assert tight["all_copies_satisfied"].sum() < loose["all_copies_satisfied"].sum()
