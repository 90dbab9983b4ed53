"""`spark-metrics aggregate|report`: the pipeline's command line; errors become exit codes here.

    spark-metrics aggregate --input HISTORY_DIR --output OUT_DIR [--window 1m] [--since T]
                            [--until T] [--master URL] [--conf k=v ...] [--config CLUSTER.yaml]
    spark-metrics report --input OUT_DIR --output report.html

Exit codes (dag_common.cli.ExitCode): 0 ok (skipped history files are counted, named, and
do not fail the run), 1 Spark or the output failed, 2 bad arguments or a missing input.
Runs the same under spark-submit: `spark-submit … spark_metrics/cli.py aggregate …`.
"""

from __future__ import annotations

import sys

from dag_common.cli import Lazy, Script
from spark_metrics.errors import BadInputError

# Each command's module is imported only when it is chosen; Spark only by `aggregate`'s run.
COMMANDS = (
    Lazy("aggregate", "aggregate the queue-length history with Spark",
         "spark_metrics.commands:build_aggregate"),
    Lazy("report", "write the HTML report of an aggregation's output",
         "spark_metrics.commands:build_report"),
)  # fmt: skip


SCRIPT = Script(
    "spark-metrics", COMMANDS, description=__doc__.splitlines()[0], bad_input=(BadInputError,)
)
_parser, main = SCRIPT.parser, SCRIPT.main  # main: the `spark-metrics` console script


if __name__ == "__main__":
    sys.exit(main())
