"""The seed's progress as `db reseed --wait` judges and shows it (pure): when a reseed is
over or failed, the bytes before the file's length is known, and the plain lines a pipe
gets (one per status change, at most one a second while the bytes move)."""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from dag_common.model import CopyRole, CopyStatus, CopyStatusReport
from replication_node.cli.reseed_wait import (
    Rate,
    SeedLines,
    progress_text,
    reseed_outcome,
    seed_bar,
    seed_display,
)
from replication_node.passive.seeder import SeedProgress, seed_bytes, seed_over

S = CopyStatus


def report(status, done=None, total=None, *, error=None, role=CopyRole.PASSIVE):
    return CopyStatusReport(
        database="DB1", node="mbx2", site="s", role=role, status=status,
        activation_preference=2, seed_bytes_done=done, seed_bytes_total=total, error=error,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("r", "ok", "words"),
    [
        (report(S.SEEDING, 10, 100), None, None),
        (report(S.SEEDING), None, None),  # the seed has not begun to arrive
        (report(S.HEALTHY, 90, 100), None, None),  # its logs are still being inspected
        (report(S.INITIALIZING), None, None),
        (report(S.DISCONNECTED_AND_HEALTHY), None, None),
        (report(S.HEALTHY), True, "DB1\\mbx2: reseeded; now Healthy"),
        (
            report(S.FAILED_AND_SUSPENDED, error="the seed is not a usable database"),
            False,
            "the reseed of DB1\\mbx2 failed; the copy is FailedAndSuspended: the seed is not",
        ),
        (report(S.SUSPENDED, error="by an operator"), False, "Suspended: by an operator"),
        (report(S.FAILED, error="OSError: disk full"), False, "Failed: OSError: disk full"),
        (report(S.MOUNTED, role=CopyRole.ACTIVE), False, "became the active copy"),
    ],
)
def test_when_a_reseed_is_over(r, ok, words):
    outcome = reseed_outcome(r)
    if ok is None:
        assert outcome is None
    else:
        assert outcome is not None and outcome.ok is ok and words in outcome.sentence


def test_the_bytes_count_the_file_then_each_inspected_log():
    progress = SeedProgress()
    assert seed_bytes(progress, 0) == (0, None)  # nothing announced yet
    progress.received(4_000, 10_000)
    assert seed_bytes(progress, 0) == (4_000, 10_000)  # logs not announced: the file alone
    progress.received(10_000, 10_000)
    progress.waypoint, progress.log_sizes, progress.file_placed = 7, (500, 300), True
    assert seed_bytes(progress, 7) == (10_000, 10_800)
    assert seed_bytes(progress, 8) == (10_500, 10_800) and not seed_over(progress, 8)
    assert seed_bytes(progress, 12) == (10_800, 10_800) and seed_over(progress, 12)


def test_rate_and_time_left():
    rate = Rate()
    rate.sample(10.0, 1_000_000)
    assert rate.per_second() is None and rate.eta(5_000_000) is None
    rate.sample(12.0, 3_000_000)
    assert rate.per_second() == 1_000_000 and rate.eta(5_000_000) == 2.0
    text = progress_text(report(S.SEEDING, 3_000_000, 5_000_000), rate)
    assert text == "Seeding: 3.0 of 5.0 MB (60%), 1.0 MB/s, ETA 0:00:02"


def test_plain_lines_say_each_change_and_the_bytes_at_most_once_a_second():
    out, now = io.StringIO(), [0.0]
    lines = SeedLines(out, monotonic=lambda: now[0])
    lines.show(report(S.SEEDING))
    lines.show(report(S.SEEDING))  # nothing new
    lines.show(report(S.SEEDING, 1_000_000, 4_000_000))  # the bytes, first known
    now[0] = 0.5
    lines.show(report(S.SEEDING, 2_000_000, 4_000_000))  # within the second: not said
    now[0] = 1.0
    lines.show(report(S.SEEDING, 3_000_000, 4_000_000))
    lines.show(report(S.HEALTHY, 3_900_000, 4_000_000))  # status changed: said at once
    lines.close(reseed_outcome(report(S.HEALTHY)))
    assert out.getvalue().splitlines() == [
        "DB1\\mbx2: Seeding",
        "DB1\\mbx2: Seeding: 1.0 of 4.0 MB (25%)",
        "DB1\\mbx2: Seeding: 3.0 of 4.0 MB (75%), 2.0 MB/s, ETA 0:00:00",
        "DB1\\mbx2: Healthy: 3.9 of 4.0 MB (98%), 2.9 MB/s, ETA 0:00:00",
        "DB1\\mbx2: reseeded; now Healthy",
    ]


def test_on_a_terminal_a_bar_of_bytes_and_in_a_pipe_plain_lines():
    out = io.StringIO()
    console = Console(file=out, force_terminal=True, width=120, color_system=None)
    bar = seed_bar(console)
    bar.show(report(S.SEEDING, 1_000_000, 4_000_000))
    bar.show(report(S.HEALTHY, 3_000_000, 4_000_000))
    bar.close(reseed_outcome(report(S.HEALTHY)))
    drawn = out.getvalue()
    assert "DB1\\mbx2 Healthy" in drawn and "4.0 MB" in drawn and "━" in drawn
    assert drawn.rstrip().endswith("DB1\\mbx2: reseeded; now Healthy")
    assert isinstance(seed_display(io.StringIO(), lambda: 0.0), SeedLines)  # not a terminal
