"""The mover's textfile: a whole, promtool-clean file per move, rewritten on progress."""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import replace
from datetime import UTC, datetime

from prometheus_client.parser import text_string_to_metric_families

from dag_common.clock import ManualClock
from mrs_client.metrics import MoveMetricsFile
from mrs_client.policy import MoveState, MoveStep
from mrs_client.requests_store import MoveRecord


def scrape_value(text: str, name: str, **labels: str) -> float:
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == name and s.labels == labels:
                return s.value
    raise AssertionError(f"{name}{labels} not in the file")


def promtool_check(text: str) -> None:
    promtool = shutil.which("promtool")
    assert promtool, "promtool is missing: install Debian's 'prometheus' (make system-deps does)"
    result = subprocess.run(
        [promtool, "check", "metrics"], input=text, capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr


def record(**changes) -> MoveRecord:
    now = datetime(2026, 1, 1, tzinfo=UTC)
    base = MoveRecord(
        id="mv1", mailboxes=("alice",), source_db="DB1", target_db="DB2", created=now, updated=now
    )
    return replace(base, **changes)


ANSWERS = [
    {"method": "CheckReplicationHealth", "status": "Satisfied"},
    {"method": "CheckReplicationHealth", "status": "Retry"},
    {"method": "CheckReplicationHealth", "status": "Retry"},
]


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
    assert scrape_value(text, "mrs_move_state", **move, state="Stalled") == 1
    assert scrape_value(text, "mrs_move_state", **move, state="Completed") == 0
    assert scrape_value(text, "mrs_move_step", **move) == 3
    assert scrape_value(text, "mrs_move_stalled", **move) == 1
    assert scrape_value(text, "mrs_move_items_copied_total", **move) == 40
    assert scrape_value(text, "mrs_move_copied_bytes_total", **move) == 4096
    assert scrape_value(text, "mrs_move_stalled_seconds_total", **move) == 12.5
    answers = {"move_id": "mv1", "method": "CheckReplicationHealth"}
    assert scrape_value(text, "mrs_guarantee_answers_total", **answers, status="Retry") == 2
    assert scrape_value(text, "mrs_guarantee_answers_total", **answers, status="Satisfied") == 1
    assert scrape_value(text, "mrs_move_info", **move, mailboxes="alice", source_database="DB1",
                        target_database="DB2") == 1  # fmt: skip
    assert scrape_value(text, "mrs_move_last_update_timestamp_seconds", **move) == (
        clock.now().timestamp()
    )


def test_rewritten_at_most_once_a_second_unless_the_state_or_step_changes(tmp_path):
    clock = ManualClock()
    path = tmp_path / "mrs.prom"
    file = MoveMetricsFile(path, answers=lambda move_id: [], clock=clock)
    moving = record(state=MoveState.IN_PROGRESS, step=MoveStep.INITIAL_SYNC)
    file(moving, "")
    file(replace(moving, items_copied=10), "")  # same state and step, within a second
    assert scrape_value(path.read_text(), "mrs_move_items_copied_total", move_id="mv1") == 0
    file(replace(moving, items_copied=20, step=MoveStep.INCREMENTAL_SYNC), "")
    assert scrape_value(path.read_text(), "mrs_move_items_copied_total", move_id="mv1") == 20
    file.write(replace(moving, items_copied=30, step=MoveStep.INCREMENTAL_SYNC))
    assert scrape_value(path.read_text(), "mrs_move_items_copied_total", move_id="mv1") == 30


def test_a_file_that_cannot_be_written_never_stops_the_move(tmp_path, caplog):
    file = MoveMetricsFile(
        tmp_path / "missing" / "mrs.prom", answers=lambda move_id: [], clock=ManualClock()
    )
    file(record(), "step 1")  # no exception
    assert "cannot write the metrics textfile" in caplog.text
