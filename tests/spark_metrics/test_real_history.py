"""History written by a real `guarantee-api serve` process, polling fake nodes whose state
changes midway, aggregated by the pipeline: the constraint fractions equal the guarantee
rules applied to those very rows."""

from __future__ import annotations

import asyncio
import io
import os
import signal
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from pyspark.sql import Row
from pyspark.testing import assertDataFrameEqual

from dag_common.model import CopyRole
from spark_metrics.aggregate import aggregate
from spark_metrics.options import AggregateOptions
from spark_metrics.progress import Progress
from tests.cluster_harness import wait_until
from tests.guarantee_api.fake_nodes import FakeNodes
from tests.guarantee_api.helpers import TOKEN, healthy_cluster, node_status, report, write_config
from tests.spark_metrics.scenarios import reference_fractions


async def _files(history: Path, at_least: int, timeout: float = 120) -> list[Path]:
    def written() -> bool:
        return len(list(history.rglob("*.parquet"))) >= at_least

    await wait_until(f"{at_least} history files", written, timeout=timeout, every=0.1)
    return sorted(history.rglob("*.parquet"))


@pytest.mark.slow
async def test_history_from_a_real_service_run(spark, tmp_path):
    nodes = FakeNodes(["mbx1", "mbx2", "mbx3"], TOKEN)
    nodes.set(healthy_cluster())
    await nodes.start()
    history = tmp_path / "history"
    config = write_config(
        tmp_path / "c.yaml", nodes.urls, history_dir=str(history),
        poll_interval="200ms", history_flush_interval="1s",
    )  # fmt: skip
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "guarantee_api.cli", "serve", "--config", str(config),
        "--grace", "0", env={**os.environ, "DG_AUTH_TOKEN": TOKEN},
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL,
    )  # fmt: skip
    try:
        await _files(history, 2)
        # mbx3 (the only copy in dublin) falls behind, then its node goes away
        nodes.set({"mbx3": node_status("mbx3", report("mbx3", cq=25))})
        await _files(history, 4)
        await nodes["mbx3"].stop()
        await _files(history, 6)
        proc.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(proc.wait(), 60) == 0
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
        await nodes.close()

    rows = pq.ParquetDataset(history).read().to_pylist()
    rows = [{k: v for k, v in r.items() if k not in ("date", "hour")} for r in rows]
    assert {r["copy"] for r in rows if r["database"] == "DB1"} == {"mbx1", "mbx2", "mbx3"}
    assert any(r["copy_queue_length"] == 25 for r in rows)
    assert any(r["problem"] and r["last_known_role"] == CopyRole.PASSIVE for r in rows)

    summary = aggregate(
        spark, AggregateOptions(input=history, output=tmp_path / "out", window_s=86400),
        Progress(io.StringIO()),
    )  # fmt: skip
    assert summary.skipped == () and summary.rows_read == len(rows)
    got = spark.read.parquet(str(tmp_path / "out" / "constraints")).drop("date")
    expected = [
        Row(**{k: v for k, v in r.items() if k != "date"}) for r in reference_fractions(rows, 86400)
    ]
    assertDataFrameEqual(got, expected)
    db1 = got.where("database = 'DB1'").collect()[0]
    assert 0 < db1["second_datacenter_satisfied"] < db1["second_copy_satisfied"] == 1.0
