"""One local[2] SparkSession for every Spark test, and history built in code."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
from pyspark.sql import SparkSession

from spark_metrics.session import build_session

# Small, quiet, and on loopback: other suites run beside these on the same two cores.
TEST_CONF = {
    "spark.ui.enabled": "false",
    "spark.sql.shuffle.partitions": "4",
    "spark.default.parallelism": "2",
    "spark.driver.host": "127.0.0.1",
    "spark.driver.bindAddress": "127.0.0.1",
    "spark.python.worker.reuse": "true",
}


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    session = build_session(master="local[2]", conf=TEST_CONF, app_name="spark-metrics-tests")
    yield session
    session.stop()
