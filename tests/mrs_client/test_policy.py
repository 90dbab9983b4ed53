from datetime import UTC, datetime, timedelta

import pytest

from dag_common.model import Lsn
from dag_common.store_api import LogPosition
from mrs_client.policy import (
    GuaranteeAnswer,
    GuaranteeStatus,
    MoveSettings,
    MoveStep,
    Verdict,
    after_reconcile,
    flush_gate,
    flush_point,
    gate,
    health_check_due,
    incremental_done,
)

T0 = datetime(2026, 1, 1, tzinfo=UTC)
S = MoveSettings()
SAT = GuaranteeAnswer(GuaranteeStatus.SATISFIED, timedelta(0), "ok")


def ans(status, retry=0):
    return GuaranteeAnswer(status, timedelta(seconds=retry), "copy mbx2 copy queue 12 >= 10")


M = timedelta(minutes=1)


@pytest.mark.parametrize(
    ("answer", "stalled_for", "verdict", "wait"),
    [
        (SAT, None, Verdict.CONTINUE, 0),
        (SAT, 14 * M, Verdict.CONTINUE, 0),  # Satisfied within the stall resumes the move
        (ans(GuaranteeStatus.NOT_SATISFIED), None, Verdict.WAIT, 30),
        (ans(GuaranteeStatus.RETRY, 10), None, Verdict.WAIT, 30),  # 30 s is the floor
        (ans(GuaranteeStatus.RETRY, 120), 2 * M, Verdict.WAIT, 120),  # longer retry_after wins
        (ans(GuaranteeStatus.NOT_SATISFIED), 14.9 * M, Verdict.WAIT, 6),  # capped at the limit
        (ans(GuaranteeStatus.NOT_SATISFIED), 15 * M, Verdict.FAIL, 0),
        (ans(GuaranteeStatus.RETRY), 20 * M, Verdict.FAIL, 0),
    ],
)
def test_gate(answer, stalled_for, verdict, wait):
    since = None if stalled_for is None else T0 - stalled_for
    d = gate(answer, now=T0, stalled_since=since, settings=S)
    assert d.verdict is verdict
    assert d.wait == timedelta(seconds=wait)
    if verdict is not Verdict.CONTINUE:
        assert d.stalled_since == (since or T0)
        assert "copy queue 12" in d.reason


@pytest.mark.parametrize(
    ("answer", "waited", "verdict", "wait"),
    [
        (SAT, 0 * M, Verdict.CONTINUE, 0),
        (ans(GuaranteeStatus.NOT_SATISFIED), 0 * M, Verdict.WAIT, 10),
        (ans(GuaranteeStatus.RETRY, 60), 5 * M, Verdict.WAIT, 10),  # step 6 asks every 10 s
        (ans(GuaranteeStatus.NOT_SATISFIED), 29.95 * M, Verdict.WAIT, 3),
        (ans(GuaranteeStatus.NOT_SATISFIED), 30 * M, Verdict.FAIL, 0),
    ],
)
def test_flush_gate(answer, waited, verdict, wait):
    d = flush_gate(answer, now=T0, flush_started=T0 - waited, settings=S)
    assert d.verdict is verdict
    assert d.wait == timedelta(seconds=wait)


def at(epoch, status=GuaranteeStatus.SATISFIED, lost=False):
    return GuaranteeAnswer(status, timedelta(0), "replayed", epoch=epoch, lost=lost)


@pytest.mark.parametrize(
    ("answer", "roll_epoch", "verdict"),
    [
        (at(4), 4, Verdict.CONTINUE),
        (at(0), 4, Verdict.CONTINUE),  # a service that knows no epochs: the verification decides
        (at(4), 0, Verdict.CONTINUE),  # a target that names no epoch
        (at(5), 4, Verdict.RECONCILE),  # the target moved on since the roll
        (at(3), 4, Verdict.WAIT),  # the service has not seen the new epoch yet
        (at(5, GuaranteeStatus.NOT_SATISFIED, lost=True), 4, Verdict.RECONCILE),
        (at(4, GuaranteeStatus.SATISFIED, lost=True), 4, Verdict.RECONCILE),  # lost wins
        (at(4, GuaranteeStatus.NOT_SATISFIED), 4, Verdict.WAIT),
    ],
)
def test_flush_gate_is_satisfied_only_for_the_epoch_of_the_roll(answer, roll_epoch, verdict):
    d = flush_gate(answer, now=T0, flush_started=T0, settings=S, epoch=roll_epoch)
    assert d.verdict is verdict, d.reason


