"""The Data Guarantee rules, table-driven, no mocks: frozen snapshots in, answers out."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta

import pytest

from dag_common.guarantee.policy import evaluate_flush, evaluate_health
from dag_common.guarantee.values import (
    Check,
    CopyRates,
    CopySnapshot,
    DatabaseView,
    FlushTarget,
    GuaranteeStatus,
    Limits,
)
from dag_common.incarnation import EpochRecord
from dag_common.model import CopyRole, CopyStatus, CopyStatusReport, Lsn, Position
from dag_common.model import DataMoveReplicationConstraint as C

T0 = datetime(2026, 11, 22, 12, 0, tzinfo=UTC)
S, NS, R = GuaranteeStatus.SATISFIED, GuaranteeStatus.NOT_SATISFIED, GuaranteeStatus.RETRY
LIMITS = Limits()


def copy(
    node: str,
    site: str = "redmond",
    *,
    role: CopyRole = CopyRole.PASSIVE,
    status: CopyStatus | None = None,
    cq: int = 0,
    rq: int = 0,
    replayed: int = 100,
    replay_span: float = 0.0,
    replayed_time: datetime = T0,
    lag: timedelta = timedelta(0),
    problem: str | None = None,
    reported: bool = True,
    rates: CopyRates | None = None,
    epoch: int = 0,
    block: tuple[int, int] = (0, 0),  # (generation, offset) held in block mode
) -> CopySnapshot:
    if status is None:
        status = CopyStatus.MOUNTED if role is CopyRole.ACTIVE else CopyStatus.HEALTHY
    report = CopyStatusReport(
        database="DB1",
        node=node,
        site=site,
        role=role,
        status=status,
        activation_preference=1,
        last_log_generated=replayed + rq + cq,
        last_log_inspected=replayed + rq,
        last_log_replayed=replayed,
        copy_queue_length=cq,
        replay_queue_length=rq,
        last_inspected_log_time=replayed_time + timedelta(seconds=replay_span),
        last_replayed_log_time=replayed_time,
        replay_lag_time=lag,
        epoch=epoch,
        block=Position(*block),
    )
    return CopySnapshot(
        "DB1", node, site, report if reported else None, problem, rates or CopyRates()
    )


def active(site: str = "redmond", **kw: object) -> CopySnapshot:
    return copy("mbx1", site, role=CopyRole.ACTIVE, **kw)  # type: ignore[arg-type]


def view(*copies: CopySnapshot, has_status: bool = True) -> DatabaseView:
    return DatabaseView("DB1", copies, has_status)


def health(v: DatabaseView, constraint: C, averages: dict[str, float] | None = None):
    return evaluate_health(v, constraint, averages or {}, LIMITS)


GOOD = copy("mbx2")
BAD_CQ = copy("mbx2", cq=14)
REMOTE_GOOD = copy("mbx3", "dublin")
REMOTE_BAD = copy("mbx3", "dublin", status=CopyStatus.SUSPENDED)
UNREACHABLE = copy("mbx3", "dublin", problem="node mbx3 unreachable: refused")

HEALTH_TABLE = [
    # (name, view, constraint, expected)
    ("None ignores copies", view(active(), copy("mbx2", status=CopyStatus.FAILED)), C.NONE, S),
    ("not replicated", view(active()), C.ALL_COPIES, S),
    ("no status yet", view(active(), GOOD, has_status=False), C.SECOND_COPY, R),
    ("second copy ok", view(active(), GOOD, REMOTE_BAD), C.SECOND_COPY, S),
    ("second copy none ok", view(active(), BAD_CQ, REMOTE_BAD), C.SECOND_COPY, NS),
    (
        "second copy ignores active state",
        view(active(status=CopyStatus.DISMOUNTED), GOOD),
        C.SECOND_COPY,
        S,
    ),
    ("second dc: local only", view(active(), GOOD, REMOTE_BAD), C.SECOND_DATACENTER, NS),
    ("second dc: remote ok", view(active(), BAD_CQ, REMOTE_GOOD), C.SECOND_DATACENTER, S),
    (
        "second dc: active moved to dublin",
        view(active("dublin"), GOOD, REMOTE_GOOD),
        C.SECOND_DATACENTER,
        S,
    ),
    (
        "second dc: active in dublin, only dublin good",
        view(active("dublin"), BAD_CQ, REMOTE_GOOD),
        C.SECOND_DATACENTER,
        NS,
    ),
    ("second dc: no active known", view(GOOD, REMOTE_GOOD), C.SECOND_DATACENTER, R),
    ("all dc: both sites ok", view(active(), GOOD, REMOTE_GOOD), C.ALL_DATACENTERS, S),
    (
        "all dc: one per site is enough",
        view(
            active(),
            GOOD,
            BAD_CQ.__class__("DB1", "mbx4", "redmond", BAD_CQ.report, None),
            REMOTE_GOOD,
        ),
        C.ALL_DATACENTERS,
        S,
    ),
    ("all dc: dublin bad", view(active(), GOOD, REMOTE_BAD), C.ALL_DATACENTERS, NS),
    (
        "all dc: active dismounted",
        view(active(status=CopyStatus.DISMOUNTED), GOOD, REMOTE_GOOD),
        C.ALL_DATACENTERS,
        NS,
    ),
    (
        "all dc: unreachable copy is not dropped",
        view(active(), GOOD, UNREACHABLE),
        C.ALL_DATACENTERS,
        NS,
    ),
    ("all copies ok", view(active(), GOOD, REMOTE_GOOD), C.ALL_COPIES, S),
    ("all copies: one bad", view(active(), GOOD, REMOTE_BAD), C.ALL_COPIES, NS),
    (
        "all copies: active dismounted",
        view(active(status=CopyStatus.DISMOUNTED), GOOD),
        C.ALL_COPIES,
        NS,
    ),
    (
        "all copies: active unreachable",
        view(active(problem="node mbx1 unreachable: x"), GOOD),
        C.ALL_COPIES,
        NS,
    ),
    ("two actives: retry", view(active(), copy("mbx2", role=CopyRole.ACTIVE)), C.SECOND_COPY, R),
    (
        "stale copy is not healthy",
        view(active(), copy("mbx2", problem="status stale")),
        C.SECOND_COPY,
        NS,
    ),
    (
        "unreported copy is not healthy",
        view(
            active(),
            copy("mbx2", reported=False, problem="node mbx2 does not report a copy of DB1"),
        ),
        C.SECOND_COPY,
        NS,
    ),
]


@pytest.mark.parametrize(
    ("name", "v", "constraint", "expected"), HEALTH_TABLE, ids=[row[0] for row in HEALTH_TABLE]
)
def test_health_constraints(name, v, constraint, expected):
    answer = health(v, constraint)
    assert answer.status is expected, answer.reason
    if expected is not S:
        assert answer.retry_after > timedelta(0)


CONDITION_TABLE = [
    # (name, passive copy, average, failing check or None)
    ("healthy and caught up", copy("mbx2"), None, None),
    ("suspended", copy("mbx2", status=CopyStatus.SUSPENDED), None, Check.HEALTHY),
    (
        "failed and suspended",
        copy("mbx2", status=CopyStatus.FAILED_AND_SUSPENDED),
        None,
        Check.HEALTHY,
    ),
    ("copy queue 9 is under 10", copy("mbx2", cq=9), None, None),
    ("copy queue 10 is not under 10", copy("mbx2", cq=10), 0.0, Check.COPY_QUEUE),
    ("average 9.9 ok", copy("mbx2", cq=2), 9.9, None),
    ("average 10 too high", copy("mbx2", cq=2), 10.0, Check.AVERAGE_COPY_QUEUE),
    ("replay queue span 10 min ok", copy("mbx2", rq=50, replay_span=600), None, None),
    (
        "replay queue span 10 min 1 s",
        copy("mbx2", rq=50, replay_span=601),
        None,
        Check.REPLAY_QUEUE,
    ),
    (
        "lagged copy: span within lag + 10 min",
        copy("mbx2", rq=500, replay_span=86400 + 500, lag=timedelta(days=1)),
        None,
        None,
    ),
    (
        "lagged copy: span beyond lag + 10 min",
        copy("mbx2", rq=500, replay_span=86400 + 700, lag=timedelta(days=1)),
        None,
        Check.REPLAY_QUEUE,
    ),
    ("unreachable", copy("mbx2", problem="node mbx2 unreachable: timeout"), None, Check.REACHABLE),
]


@pytest.mark.parametrize(
    ("name", "c", "avg", "failing"), CONDITION_TABLE, ids=[row[0] for row in CONDITION_TABLE]
)
def test_passive_conditions(name, c, avg, failing):
    answer = health(view(active(), c), C.SECOND_COPY, {"mbx2": avg} if avg is not None else {})
    verdict = next(v for v in answer.copies if v.node == "mbx2")
    assert [f.check for f in verdict.failed] == ([failing] if failing else [])
    assert answer.status is (S if failing is None else NS)
    if failing:
        assert str(failing) in answer.reason  # the reason names the failed check


def test_not_satisfied_names_numbers_per_copy():
    answer = health(view(active(), copy("mbx2", cq=14), UNREACHABLE), C.SECOND_COPY)
    assert "mbx2: CopyQueue not met: copy queue 14 logs, limit < 10" in answer.reason
    assert "mbx3: Reachable not met: node mbx3 unreachable: refused" in answer.reason


def test_average_defaults_to_current_queue_without_history():
    answer = health(view(active(), copy("mbx2", cq=3)), C.SECOND_COPY)
    assert answer.copies[1].average_copy_queue_length == 3.0


def test_limits_are_configurable():
    strict = Limits(max_copy_queue_length=2)
    answer = evaluate_health(view(active(), copy("mbx2", cq=3)), C.SECOND_COPY, {}, strict)
    assert answer.status is NS and "limit < 2" in answer.reason


WAIT_TABLE = [
    # (name, view, constraint, retry_after seconds, reason fragment)
    ("no status", view(active(), GOOD, has_status=False), C.SECOND_COPY, 10, "no copy status"),
    (
        "no healthy copy",
        view(active(), copy("mbx2", status=CopyStatus.SUSPENDED)),
        C.SECOND_COPY,
        120,
        "no healthy copy",
    ),
    (
        "unreachable only",
        view(active(), copy("mbx2", problem="node mbx2 unreachable: x")),
        C.SECOND_COPY,
        120,
        "no healthy copy",
    ),
    ("healthy but behind", view(active(), copy("mbx2", cq=20)), C.SECOND_COPY, 60, "behind"),
    (
        "healthy but not draining",
        view(active(), copy("mbx2", cq=20, rates=CopyRates(copy_queue_per_s=0.5))),
        C.SECOND_COPY,
        60,
        "behind",
    ),
    (
        "draining: 11 logs over at 2 logs/s",
        view(active(), copy("mbx2", cq=20, rates=CopyRates(copy_queue_per_s=-2.0))),
        C.SECOND_COPY,
        5.5,
        "predicted",
    ),
    (
        "draining slowly: capped at 10 min",
        view(active(), copy("mbx2", cq=2000, rates=CopyRates(copy_queue_per_s=-0.1))),
        C.SECOND_COPY,
        600,
        "predicted",
    ),
    (
        "draining fast: at least 1 s",
        view(active(), copy("mbx2", cq=11, rates=CopyRates(copy_queue_per_s=-50.0))),
        C.SECOND_COPY,
        1,
        "predicted",
    ),
    (
        "all copies: slowest drain decides",
        view(
            active(),
            copy("mbx2", cq=19, rates=CopyRates(copy_queue_per_s=-1.0)),
            copy("mbx3", cq=19, rates=CopyRates(copy_queue_per_s=-10.0)),
        ),
        C.ALL_COPIES,
        10,
        "predicted",
    ),
    (
        "second copy: fastest drain decides",
        view(
            active(),
            copy("mbx2", cq=19, rates=CopyRates(copy_queue_per_s=-1.0)),
            copy("mbx3", cq=19, rates=CopyRates(copy_queue_per_s=-10.0)),
        ),
        C.SECOND_COPY,
        1,
        "predicted",
    ),
    (
        "all copies: one unpredictable",
        view(
            active(),
            copy("mbx2", cq=19, rates=CopyRates(copy_queue_per_s=-1.0)),
            copy("mbx3", status=CopyStatus.SUSPENDED),
        ),
        C.ALL_COPIES,
        60,
        "behind",
    ),
]


@pytest.mark.parametrize(
    ("name", "v", "constraint", "wait", "fragment"), WAIT_TABLE, ids=[row[0] for row in WAIT_TABLE]
)
def test_wait_times(name, v, constraint, wait, fragment):
    answer = health(v, constraint)
    assert answer.status is not S
    assert answer.retry_after == timedelta(seconds=wait), answer.reason
    assert fragment in answer.reason


LSN_AT = 100  # copies in this table replayed generation 100, closed at T0
FLUSH_TABLE = [
    # (name, copies, target, constraint, expected)
    ("lsn replayed", [GOOD], FlushTarget(lsn=Lsn(generation=100)), C.SECOND_COPY, S),
    ("lsn one generation ahead", [GOOD], FlushTarget(lsn=Lsn(generation=101)), C.SECOND_COPY, NS),
    # Block mode: the record held in the copy's buffer of the open generation, no roll
    (
        "lsn held in block mode",
        [copy("mbx2", block=(101, 9000))],
        FlushTarget(lsn=Lsn(generation=101, offset=8192)),
        C.SECOND_COPY,
        S,
    ),
    (
        "lsn past what the block buffer holds",
        [copy("mbx2", block=(101, 9000))],
        FlushTarget(lsn=Lsn(generation=101, offset=9000)),
        C.SECOND_COPY,
        NS,
    ),
    (
        "lsn without an offset is not judged by a block buffer",
        [copy("mbx2", block=(101, 9000))],
        FlushTarget(lsn=Lsn(generation=101)),
        C.SECOND_COPY,
        NS,
    ),
    (
        "a block buffer of a later generation than inspected + 1 does not count",
        [copy("mbx2", block=(102, 9000))],
        FlushTarget(lsn=Lsn(generation=102, offset=600)),
        C.SECOND_COPY,
        NS,
    ),
    (
        "time: replayed log 6 s after commit",
        [GOOD],
        FlushTarget(commit_time=T0 - timedelta(seconds=6)),
        C.SECOND_COPY,
        S,
    ),
    (
        "time: replayed log exactly 5 s after commit is not later",
        [GOOD],
        FlushTarget(commit_time=T0 - timedelta(seconds=5)),
        C.SECOND_COPY,
        NS,
    ),
    (
        "time: commit after last replayed log",
        [GOOD],
        FlushTarget(commit_time=T0 + timedelta(seconds=1)),
        C.SECOND_COPY,
        NS,
    ),
    (
        "lagged 29 min counts",
        [copy("mbx2", lag=timedelta(minutes=29))],
        FlushTarget(lsn=Lsn(generation=100)),
        C.SECOND_COPY,
        S,
    ),
    (
        "lagged 30 min does not count",
        [copy("mbx2", lag=timedelta(minutes=30))],
        FlushTarget(lsn=Lsn(generation=100)),
        C.SECOND_COPY,
        NS,
    ),
    (
        "suspended copy that replayed it counts",
        [copy("mbx2", status=CopyStatus.SUSPENDED)],
        FlushTarget(lsn=Lsn(generation=100)),
        C.SECOND_COPY,
        S,
    ),
    (
        "a failed copy does not count, whatever it replayed",
        [copy("mbx2", status=CopyStatus.FAILED_AND_SUSPENDED)],
        FlushTarget(lsn=Lsn(generation=100)),
        C.SECOND_COPY,
        NS,
    ),
    (
        "unreachable copy does not count",
        [copy("mbx2", problem="node mbx2 unreachable: x")],
        FlushTarget(lsn=Lsn(generation=1)),
        C.SECOND_COPY,
        NS,
    ),
    (
        "second dc: only local replayed",
        [GOOD, copy("mbx3", "dublin", replayed=99)],
        FlushTarget(lsn=Lsn(generation=100)),
        C.SECOND_DATACENTER,
        NS,
    ),
    (
        "second dc: remote replayed",
        [copy("mbx2", replayed=99), REMOTE_GOOD],
        FlushTarget(lsn=Lsn(generation=100)),
        C.SECOND_DATACENTER,
        S,
    ),
    (
        "all copies: one behind",
        [GOOD, copy("mbx3", "dublin", replayed=99)],
        FlushTarget(lsn=Lsn(generation=100)),
        C.ALL_COPIES,
        NS,
    ),
    (
        "all dc: every site replayed",
        [GOOD, REMOTE_GOOD],
        FlushTarget(lsn=Lsn(generation=100)),
        C.ALL_DATACENTERS,
        S,
    ),
]


@pytest.mark.parametrize(
    ("name", "copies", "target", "constraint", "expected"),
    FLUSH_TABLE,
    ids=[row[0] for row in FLUSH_TABLE],
)
def test_flush(name, copies, target, constraint, expected):
    answer = evaluate_flush(view(active(), *copies), constraint, target, LIMITS)
    assert answer.status is expected, answer.reason


def test_flush_skew_is_configurable():
    target = FlushTarget(commit_time=T0 - timedelta(seconds=3))
    v = view(active(), GOOD)
    assert evaluate_flush(v, C.SECOND_COPY, target, LIMITS).status is NS
    loose = Limits(flush_clock_skew=timedelta(seconds=1))
    assert evaluate_flush(v, C.SECOND_COPY, target, loose).status is S


def test_flush_predicts_from_replay_rate():
    draining = copy("mbx2", replayed=90, rates=CopyRates(replayed_per_s=2.0))
    answer = evaluate_flush(
        view(active(), draining), C.SECOND_COPY, FlushTarget(lsn=Lsn(generation=100)), LIMITS
    )
    assert answer.status is NS
    assert answer.retry_after == timedelta(seconds=5)
    assert "replaying 2.00 logs/s, 10 logs to go" in answer.reason


def test_flush_by_time_predicts_from_replayed_log_time_rate():
    behind = copy("mbx2", rates=CopyRates(replayed_log_time_per_s=4.0))
    target = FlushTarget(commit_time=T0 + timedelta(seconds=35))  # needs T0+40 s: 40 s behind
    answer = evaluate_flush(view(active(), behind), C.SECOND_COPY, target, LIMITS)
    assert answer.retry_after == timedelta(seconds=10), answer.reason


def test_verdicts_list_every_configured_copy_with_role():
    answer = health(view(active(), GOOD, UNREACHABLE), C.ALL_COPIES)
    assert [(v.node, v.role) for v in answer.copies] == [
        ("mbx1", CopyRole.ACTIVE),
        ("mbx2", CopyRole.PASSIVE),
        ("mbx3", CopyRole.PASSIVE),
    ]
    assert answer.copies[0].meets and answer.copies[1].meets and not answer.copies[2].meets


def test_wait_times_come_from_the_config_with_the_seeds_defaults():
    from dag_common.config_guarantee import GuaranteeLimits
    from dag_common.guarantee.values import Limits

    seed = Limits.from_config(GuaranteeLimits())
    assert (seed.wait_no_status, seed.wait_no_healthy_copy, seed.wait_behind, seed.wait_max) == (
        timedelta(seconds=10),
        timedelta(minutes=2),
        timedelta(minutes=1),
        timedelta(minutes=10),
    )
    short = Limits.from_config(
        GuaranteeLimits.model_validate({"wait_no_healthy_copy": "3s", "wait_max": "1m"})
    )
    assert short.wait_no_healthy_copy == timedelta(seconds=3)
    assert short.wait_max == timedelta(minutes=1)
    assert seed == Limits()  # the values' defaults are the config's


def test_every_limit_the_config_sets_reaches_the_rules():
    from dataclasses import fields

    from dag_common.config_guarantee import GuaranteeLimits
    from dag_common.guarantee.values import Limits

    carried = {f.name for f in fields(Limits)} & set(GuaranteeLimits.model_fields)
    assert carried == set(GuaranteeLimits.model_fields) - {"average_window"}
    changed = {
        "max_copy_queue_length": 3, "max_average_copy_queue_length": 2.5,
        "average_window_time": "1m", "replay_queue_over_lag": "2m", "flush_clock_skew": "1s",
        "flush_max_replay_lag": "5m", "wait_no_status": "2s", "wait_no_healthy_copy": "3s",
        "wait_behind": "4s", "wait_max": "1m",
    }  # fmt: skip
    config = GuaranteeLimits.model_validate(changed)
    limits = Limits.from_config(config)
    assert {name: getattr(limits, name) for name in carried} == {
        name: getattr(config, name) for name in carried
    }
    assert all(getattr(limits, name) != getattr(Limits(), name) for name in carried)


# ---- stream incarnations: an LSN that names its epoch -------------------------------------

# DB1's history: epoch 1 on mbx1 from generation 1; a lossy failover to mbx2 whose stream
# began at generation 90 (it had inspected 89); a switchover back to mbx1 from generation 96.
HISTORY = (
    EpochRecord("DB1", 1, "mbx1", 1),
    EpochRecord("DB1", 2, "mbx2", 90),
    EpochRecord("DB1", 3, "mbx1", 96),
)
ON_3 = copy("mbx2", epoch=3)  # replayed 100 on the current stream
ON_2 = copy("mbx2", epoch=2)  # replayed 100, still following the old active
ON_3_FAR = copy("mbx2", epoch=3, replayed=500)


def lsn(generation: int, epoch: int) -> FlushTarget:
    return FlushTarget(lsn=Lsn(generation=generation, epoch=epoch))


H, SC = HISTORY, C.SECOND_COPY
EPOCH_TABLE = [
    # (name, copies, target, constraint, history, expected status, lost)
    ("epoch 1 below the fork: survived", [ON_3], lsn(89, 1), SC, H, S, False),
    ("epoch 1 at the fork: lost", [ON_3], lsn(90, 1), SC, H, NS, True),
    ("epoch 1 far above the fork: lost", [ON_3], lsn(100, 1), SC, H, NS, True),
    ("lost though the new stream replayed past it", [ON_3_FAR], lsn(95, 1), SC, H, NS, True),
    ("lost is never Satisfied, even for constraint None", [ON_3], lsn(95, 1), C.NONE, H, NS, True),
    ("a switchover loses nothing: epoch 2 below 96", [ON_3], lsn(95, 2), SC, H, S, False),
    ("current epoch, replayed", [ON_3], lsn(100, 3), SC, H, S, False),
    ("current epoch, not replayed yet", [ON_3], lsn(101, 3), SC, H, NS, False),
    ("a copy on an older epoch does not count", [ON_2], lsn(100, 3), SC, H, NS, False),
    ("an epoch the history does not know yet", [ON_3], lsn(100, 4), SC, H, R, False),
    ("history unreadable", [ON_3], lsn(100, 3), SC, None, R, False),
    (
        "no epoch in the LSN: by generation",
        [ON_2],
        FlushTarget(lsn=Lsn(generation=100)),
        SC,
        H,
        S,
        False,
    ),
]


@pytest.mark.parametrize(
    ("name", "copies", "target", "constraint", "history", "expected", "lost"),
    EPOCH_TABLE,
    ids=[row[0] for row in EPOCH_TABLE],
)
def test_flush_by_lsn_with_its_stream_incarnation(
    name, copies, target, constraint, history, expected, lost
):
    v = DatabaseView("DB1", (active(epoch=3), *copies), True, history)
    answer = evaluate_flush(v, constraint, target, LIMITS)
    assert answer.status is expected, answer.reason
    assert answer.lost is lost
    if lost:
        assert "was lost" in answer.reason and "epoch 2 began on mbx2 at generation 90" in (
            answer.reason
        )
        assert answer.retry_after == timedelta(0)
    if history is not None:
        assert answer.epoch == 3, "the answer names the database's current epoch"


def test_a_copy_on_an_older_epoch_says_why_it_does_not_count():
    v = DatabaseView("DB1", (active(epoch=3), ON_2), True, HISTORY)
    answer = evaluate_flush(v, C.SECOND_COPY, lsn(100, 3), LIMITS)
    stream = next(c for c in answer.copies[1].checks if c.check is Check.STREAM)
    assert not stream.passed
    assert "epoch 2" in stream.detail and "epoch 3" in stream.detail


def _activation_suspended(snapshot: CopySnapshot) -> CopySnapshot:
    """The same copy, activation-suspended (db suspend --activation-only): it replicates on."""
    if snapshot.report is None or snapshot.report.role is CopyRole.ACTIVE:
        return snapshot
    report = snapshot.report.model_copy(
        update={"activation_suspended": True, "note": "activation suspended: patching"}
    )
    return dataclasses.replace(snapshot, report=report)


@pytest.mark.parametrize(
    ("name", "v", "constraint", "expected"), HEALTH_TABLE, ids=[row[0] for row in HEALTH_TABLE]
)
def test_an_activation_suspended_copy_still_counts_for_health(name, v, constraint, expected):
    """It holds the data: barred from activation, it is as good a copy for the guarantee."""
    barred = dataclasses.replace(v, copies=tuple(_activation_suspended(c) for c in v.copies))
    assert health(barred, constraint) == health(v, constraint)
    assert health(barred, constraint).status is expected


@pytest.mark.parametrize(
    ("name", "copies", "target", "constraint", "expected"),
    FLUSH_TABLE,
    ids=[row[0] for row in FLUSH_TABLE],
)
def test_an_activation_suspended_copy_still_counts_for_flush(
    name, copies, target, constraint, expected
):
    barred = [_activation_suspended(c) for c in copies]
    answer = evaluate_flush(view(active(), *barred), constraint, target, LIMITS)
    assert answer == evaluate_flush(view(active(), *copies), constraint, target, LIMITS)
    assert answer.status is expected, answer.reason
