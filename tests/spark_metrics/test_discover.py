"""Damaged, mistyped and empty history is named with the reason, never read; older files are."""

from __future__ import annotations

from datetime import timedelta

import pyarrow as pa

from dag_common.history_schema import FIRST_COLUMNS, SCHEMA
from spark_metrics.discover import FileInfo, Skipped, examine_all, list_history
from tests.spark_metrics.history import T0, hour_path, row, write_file

ROWS = [row(T0 + timedelta(seconds=i), "mbx2", cq=i) for i in range(10)]


def _examine(root):
    listing = list_history(root)
    return listing, {r.path: r for r in examine_all(root, list(listing.files))}


def test_good_file_spans_its_sample_times(tmp_path):
    write_file(hour_path(tmp_path, T0, "good"), ROWS)
    _, found = _examine(tmp_path)
    (info,) = found.values()
    assert isinstance(info, FileInfo)
    assert (info.rows, info.first, info.last) == (10, T0, T0 + timedelta(seconds=9))


def test_each_bad_file_is_named_with_its_reason(tmp_path):
    good = write_file(hour_path(tmp_path, T0, "good"), ROWS)
    truncated = hour_path(tmp_path, T0, "truncated")
    truncated.write_bytes(good.read_bytes()[: good.stat().st_size // 2])
    hour_path(tmp_path, T0, "zero").write_bytes(b"")
    mistyped = SCHEMA.set(1, pa.field("database", pa.int64()))
    write_file(hour_path(tmp_path, T0, "mistyped"), [{**r, "database": 1} for r in ROWS], mistyped)
    missing = pa.schema([fl for fl in SCHEMA if fl.name != "copy_queue_length"])
    write_file(hour_path(tmp_path, T0, "missing"), ROWS, missing)
    write_file(hour_path(tmp_path, T0, "empty"), [])
    (tmp_path / "date=2026-11-22" / "hour=11").mkdir()
    (tmp_path / "date=2026-11-22" / "hour=10" / ".part-x.tmp").write_bytes(b"half")
    listing, found = _examine(tmp_path)
    reasons = {p.split("part-")[1]: r.reason for p, r in found.items() if isinstance(r, Skipped)}
    assert set(reasons) == {
        "truncated.parquet",
        "zero.parquet",
        "mistyped.parquet",
        "missing.parquet",
        "empty.parquet",
    }
    assert "not a readable Parquet file" in reasons["truncated.parquet"]
    assert "not a readable Parquet file" in reasons["zero.parquet"]
    assert (
        reasons["mistyped.parquet"]
        == "not the history schema: column 'database' is int64, expected string"
    )
    assert (
        reasons["missing.parquet"]
        == "not the history schema: column 'copy_queue_length' is missing"
    )
    assert reasons["empty.parquet"] == "no rows"
    assert listing.empty_partitions == ("date=2026-11-22/hour=11",)
    assert not any(
        ".tmp" in p for p, _, _ in listing.files
    )  # the writer's temp file is not history


def test_a_first_version_file_is_history(tmp_path):
    first = pa.schema([fl for fl in SCHEMA if fl.name in FIRST_COLUMNS])
    write_file(hour_path(tmp_path, T0, "v1"), ROWS, first)
    _, found = _examine(tmp_path)
    assert all(isinstance(r, FileInfo) for r in found.values())
