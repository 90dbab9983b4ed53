"""A passive copy's status derivation (pure), table-driven: what an operator hears first."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from dag_common.model import CopyRole, CopyStatus
from replication_node.passive.markers import Markers
from replication_node.passive.settings import PassiveSettings
from replication_node.passive.status import ScrubSummary, copy_status, status_report

S = CopyStatus


@pytest.mark.parametrize(
    ("suspended", "failed", "phase", "connected", "since", "expected"),
    [
        # suspended wins over everything, and says whether a failure did it
        (True, False, S.HEALTHY, True, None, S.SUSPENDED),
        (True, True, S.HEALTHY, True, None, S.FAILED_AND_SUSPENDED),
        (True, True, S.SEEDING, False, 5.0, S.FAILED_AND_SUSPENDED),
        # what the pipeline is doing, while it is not running healthy
        (False, False, S.SEEDING, True, None, S.SEEDING),
        (False, False, S.FAILED, True, None, S.FAILED),
        (False, False, S.INITIALIZING, False, 5.0, S.INITIALIZING),
        # running: connected or not
        (False, False, S.HEALTHY, True, None, S.HEALTHY),
        (False, False, S.HEALTHY, False, 5.0, S.DISCONNECTED_AND_HEALTHY),
        (False, False, S.HEALTHY, False, None, S.INITIALIZING),  # not reached yet
    ],
)
def test_copy_status(suspended, failed, phase, connected, since, expected):
    markers = Markers(connected=connected, disconnected_since=since)
    got = copy_status(suspended=suspended, failed=failed, phase=phase, markers=markers)
    assert got is expected


def test_the_report_carries_the_markers_the_settings_and_the_scrub():
    settings = PassiveSettings(
        database="DB1", node="mbx2", site="dublin", activation_preference=2,
        replay_lag_time=timedelta(hours=1),
    )  # fmt: skip
    markers = Markers(last_log_copied=9, last_log_inspected=8, last_log_replayed=5)
    markers.last_log_generated, markers.epoch = 10, 3
    finished = datetime(2026, 11, 23, tzinfo=UTC)
    report = status_report(
        settings=settings, markers=markers, status=S.HEALTHY, error=None,
        scrub=ScrubSummary(finished, "ok (3 pages)"), awaiting_last_logs_from="mbx1",
    )  # fmt: skip
    assert (report.database, report.node, report.site, report.role) == (
        "DB1", "mbx2", "dublin", CopyRole.PASSIVE,
    )  # fmt: skip
    assert (report.last_log_copied, report.last_log_inspected, report.last_log_replayed) == (
        9, 8, 5,
    )  # fmt: skip
    assert report.replay_queue_length == 3 and report.epoch == 3
    assert report.replay_lag_time == timedelta(hours=1)
    assert report.last_scrub_time == finished and report.last_scrub_result == "ok (3 pages)"
    assert report.awaiting_last_logs_from == "mbx1"
