"""Arguments parsed once at the edge: windows that divide a day, ISO times, k=v settings."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from spark_metrics.errors import BadInputError
from spark_metrics.options import check_range, parse_conf, parse_time, parse_window


@pytest.mark.parametrize(
    ("text", "seconds"), [("1m", 60), ("15m", 900), ("1h", 3600), ("1d", 86400), ("30s", 30)]
)
def test_windows_that_divide_a_day(text, seconds):
    assert parse_window(text) == seconds


@pytest.mark.parametrize("text", ["7m", "0s", "500ms", "2d", "soon", ""])
def test_other_windows_are_bad_input(text):
    with pytest.raises(BadInputError, match="--window"):
        parse_window(text)


def test_times_are_utc_unless_they_say_otherwise():
    assert parse_time("2026-11-22T10:00", "--since") == datetime(2026, 11, 22, 10, tzinfo=UTC)
    assert parse_time("2026-11-22T12:00+02:00", "--since") == datetime(2026, 11, 22, 10, tzinfo=UTC)
    with pytest.raises(BadInputError, match="--until 'yesterday'"):
        parse_time("yesterday", "--until")
    with pytest.raises(BadInputError, match="not before"):
        check_range(parse_time("2026-11-22", "s"), parse_time("2026-11-21", "u"))


def test_conf_pairs():
    assert parse_conf(["spark.a=1", "spark.b=x=y"]) == {"spark.a": "1", "spark.b": "x=y"}
    with pytest.raises(BadInputError, match="key=value"):
        parse_conf(["spark.a"])
