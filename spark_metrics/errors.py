"""Errors of the history pipeline.

    DagError (dag_common.errors)
    └── MetricsError
        ├── BadInputError     a missing input directory, a bad argument, an output directory
        │                     made with another window (exit 2)
        └── PipelineError     Spark, or writing the output, failed (exit 1)

A damaged history file is not an error: it is skipped, named in the run's summary, and the
run goes on (exit 0). Only the CLI turns these into exit codes.
"""

from dag_common.errors import DagError


class MetricsError(DagError):
    """Base of the pipeline's errors."""


class BadInputError(MetricsError):
    """The arguments or the input cannot be used; the message says which and why."""


class PipelineError(MetricsError):
    """Spark or the output failed; the message carries the cause."""
