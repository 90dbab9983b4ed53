"""Errors of the Data Guarantee service.

    DagError (dag_common.errors)
    └── GuaranteeError
        ├── UnknownDatabaseError   the request names a database the cluster config lacks (NOT_FOUND)
        ├── InvalidRequestError    a request field is missing or malformed (INVALID_ARGUMENT)
        └── HistoryWriteError      a history Parquet file could not be written

Only the servicer turns these into gRPC status codes, and only the CLI into exit codes.
A Retry or NotSatisfied answer is not an error: it is a normal answer.
"""

from dag_common.errors import DagError


class GuaranteeError(DagError):
    """Base of the Data Guarantee service's errors."""


class UnknownDatabaseError(GuaranteeError):
    """The request names a database that the cluster config does not know."""


class InvalidRequestError(GuaranteeError):
    """A request field is missing or malformed; the message names the field."""


class HistoryWriteError(GuaranteeError):
    """A history file could not be written durably."""
