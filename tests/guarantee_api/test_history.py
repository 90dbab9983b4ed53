"""The history writer fills every column of the shared schema; the schema check tells old
files (readable) from damaged ones (not history)."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from dag_common.clock import ManualClock
from dag_common.errors import ConfigError
from dag_common.guarantee.values import CopySnapshot
from dag_common.history_schema import FIRST_COLUMNS, SCHEMA, schema_problems
from dag_common.model import CopyRole
from guarantee_api.history import HistoryWriter, sample_rows
from tests.guarantee_api.helpers import SITES, T0, cluster_config, report


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
    writer = HistoryWriter(tmp_path, clock=ManualClock())
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


async def test_a_flush_is_due_once_the_oldest_sample_waited_its_time_however_many_polls():
    clock = ManualClock()
    writer = HistoryWriter(Path("unused"), clock=clock, flush_every=60)
    assert not writer.due, "nothing buffered, nothing to write"
    writer.add_round(clock.now(), _copies())
    await clock.advance(59)
    writer.add_round(clock.now(), _copies())
    assert not writer.due
    await clock.advance(1)
    assert writer.due
    rows = writer.drain()
    assert len(rows) == 2 * 3 and not writer.due
    writer.add_round(clock.now(), _copies())  # a round while the write runs
    writer.give_back(rows, 2)  # the write failed: the rows are as old as they were
    assert writer.due and writer.pending_rounds == 3
    assert len(writer.drain()) == 3 * 3


@pytest.mark.parametrize(
    ("api", "every"),
    [
        ({}, 60.0),
        ({"poll_interval": "5s"}, 60.0),  # a minute, however often the service polls
        ({"history_flush_interval": "15s"}, 15.0),
        ({"poll_interval": "5s", "history_flush_polls": 3}, 15.0),  # the older setting, in polls
    ],
)
def test_how_often_history_is_flushed(tmp_path, api, every):
    config = cluster_config({n: f"http://{n}:1" for n in SITES}, tmp_path, **api)
    assert config.guarantee_api.history_flush_every.total_seconds() == every


@pytest.mark.parametrize(
    ("api", "says"),
    [
        ({"history_flush_interval": "1m", "history_flush_polls": 60}, "set one"),
        ({"history_flush_interval": "500ms"}, "within 1s..1h"),
        ({"history_flush_interval": "2h"}, "within 1s..1h"),
    ],
)
def test_flush_settings_that_cannot_be_are_refused(tmp_path, api, says):
    with pytest.raises(ConfigError, match=says):
        cluster_config({n: f"http://{n}:1" for n in SITES}, tmp_path, **api)
