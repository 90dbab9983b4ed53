"""The one place a SparkSession is built.

The master comes from `--master` when given; else from spark-submit, when the job runs under
it (the gateway spark-submit started already carries `spark.master`); else `local[*]`. No
other master is written anywhere. `--conf` pairs override the defaults below.

Executors run Python too (the constraint rules in `applyInPandas`): unless `PYSPARK_PYTHON`
or `spark.pyspark.python` says otherwise, they use this interpreter, which has this project
installed. That is right for local mode and for a cluster on the same hosts; on other hosts,
point `spark.pyspark.python` at an environment holding the project (README: spark-submit).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping

from pyspark.sql import SparkSession

DEFAULT_CONF = {
    "spark.sql.session.timeZone": "UTC",  # dates and windows are UTC, whatever the host's zone
    "spark.ui.showConsoleProgress": "false",  # our own progress lines instead of the bar
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    # The shuffles carry windows, not samples (partial aggregation happens before them):
    # Spark's 200 partitions are 200 tiny tasks each here. Raise it for a large cluster.
    "spark.sql.shuffle.partitions": "16",
}


def under_spark_submit() -> bool:
    """Whether this driver was started by spark-submit (which passes its gateway's port)."""
    return "PYSPARK_GATEWAY_PORT" in os.environ


def build_session(
    *, master: str | None = None, conf: Mapping[str, str] | None = None, app_name: str
) -> SparkSession:
    """The job's SparkSession (an existing one is reused, with `conf` applied)."""
    settings = {**DEFAULT_CONF, **(conf or {})}
    if "spark.pyspark.python" not in settings:
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = SparkSession.builder.appName(app_name)
    if master:
        builder = builder.master(master)
    elif not under_spark_submit():
        builder = builder.master("local[*]")
    for key, value in settings.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel(settings.get("spark.log.level", "WARN"))
    return spark
