"""Which dates a run rewrites and which files it reads: pure rules, table-driven."""

from __future__ import annotations

from datetime import UTC, date, datetime

import pytest

from spark_metrics.discover import FileInfo
from spark_metrics.incremental import plan_run


def f(name: str, first: str, last: str, size: int = 10) -> FileInfo:
    return FileInfo(
        name, size, 1, 5, datetime.fromisoformat(first).replace(tzinfo=UTC),
        datetime.fromisoformat(last).replace(tzinfo=UTC),
    )  # fmt: skip


A = f("a", "2026-11-20T10:00", "2026-11-20T10:59")
B = f("b", "2026-11-21T23:30", "2026-11-22T00:30")  # crosses midnight
C = f("c", "2026-11-22T05:00", "2026-11-22T05:59")
ALL = [A, B, C]
C_OLD = f("c", "2026-11-22T05:00", "2026-11-22T05:59", size=9)  # c as a run saw it earlier
D = date.fromisoformat


def t(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


CASES = [
    # (name, done, since, until, full, dates, read, completes)
    ("first run: every date", {}, None, None, False,
     ["2026-11-20", "2026-11-21", "2026-11-22"], ["a", "b", "c"], ["a", "b", "c"]),
    ("nothing new: nothing rewritten", {x.path: x for x in ALL}, None, None, False, [], [], []),
    ("a late file re-reads the other files of its dates", {"a": A, "b": B}, None, None, False,
     ["2026-11-22"], ["b", "c"], ["c"]),
    ("a changed file counts as new", {"a": A, "b": B, "c": C_OLD}, None, None, False,
     ["2026-11-22"], ["b", "c"], ["c"]),
    ("--full recomputes everything", {x.path: x for x in ALL}, None, None, True,
     ["2026-11-20", "2026-11-21", "2026-11-22"], ["a", "b", "c"], ["a", "b", "c"]),
    ("--since cuts a crossing file: read, not done", {}, t("2026-11-22T00:00"), None, False,
     ["2026-11-22"], ["b", "c"], ["c"]),
    ("--until before everything: nothing", {}, None, t("2026-11-01T00:00"), False, [], [], []),
]  # fmt: skip


@pytest.mark.parametrize(
    ("name", "done", "since", "until", "full", "dates", "read", "completes"),
    CASES,
    ids=[c[0] for c in CASES],
)
def test_plan(name, done, since, until, full, dates, read, completes):
    plan = plan_run(ALL, done, since=since, until=until, full=full)
    assert [d.isoformat() for d in plan.dates] == dates
    assert [x.path for x in plan.read] == read
    assert [x.path for x in plan.completes] == completes
