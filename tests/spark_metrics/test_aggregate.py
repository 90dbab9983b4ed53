"""The whole aggregation over history files on disk: idempotent re-runs, late files, bad
files named and skipped with every good row kept, first-version files, --since."""

from __future__ import annotations

import io
import json
from datetime import timedelta
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyspark.testing import assertDataFrameEqual

from dag_common.history_schema import FIRST_COLUMNS, SCHEMA
from spark_metrics.aggregate import OUTPUTS, aggregate
from spark_metrics.errors import BadInputError
from spark_metrics.options import AggregateOptions
from spark_metrics.progress import Progress
from tests.spark_metrics.history import T0, hour_path, row, write_file
from tests.spark_metrics.scenarios import sample_rows

DAY2 = T0 + timedelta(days=1)


def run(spark, tmp_path: Path, **kw):
    options = AggregateOptions(input=tmp_path / "history", output=tmp_path / "out", **kw)
    return aggregate(spark, options, Progress(io.StringIO()))


def read(spark, tmp_path: Path, name: str):
    return spark.read.parquet(str(tmp_path / "out" / name))


def data_files(tmp_path: Path) -> dict[str, int]:
    return {str(p): p.stat().st_mtime_ns for p in (tmp_path / "out").rglob("*.parquet")}


def shift(rows, by: timedelta):
    return [{**r, "time": r["time"] + by} for r in rows]


def test_a_second_run_changes_nothing_and_a_late_file_is_picked_up(spark, tmp_path):
    history = tmp_path / "history"
    write_file(hour_path(history, T0, "a"), sample_rows(30))
    write_file(hour_path(history, DAY2, "b"), shift(sample_rows(20), timedelta(days=1)))
    first = run(spark, tmp_path)
    assert first.dates == ("2026-11-22", "2026-11-23") and first.rows_read == 150
    before = {name: read(spark, tmp_path, name).collect() for name in OUTPUTS}
    files = data_files(tmp_path)

    again = run(spark, tmp_path)
    assert again.dates == () and again.files_read == 0
    assert data_files(tmp_path) == files  # nothing rewritten
    for name in OUTPUTS:
        assertDataFrameEqual(read(spark, tmp_path, name), before[name])

    full = run(spark, tmp_path, full=True)  # recomputed from scratch: the same rows
    assert full.dates == first.dates
    for name in OUTPUTS:
        assertDataFrameEqual(read(spark, tmp_path, name), before[name])

    late = shift(sample_rows(10), timedelta(days=1, minutes=30))
    write_file(hour_path(history, DAY2, "late"), late)
    third = run(spark, tmp_path)
    assert third.dates == ("2026-11-23",) and third.files_read == 2
    copies = read(spark, tmp_path, "copies")
    day2 = copies.where("date = '2026-11-23'").groupBy().sum("samples").collect()[0][0]
    assert day2 == 3 * (20 + 10)  # both files of the day, once each
    assert copies.where("date = '2026-11-22'").groupBy().sum("samples").collect()[0][0] == 90


def _damaged_page(path: Path, rows) -> Path:
    """A file whose footer and time column are fine but a later column's page is garbage."""
    write_file(path, rows)
    meta = pq.ParquetFile(path).metadata.row_group(0)
    column = meta.column(SCHEMA.get_field_index("copy_queue_length"))
    data = bytearray(path.read_bytes())
    data[column.data_page_offset : column.data_page_offset + 24] = b"\xff" * 24
    path.write_bytes(bytes(data))
    return path


def test_bad_files_are_named_and_skipped_and_every_good_row_kept(spark, tmp_path):
    history = tmp_path / "history"
    good = write_file(hour_path(history, T0, "good"), sample_rows(20))
    truncated = hour_path(history, T0, "truncated")
    truncated.write_bytes(good.read_bytes()[:-100])
    mistyped = SCHEMA.set(7, pa.field("copy_queue_length", pa.string()))
    bad_rows = [{**r, "copy_queue_length": "many"} for r in sample_rows(5)]
    write_file(hour_path(history, T0, "mistyped"), bad_rows, mistyped)
    no_site = pa.schema([f for f in SCHEMA if f.name != "site"])
    write_file(hour_path(history, T0, "nosite"), sample_rows(5), no_site)
    (history / "date=2026-11-22" / "hour=23").mkdir()
    _damaged_page(hour_path(history, T0, "page"), shift(sample_rows(5), timedelta(hours=1)))

    summary = run(spark, tmp_path)

    reasons = {s.path.rsplit("/", 1)[-1]: s.reason for s in summary.skipped}
    assert set(reasons) == {
        "part-truncated.parquet", "part-mistyped.parquet", "part-nosite.parquet", "hour=23",
        "part-page.parquet",
    }  # fmt: skip
    assert "column 'copy_queue_length' is string" in reasons["part-mistyped.parquet"]
    assert "column 'site' is missing" in reasons["part-nosite.parquet"]
    assert reasons["part-page.parquet"].startswith("damaged data")
    copies = read(spark, tmp_path, "copies")
    assert copies.groupBy().sum("samples").collect()[0][0] == 60  # every row of the good file
    constraints = read(spark, tmp_path, "constraints")
    assert constraints.groupBy().sum("samples").collect()[0][0] == 20
    last = json.loads((tmp_path / "out" / "_state" / "last_run.json").read_text())
    assert {s["path"].rsplit("/", 1)[-1] for s in last["skipped"]} == set(reasons)
    # the next run still names them, without opening them again
    assert {s.path for s in run(spark, tmp_path).skipped} == {s.path for s in summary.skipped}


def test_first_version_history_is_aggregated(spark, tmp_path):
    first = pa.schema([f for f in SCHEMA if f.name in FIRST_COLUMNS])
    rows = [row(T0 + timedelta(seconds=i), c, cq=i) for i in range(4) for c in ("mbx1", "mbx3")]
    write_file(hour_path(tmp_path / "history", T0, "v1"), rows, first)
    summary = run(spark, tmp_path)
    assert summary.skipped == () and summary.rows_read == 8
    copies = read(spark, tmp_path, "copies").where("copy = 'mbx3'").collect()
    assert copies[0]["copy_queue_length_max"] == 3 and copies[0]["samples"] == 4


def test_since_limits_the_dates_and_the_rest_waits_for_the_next_run(spark, tmp_path):
    history = tmp_path / "history"
    write_file(hour_path(history, T0, "a"), sample_rows(10))
    write_file(hour_path(history, DAY2, "b"), shift(sample_rows(10), timedelta(days=1)))
    limited = run(spark, tmp_path, since=DAY2)
    assert limited.dates == ("2026-11-23",)
    dates = {str(r["date"]) for r in read(spark, tmp_path, "copies").select("date").collect()}
    assert dates == {"2026-11-23"}
    assert run(spark, tmp_path).dates == ("2026-11-22",)  # the rest, in the next plain run


def test_another_window_needs_another_output(spark, tmp_path):
    write_file(hour_path(tmp_path / "history", T0, "a"), sample_rows(3))
    run(spark, tmp_path)
    with pytest.raises(BadInputError, match="holds 60s windows"):
        run(spark, tmp_path, window_s=300)


def test_missing_input_is_bad_input(spark, tmp_path):
    with pytest.raises(BadInputError, match="no such directory"):
        run(spark, tmp_path)
