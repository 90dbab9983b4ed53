"""`spark-metrics aggregate` as an operator runs it: exit 0 with skipped files counted and
named, 2 for bad input, 1 when Spark itself fails."""

from __future__ import annotations

import subprocess
import sys
from datetime import timedelta

import pytest

from spark_metrics.cli import main
from tests.spark_metrics.history import T0, hour_path, write_file
from tests.spark_metrics.scenarios import sample_rows


def test_bad_arguments_exit_2_before_spark_starts(tmp_path, capsys):
    assert main(["aggregate", "--input", str(tmp_path / "absent"), "--output", str(tmp_path)]) == 2
    assert "no such directory" in capsys.readouterr().err
    args = ["aggregate", "--input", str(tmp_path), "--output", str(tmp_path / "o")]
    assert main([*args, "--window", "7m"]) == 2
    assert main([*args, "--since", "noon"]) == 2
    assert main([*args, "--conf", "novalue"]) == 2
    assert main([*args, "--config", str(tmp_path / "absent.yaml")]) == 2
    assert main(["aggregate", "--input", str(tmp_path)]) == 2
    assert main(["bogus"]) == 2


def _cli(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "spark_metrics.cli", *args],
        capture_output=True, text=True, timeout=timeout,
    )  # fmt: skip


@pytest.mark.slow
def test_skipped_files_exit_0_named_and_counted(tmp_path):
    history = tmp_path / "history"
    write_file(hour_path(history, T0, "good"), sample_rows(10))
    hour_path(history, T0 + timedelta(hours=1), "bad").parent.mkdir(parents=True)
    hour_path(history, T0 + timedelta(hours=1), "bad").write_bytes(b"not parquet")
    done = _cli(
        "aggregate", "--input", str(history), "--output", str(tmp_path / "out"),
        "--master", "local[2]", "--conf", "spark.ui.enabled=false",
        "--conf", "spark.driver.host=127.0.0.1",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert "1 files skipped" in done.stdout
    assert f"skipped {history}/date=2026-11-22/hour=11/part-bad.parquet: not a readable" in (
        done.stdout
    )
    for stage in ("[1/5] discover", "[2/5] plan", "[3/5] copies", "[4/5] constraints"):
        assert stage in done.stderr
    assert "from 1 files, 30 rows" in done.stderr


@pytest.mark.slow
def test_spark_failing_exits_1(tmp_path):
    write_file(hour_path(tmp_path / "history", T0, "good"), sample_rows(2))
    done = _cli(
        "aggregate", "--input", str(tmp_path / "history"), "--output", str(tmp_path / "out"),
        "--master", "nosuchmaster://here",
    )  # fmt: skip
    assert done.returncode == 1, done.stderr[-3000:]
    assert "error: spark-metrics failed" in done.stderr