@pytest.mark.parametrize(
    ("step", "steps_done", "target_changed", "unlock_survived", "expected"),
    [
        (MoveStep.CLONE_STRUCTURE, 1, True, False, 1),  # the step goes on from the cursors
        (MoveStep.INITIAL_SYNC, 2, True, False, 2),
        (MoveStep.INCREMENTAL_SYNC, 3, False, False, 3),
        (MoveStep.LOCK_SOURCE, 4, True, False, 4),
        (MoveStep.FINAL_SYNC_AND_FLUSH, 5, True, False, 5),  # roll and flush again
        (MoveStep.FINAL_HEALTH_CHECK, 6, True, False, 5),
        (MoveStep.UPDATE_DIRECTORY, 7, True, False, 5),
        (MoveStep.UPDATE_DIRECTORY, 7, False, False, 7),  # source-only, nothing rewritten
        (MoveStep.UNLOCK_TARGET, 8, True, False, 5),  # the target lost the unlock: repaired
        (MoveStep.UNLOCK_TARGET, 8, True, True, 8),  # kept it: unlock, roll, flush again
        (MoveStep.SOFT_DELETE_SOURCE, 9, True, True, 8),
        (MoveStep.SOFT_DELETE_SOURCE, 9, True, False, 5),
        (MoveStep.SOFT_DELETE_SOURCE, 9, False, False, 9),  # the source changed: go on
    ],
)
def test_after_reconcile(step, steps_done, target_changed, unlock_survived, expected):
    assert (
        after_reconcile(
            step, steps_done, target_changed=target_changed, unlock_survived=unlock_survived
        )
        == expected
    )


def test_health_check_cadence():
    assert health_check_due(None, T0, S)
    assert not health_check_due(T0, T0 + timedelta(seconds=9.9), S)
    assert health_check_due(T0, T0 + timedelta(seconds=10), S)


def test_incremental_passes_end():
    assert incremental_done(0, 1, S)
    assert not incremental_done(51, 1, S)
    assert incremental_done(10_000, 5, S)


def _position(
    durable: int, followers: tuple[str, ...], copies=("mbx2", "mbx3"), generation: int = 9
) -> LogPosition:
    return LogPosition(
        open_generation=generation,
        durable=durable,
        open_records=durable > 512,
        block_followers=followers,
        passive_copies=copies,
        epoch=2,
    )


@pytest.mark.parametrize(
    ("position", "expected"),
    [
        # Every copy follows in block mode: the open log's last durable byte, no roll.
        (_position(4096, ("mbx2", "mbx3")), Lsn(generation=9, offset=4095, epoch=2)),
        (_position(4096, ("mbx1", "mbx2", "mbx3")), Lsn(generation=9, offset=4095, epoch=2)),
        # One copy in file mode replays closed logs only: a roll is needed.
        (_position(4096, ("mbx2",)), None),
        (_position(4096, ()), None),
        # No passive copy at all: nothing follows; the roll keeps today's answer.
        (_position(4096, (), copies=()), None),
        # The open log holds only its header: everything is in generation 8, closed.
        (_position(512, ()), Lsn(generation=8, epoch=2)),
        (_position(512, ("mbx2", "mbx3")), Lsn(generation=8, epoch=2)),
        # A new database, no generation closed yet: its copies have claimed no epoch to be
        # counted by inside the open log, so the roll gives them one.
        (_position(4096, ("mbx2", "mbx3"), generation=1), None),
    ],
)
def test_flush_point(position, expected):
    assert flush_point(position, 2) == expected
