from datetime import UTC, datetime, timedelta

import pytest

from mrs_client.policy import (
    GuaranteeAnswer,
    GuaranteeStatus,
    MoveSettings,
    Verdict,
    flush_gate,
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


def test_health_check_cadence():
    assert health_check_due(None, T0, S)
    assert not health_check_due(T0, T0 + timedelta(seconds=9.9), S)
    assert health_check_due(T0, T0 + timedelta(seconds=10), S)


def test_incremental_passes_end():
    assert incremental_done(0, 1, S)
    assert not incremental_done(51, 1, S)
    assert incremental_done(10_000, 5, S)
