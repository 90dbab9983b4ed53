"""History rows and files built in code, in the shared schema."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from dag_common.history_schema import SCHEMA

T0 = datetime(2026, 11, 22, 10, 0, tzinfo=UTC)
SITES = {"mbx1": "redmond", "mbx2": "redmond", "mbx3": "dublin"}


def row(
    at: datetime,
    copy: str,
    *,
    database: str = "DB1",
    role: str = "Passive",
    status: str | None = None,
    reachable: bool = True,
    cq: int = 0,
    rq: int = 0,
    span_s: float = 0.0,
    lag_s: float = 0.0,
    replayed: int = 100,
) -> dict[str, object]:
    """One copy's sample at `at`; an unreachable one has the nulls the writer leaves."""
    if status is None:
        status = "Mounted" if role == "Active" else "Healthy"
    replayed_time = at - timedelta(seconds=30)
    fresh = {
        "role": role,
        "status": status,
        "copy_queue_length": cq,
        "replay_queue_length": rq,
        "last_log_replayed": replayed,
        "last_replayed_log_time": replayed_time,
        "last_log_generated": replayed + rq + cq,
        "last_log_inspected": replayed + rq,
        "last_inspected_log_time": replayed_time + timedelta(seconds=span_s),
        "replay_lag_time_s": float(lag_s),
        "epoch": 1,
        "error": None,
        "problem": None,
    }
    if not reachable:
        fresh = {k: None for k in fresh} | {"problem": f"node {copy} unreachable"}
    return {
        "time": at,
        "database": database,
        "copy": copy,
        "site": SITES[copy],
        "reachable": reachable,
        "last_known_role": role,
        **fresh,
    }


def write_file(path: Path, rows: list[dict[str, object]], schema: pa.Schema = SCHEMA) -> Path:
    """Write `rows` as one Parquet file at `path` (its directories made)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    names = set(schema.names)
    table = pa.Table.from_pylist(
        [{k: v for k, v in r.items() if k in names} for r in rows], schema=schema
    )
    pq.write_table(table, path, compression="zstd")
    return path


def hour_path(root: Path, at: datetime, name: str) -> Path:
    """Where the writer puts a file of samples at `at`."""
    return root / f"date={at:%Y-%m-%d}" / f"hour={at:%H}" / f"part-{name}.parquet"
