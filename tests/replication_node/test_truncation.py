"""The truncation rules (pure) and the durable delete, table-driven."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from replication_node.log import logfile
from replication_node.log.logdir import list_closed_generations
from replication_node.log.truncation import (
    CopyProgress,
    active_truncation_limit,
    delete_through,
    passive_truncation_limit,
)
from replication_node.passive.replayer import ready_generations

T0 = datetime(2026, 1, 1, tzinfo=UTC)
H = timedelta(hours=1)


def copy(inspected, replayed, lag=timedelta(0), reachable=True, node="n"):
    return CopyProgress(node, inspected, replayed, lag, reachable)


@pytest.mark.parametrize(
    ("checkpoint", "copies", "backup", "crcl", "limit", "why"),
    [
        (11, [], 0, True, 10, "no copies: everything below the checkpoint"),
        (11, [copy(20, 20)], 0, True, 10, "never at or above the checkpoint"),
        (11, [copy(8, 6)], 0, True, 6, "a copy without lag must have replayed"),
        (11, [copy(8, 2, lag=H)], 0, True, 8, "a lagged copy need only have inspected"),
        (11, [copy(9, 9), copy(4, 4, reachable=False)], 0, True, 4, "unreachable holds back"),
        (11, [copy(0, 0, reachable=False)], 0, True, 0, "never heard from: nothing goes"),
        (11, [copy(9, 9)], 5, False, 5, "without CRCL only what is backed up"),
        (11, [copy(9, 9)], 0, False, 0, "without CRCL and no backup: nothing"),
        (1, [copy(9, 9)], 0, True, 0, "empty database: nothing"),
    ],
)
def test_active_truncation_limit(checkpoint, copies, backup, crcl, limit, why):
    got = active_truncation_limit(
        checkpoint=checkpoint, copies=copies, backed_up_through=backup, circular_logging=crcl
    )
    assert got == limit, why


def closes(n, start=0.0, step=60.0):
    """When this copy got generations 1..n, on its monotonic clock: one a minute."""
    return {g: start + (g - 1) * step for g in range(1, n + 1)}


M, HS = timedelta(minutes=1), 3600.0


@pytest.mark.parametrize(
    ("replayed", "source_first", "now", "lag", "trunc", "limit", "why"),
    [
        (10, 8, HS, timedelta(0), timedelta(0), 7, "only what the source deleted"),
        (5, 20, HS, timedelta(0), timedelta(0), 4, "keeps the last replayed as anchor"),
        (10, 0, HS, timedelta(0), timedelta(0), 0, "source unknown: nothing"),
        (10, 20, 300.0, 2 * M, timedelta(0), 4, "lag"),
        (10, 20, 300.0, M, 2 * M, 3, "both"),
        (10, 20, 0.0, H, H, 0, "nothing is old enough"),
    ],
)
def test_passive_truncation_limit(replayed, source_first, now, lag, trunc, limit, why):
    got = passive_truncation_limit(
        last_log_replayed=replayed,
        source_first_generation=source_first,
        copied_times=closes(12),
        now=now,
        replay_lag_time=lag,
        truncation_lag_time=trunc,
    )
    assert got == limit, why


@pytest.mark.parametrize(
    ("replayed", "inspected", "now", "lag", "limit", "ready", "due"),
    [
        (0, 5, HS, timedelta(0), 16, [1, 2, 3, 4, 5], None),
        (2, 5, HS, timedelta(0), 2, [3, 4], None),
        (0, 5, 150.0, M, 16, [1, 2], 2),
        (0, 5, 0.0, H, 16, [], 0),
        (5, 5, HS, timedelta(0), 16, [], None),
    ],
)
def test_ready_generations_honour_the_replay_lag(replayed, inspected, now, lag, limit, ready, due):
    times = closes(5)
    got, due_at = ready_generations(
        last_log_replayed=replayed,
        last_log_inspected=inspected,
        copied_times=times,
        now=now,
        replay_lag_time=lag,
        limit=limit,
    )
    assert got == ready
    expected = None if due is None else times[len(ready) + replayed + 1] + lag.total_seconds()
    assert due_at == expected


def test_delete_through_removes_only_closed_generations_at_or_below(tmp_path):
    for gen in (3, 4, 5, 6):
        (tmp_path / logfile.closed_log_name(gen)).write_bytes(b"x")
    (tmp_path / logfile.OPEN_LOG_NAME).write_bytes(b"open")
    (tmp_path / "notes.txt").write_text("keep")
    assert delete_through(tmp_path, 5) == [3, 4, 5]
    assert list_closed_generations(tmp_path) == [6]
    assert (tmp_path / logfile.OPEN_LOG_NAME).exists() and (tmp_path / "notes.txt").exists()
    assert delete_through(tmp_path, 5) == []
