"""The mover's textfile: a whole, promtool-clean file per move, rewritten on progress."""

from __future__ import annotations

from dataclasses import replace

from dag_common.clock import ManualClock
from mrs_client.item_limits import SkippedItem, SkipReason
from mrs_client.metrics import MoveMetricsFile
from mrs_client.move_store.interface import AnswerRow
from mrs_client.policy import MoveState, MoveStep
from tests.mrs_client.fakes import record
from tests.prometheus import promtool_check, value


def _answer(status: str) -> AnswerRow:
    return AnswerRow(
        time="2026-01-01T00:00:00+00:00",
        step=6,
        method="CheckReplicationHealth",
        status=status,
        retry_after=1.0,
        reason="",
    )


ANSWERS = [_answer("Satisfied"), _answer("Retry"), _answer("Retry")]


def test_the_file_says_the_moves_state_and_counts(tmp_path):
    clock = ManualClock()
    path = tmp_path / "mrs.prom"
    file = MoveMetricsFile(path, answers=lambda move_id: ANSWERS, clock=clock)
    file(record(state=MoveState.STALLED, step=MoveStep.INITIAL_SYNC, steps_done=2,
                items_copied=40, bytes_copied=4096, time_stalled=12.5, stall_reason="Retry"),
         "stalled")  # fmt: skip
    text = path.read_text()
    promtool_check(text)
    move = {"move_id": "mv1"}
    assert value(text, "mrs_move_state", **move, state="Stalled") == 1
    assert value(text, "mrs_move_state", **move, state="Completed") == 0
    assert value(text, "mrs_move_step", **move) == 3
    assert value(text, "mrs_move_stalled", **move) == 1
    assert value(text, "mrs_move_items_copied_total", **move) == 40
    assert value(text, "mrs_move_copied_bytes_total", **move) == 4096
    assert value(text, "mrs_move_stalled_seconds_total", **move) == 12.5
    answers = {"move_id": "mv1", "method": "CheckReplicationHealth"}
    assert value(text, "mrs_guarantee_answers_total", **answers, status="Retry") == 2
    assert value(text, "mrs_guarantee_answers_total", **answers, status="Satisfied") == 1
    assert value(text, "mrs_move_info", **move, mailboxes="alice", source_database="DB1",
                 target_database="DB2") == 1  # fmt: skip
    assert value(text, "mrs_move_last_update_timestamp_seconds", **move) == (
        clock.now().timestamp()
    )
    assert value(text, "mrs_move_items_skipped", **move, reason="large") == 0


def test_the_file_counts_the_skipped_items_by_reason(tmp_path):
    path = tmp_path / "mrs.prom"
    file = MoveMetricsFile(path, answers=lambda move_id: [], clock=ManualClock())
    big = SkippedItem("alice", "m7", 42, SkipReason.LARGE, 70_000, 65_536, "large", "0f")
    bad = SkippedItem("alice", "", 57, SkipReason.BAD, None, None, "HTTP 500")
    file.write(record(skipped=(big, bad, replace(big, item_id="m8"))))
    text = path.read_text()
    promtool_check(text)
    assert value(text, "mrs_move_items_skipped", move_id="mv1", reason="large") == 2
    assert value(text, "mrs_move_items_skipped", move_id="mv1", reason="bad") == 1


def test_rewritten_at_most_once_a_second_unless_the_state_or_step_changes(tmp_path):
    clock = ManualClock()
    path = tmp_path / "mrs.prom"
    file = MoveMetricsFile(path, answers=lambda move_id: [], clock=clock)
    moving = record(state=MoveState.IN_PROGRESS, step=MoveStep.INITIAL_SYNC)
    file(moving, "")
    file(replace(moving, items_copied=10), "")  # same state and step, within a second
    assert value(path.read_text(), "mrs_move_items_copied_total", move_id="mv1") == 0
    file(replace(moving, items_copied=20, step=MoveStep.INCREMENTAL_SYNC), "")
    assert value(path.read_text(), "mrs_move_items_copied_total", move_id="mv1") == 20
    file.write(replace(moving, items_copied=30, step=MoveStep.INCREMENTAL_SYNC))
    assert value(path.read_text(), "mrs_move_items_copied_total", move_id="mv1") == 30


def test_a_file_that_cannot_be_written_never_stops_the_move(tmp_path, caplog):
    file = MoveMetricsFile(
        tmp_path / "missing" / "mrs.prom", answers=lambda move_id: [], clock=ManualClock()
    )
    file(record(), "step 1")  # no exception
    assert "cannot write the metrics textfile" in caplog.text
