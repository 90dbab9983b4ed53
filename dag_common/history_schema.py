"""The queue-length history's schema: the one definition that the writer
(`guarantee_api.history`) and the reader (`spark_metrics`) both import.

One row per configured database copy per poll of the Data Guarantee service. Columns are
only ever added, nullable, at the end: a file written before a column existed is read with
that column null. `FIRST_COLUMNS` are those of the first version; a file without one of them,
or with any column of another type than below, is not history and a reader skips it.

The columns added in the second version carry what `dag_common.guarantee.policy.evaluate_health`
reads beyond the first version's (the inspected log time, the configured ReplayLagTime, the
last-known role of a copy whose status is not trusted), so that a reader can ask the
service's own rules what they would have answered at every sample.
"""

from __future__ import annotations

import pyarrow as pa

_TIME = pa.timestamp("us", tz="UTC")

SCHEMA = pa.schema(
    [
        ("time", _TIME),  # when the poll round ended (the service's clock)
        ("database", pa.string()),
        ("copy", pa.string()),  # the node holding the copy
        ("site", pa.string()),
        ("role", pa.string()),  # Active | Passive; null if the status is not fresh
        ("status", pa.string()),  # Healthy, Mounted, ...; null if not fresh
        ("reachable", pa.bool_()),  # false: unreachable node, stale or unreported status
        ("copy_queue_length", pa.int64()),
        ("replay_queue_length", pa.int64()),
        ("last_log_replayed", pa.int64()),
        ("last_replayed_log_time", _TIME),
        # Second version: null in files written before it, and where the status is not fresh.
        ("last_log_generated", pa.int64()),
        ("last_log_inspected", pa.int64()),
        ("last_inspected_log_time", _TIME),
        ("replay_lag_time_s", pa.float64()),  # the copy's configured ReplayLagTime, seconds
        ("epoch", pa.int64()),  # the stream incarnation the copy follows
        ("error", pa.string()),  # the copy's own error text, if it reported one
        # Set also when the status is not fresh: the role of the copy's last report (the
        # service still judges an unreachable active by its last-known role and site) and
        # why the status was not trusted.
        ("last_known_role", pa.string()),
        ("problem", pa.string()),
    ]
)

FIRST_COLUMNS = frozenset(SCHEMA.names[:11])

_UTC_NAMES = frozenset({"UTC", "Etc/UTC", "+00:00", "Z"})


def _same_type(expected: pa.DataType, found: pa.DataType) -> bool:
    if pa.types.is_timestamp(expected) and pa.types.is_timestamp(found):
        # Parquet stores instants in ms or us, adjusted to UTC; the zone's spelling varies.
        return found.unit in ("ms", "us") and found.tz in _UTC_NAMES
    return expected.equals(found)


def schema_problems(found: pa.Schema) -> list[str]:
    """Why a file with schema `found` is not readable as history (empty: it is)."""
    problems = []
    names = set(found.names)
    for name in sorted(FIRST_COLUMNS - names):
        problems.append(f"column {name!r} is missing")
    for field in SCHEMA:
        if field.name in names:
            got = found.field(field.name).type
            if not _same_type(field.type, got):
                problems.append(f"column {field.name!r} is {got}, expected {field.type}")
    return problems
