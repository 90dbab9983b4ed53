"""The history writer fills every column of the shared schema; the schema check tells old
files (readable) from damaged ones (not history)."""

from __future__ import annotations

from datetime import timedelta

import pyarrow as pa
import pyarrow.parquet as pq

from dag_common.guarantee.values import CopySnapshot
from dag_common.history_schema import FIRST_COLUMNS, SCHEMA, schema_problems
from dag_common.model import CopyRole
from guarantee_api.history import HistoryWriter, sample_rows
from tests.guarantee_api.helpers import T0, report


def _copies() -> list[CopySnapshot]:
    active = report("mbx1", role=CopyRole.ACTIVE)
    lagged = report("mbx3", rq=4, lag=timedelta(minutes=5)).model_copy(
        update={"last_inspected_log_time": T0 + timedelta(seconds=90), "epoch": 2}
    )
    return [
        CopySnapshot("DB1", "mbx1", "redmond", active),
        CopySnapshot("DB1", "mbx2", "redmond", report("mbx2"), problem="node mbx2 unreachable"),
        CopySnapshot("DB1", "mbx3", "dublin", lagged),
    ]


def test_rows_carry_what_the_policy_reads_and_why_a_copy_was_not_trusted():
    rows = {r["copy"]: r for r in sample_rows(T0, _copies())}
    assert set(rows["mbx1"]) == set(SCHEMA.names)
    assert rows["mbx3"]["last_inspected_log_time"] == T0 + timedelta(seconds=90)
    assert rows["mbx3"]["replay_lag_time_s"] == 300.0
    assert rows["mbx3"]["epoch"] == 2 and rows["mbx3"]["problem"] is None
    stale = rows["mbx2"]
    assert stale["reachable"] is False and stale["status"] is None and stale["role"] is None
    assert stale["last_known_role"] == "Passive"  # the stale report's role is still known
    assert stale["problem"] == "node mbx2 unreachable"


def test_written_file_has_the_shared_schema(tmp_path):
    writer = HistoryWriter(tmp_path)
    (path,) = writer.write(sample_rows(T0, _copies()))
    table = pq.read_table(path)
    assert schema_problems(table.schema) == []
    assert table.schema.names == SCHEMA.names


def test_first_version_files_are_history_and_mistyped_ones_are_not():
    first = pa.schema([f for f in SCHEMA if f.name in FIRST_COLUMNS])
    assert schema_problems(first) == []
    mistyped = first.set(
        first.get_field_index("copy_queue_length"), pa.field("copy_queue_length", pa.string())
    )
    assert schema_problems(mistyped) == ["column 'copy_queue_length' is string, expected int64"]
    missing = first.remove(first.get_field_index("database"))
    assert schema_problems(missing) == ["column 'database' is missing"]
