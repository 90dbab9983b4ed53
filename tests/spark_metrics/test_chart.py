"""The chart's series, pure: each copy laid on every window, a gap where it has no value, a
dot where a value stands alone."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from spark_metrics.chart import lone, on_grid, window_grid

NAN = math.nan


@pytest.mark.parametrize(
    ("values", "dots"),
    [
        ([1, 2, 3], [False, False, False]),
        ([1, NAN, 3], [True, False, True]),  # the ends have no neighbour on one side
        ([NAN, 2, NAN, 4, 5], [False, True, False, False, False]),
        ([7], [True]),
        ([NAN, NAN], [False, False]),
    ],
)
def test_a_value_alone_between_gaps_is_a_dot(values, dots):
    assert lone(pd.Series(values, dtype="float64")) == dots


def test_a_copy_is_laid_on_every_window_with_gaps_where_it_has_none():
    starts = pd.to_datetime(["2026-11-22 10:00", "2026-11-22 10:05", "2026-11-22 10:15"], utc=True)
    rows = pd.DataFrame(
        {"window_start": starts, "window_end": starts + pd.Timedelta(minutes=5), "q": [1.0, 2, 4]}
    )
    grid = window_grid(rows)
    assert list(grid.strftime("%H:%M")) == ["10:00", "10:05", "10:10", "10:15"]
    assert on_grid(rows, "q", grid).tolist()[:2] == [1.0, 2.0]
    assert math.isnan(on_grid(rows, "q", grid).iloc[2])
