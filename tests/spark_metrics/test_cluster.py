"""`spark-metrics aggregate --master spark://…` on a real standalone cluster (a master and
two workers from the pyspark wheel), and the same job under `spark-submit`, write exactly
what the local run writes."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import pytest
from pyspark.testing import assertDataFrameEqual

from spark_metrics import cli
from spark_metrics.aggregate import OUTPUTS, aggregate
from spark_metrics.options import AggregateOptions
from spark_metrics.progress import Progress
from tests.spark_metrics.history import T0, hour_path, write_file
from tests.spark_metrics.scenarios import sample_rows
from tests.spark_metrics.standalone import SPARK_HOME, StandaloneCluster


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_cluster_output_equals_the_local_run(spark, tmp_path):
    history = tmp_path / "history"
    write_file(hour_path(history, T0, "a"), sample_rows(200, step=timedelta(seconds=20)))
    day2 = [{**r, "time": r["time"] + timedelta(days=1)} for r in sample_rows(50)]
    write_file(hour_path(history, T0 + timedelta(days=1), "b"), day2)
    local = AggregateOptions(input=history, output=tmp_path / "local")
    aggregate(spark, local, Progress(io.StringIO()))

    conf = ["--conf", "spark.driver.host=127.0.0.1", "--conf", "spark.ui.enabled=false",
            "--conf", "spark.executor.memory=768m"]  # fmt: skip
    with StandaloneCluster(tmp_path / "cluster", workers=2) as master:
        done = subprocess.run(
            [sys.executable, "-m", "spark_metrics.cli", "aggregate", "--input", str(history),
             "--output", str(tmp_path / "remote"), "--master", master, *conf],
            capture_output=True, text=True, timeout=600,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr[-3000:]
        # The same job under spark-submit, which alone names the master.
        submitted = subprocess.run(
            [str(SPARK_HOME / "bin" / "spark-submit"), "--master", master, *conf,
             str(Path(cli.__file__)), "aggregate", "--input", str(history),
             "--output", str(tmp_path / "submitted")],
            capture_output=True, text=True, timeout=600,
            env={**os.environ, "SPARK_HOME": str(SPARK_HOME), "PYSPARK_PYTHON": sys.executable},
        )  # fmt: skip
        assert submitted.returncode == 0, submitted.stderr[-3000:]
    assert "[4/5] constraints" in done.stderr  # progress names its stages
    assert "aggregated 750 rows from 2 files into 2 dates" in done.stdout
    assert f"starting Spark ({master})" not in submitted.stderr  # no --master given to it
    for name in OUTPUTS:
        local_rows = spark.read.parquet(str(tmp_path / "local" / name))
        for run in ("remote", "submitted"):
            assertDataFrameEqual(spark.read.parquet(str(tmp_path / run / name)), local_rows)
