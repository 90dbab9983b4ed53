"""The node's metrics: counted where events happen (once per group commit, per fsync, per
generation), read from status at scrape time, served at /metrics without the token."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import aiohttp
import pytest

from dag_common.auth import bearer
from dag_common.clock import ManualClock, SystemClock
from dag_common.config import parse_config
from dag_common.model import RollCause
from replication_node.metrics import NodeMetrics
from replication_node.passive.copy import PassiveCopy
from tests.cluster_harness import cluster_config, free_port, wait_until
from tests.prometheus import promtool_check, samples, value
from tests.replication_node.helpers import (
    CorruptingWire,
    mount,
    op,
    passive,
    replayed_through,
    serving_node,
)

TOKEN = "metrics-token-0123456789abcdef"


async def test_the_log_writer_counts_group_commits_fsyncs_and_rolls_by_cause(tmp_path):
    metrics = NodeMetrics("n1")
    clock = ManualClock()
    copy = await mount(tmp_path, log_file_size=32 * 1024, clock=clock)
    copy.stream.set_metrics(metrics.stream("DB1"))
    await asyncio.gather(*(copy.commit(op(i, 100)) for i in range(64)))
    for i in range(64, 200):  # 500-byte records: a 32 KiB log rolls on size
        await copy.commit(op(i))
    await copy.roll(force=True)
    roller = asyncio.create_task(copy.stream.run_idle_roller(60))
    await copy.commit(op(200))
    open_generation = copy.stream.generation
    await clock.advance(61)
    # Settled, not only counted: a roll is counted as it is written, and its fsyncs come
    # after it, at the batch's end (the counts below read in between differed by one).
    await wait_until(
        "an idle roll counted and settled",
        lambda: (
            copy.stream.generation > open_generation
            and value(metrics.render().decode(), "replication_log_rolls_total", **labels("idle"))
        ),
        timeout=10,
    )
    roller.cancel()
    found = samples(metrics.render().decode())
    db = {"database": "DB1", "node": "n1"}
    assert value(found, "replication_commits_total", **db) == 201
    groups = value(found, "replication_group_commit_size_count", **db)
    assert groups < 201, "one observation per group commit, not per record"
    assert value(found, "replication_group_commit_size_sum", **db) == 201
    assert value(found, "replication_commit_duration_seconds_count", **db) == groups
    assert value(found, "replication_log_rolls_total", **labels("size")) >= 3
    assert value(found, "replication_log_rolls_total", **labels("demand")) == 1
    assert value(found, "replication_log_rolls_total", **labels("idle")) == 1
    assert value(found, "replication_log_rolls_total", **labels("switchover")) == 0
    assert value(found, "replication_log_fsync_duration_seconds_count", **db) == copy.stream.fsyncs
    await copy.commit(op(201))
    await copy.dismount()
    assert (
        value(metrics.render().decode(), "replication_log_rolls_total", **labels("dismount")) == 1
    )


def labels(cause: str) -> dict[str, str]:
    assert cause in set(RollCause)
    return {"database": "DB1", "node": "n1", "cause": cause}


async def test_a_passive_copy_counts_what_it_copies_recopies_and_replays(share, tmp_path):
    metrics = NodeMetrics("p")
    wire = CorruptingWire(share.source(), 2)
    template = passive(share, tmp_path, source=wire)
    copy = PassiveCopy(
        settings=template.settings,
        paths=template.paths,
        source=wire,
        clock=SystemClock(),
        retry_interval=0.05,
        metrics=metrics,
    )
    await copy.start()
    for i in range(3):
        await share.write(i * 10, 10)
        await share.roll()
    last = share.active.last_log_generated
    await wait_until("replay", replayed_through(copy, last))
    found = samples(metrics.render().decode())
    db = {"database": "DB1", "node": "p"}
    assert value(found, "replication_inspection_failures_total", **db) == 1
    assert value(found, "replication_recopies_total", **db) == 1
    copied = value(found, "replication_generations_copied_total", **db)
    # every generation at least once, the damaged one again (and, in a window fetched
    # ahead of it, those after it)
    assert copied >= last + 1
    sizes = sum(share.closed_file(g).stat().st_size for g in range(1, last + 1))
    assert value(found, "replication_copied_bytes_total", **db) > sizes
    assert value(found, "replication_generations_replayed_total", **db) == last
    assert value(found, "replication_replay_batch_duration_seconds_count", **db) >= 1
    await copy.stop()


@pytest.fixture
async def node(tmp_path):
    port = free_port()
    config = parse_config(
        cluster_config(
            [
                ("n1", "s1", f"http://127.0.0.1:{port}"),
                ("n2", "s2", f"http://127.0.0.1:{free_port()}"),
            ],
            [
                {
                    "name": "DB1",
                    "copies": [
                        {"node": "n1", "activation_preference": 1},
                        {"node": "n2", "activation_preference": 2},
                    ],
                }
            ],
            cluster="t",
            cluster_store={"kind": "embedded", "path": "cluster.db"},
            defaults={"log_file_size": "64KiB", "llr_depth": 2, "failover_after": None},
        ),
        base_dir=tmp_path,
    )
    async with serving_node(config, tmp_path, name="n1", port=port, token=TOKEN) as served:
        yield served


async def test_metrics_need_no_token_and_every_other_route_still_does(node):
    n, url = node
    box = f"{url}/v1/databases/DB1/mailboxes/alice"
    async with aiohttp.ClientSession(headers=bearer(TOKEN)) as session:
        async with session.put(box) as resp:
            assert resp.status == 201
        for i in range(3):
            async with session.post(box + "/items", json={"item_id": f"i{i}"}) as resp:
                assert resp.status == 201
        async with session.post(f"{url}/v1/databases/DB1/roll-log") as resp:
            assert resp.status == 200
    async with aiohttp.ClientSession() as anonymous:
        async with anonymous.get(f"{url}/metrics") as resp:
            assert resp.status == 200
            assert resp.headers["Content-Type"].startswith("text/plain; version=")
            text = await resp.text()
        for path in ("/v1/status", "/v1/databases/DB1/mailboxes", "/metricsx", "/metrics/"):
            async with anonymous.get(url + path) as resp:
                assert resp.status == 401, path
    promtool_check(text)
    db = {"database": "DB1", "node": "n1"}
    assert value(text, "replication_commits_total", **db) == 4  # the mailbox and 3 items
    assert value(text, "replication_log_rolls_total", **db, cause="demand") == 1
    assert value(text, "replication_copy_status", **db, status="Mounted") == 1
    assert value(text, "replication_copy_status", **db, status="Healthy") == 0
    assert value(text, "replication_copy_role", **db, role="Active") == 1
    assert value(text, "replication_copy_role", **db, role="Passive") == 0
    assert value(text, "replication_last_log_generated", **db) == 1
    assert value(text, "replication_epoch", **db) == n.instance("DB1").epoch >= 1
    assert value(text, "replication_database_configured_copies", database="DB1") == 2
    assert value(text, "replication_node_info", node="n1", site="s1", cluster="t") == 1
    assert value(text, "replication_unexpected_errors_total", node="n1") == 0
    assert value(text, "replication_last_replayed_log_timestamp_seconds", **db) > 1e9
    assert value(text, "replication_replay_lag_time_seconds", **db) == 0


def test_status_gauges_cover_every_copy_status_once():
    from dag_common.model import CopyRole, CopyStatus, CopyStatusReport, NodeStatus
    from replication_node.metrics import NodeStatusCollector

    metrics = NodeMetrics("n")
    report = CopyStatusReport(
        database="DB2",
        node="n",
        site="s",
        role=CopyRole.PASSIVE,
        status=CopyStatus.FAILED_AND_SUSPENDED,
        activation_preference=2,
        last_log_generated=9,
        last_log_inspected=4,
        last_log_replayed=3,
        copy_queue_length=5,
        replay_queue_length=1,
        replay_lag_time=timedelta(hours=1),
    )
    metrics.watch(
        NodeStatusCollector(
            cluster=lambda: "c",
            status=lambda: NodeStatus(node="n", site="s", copies=[report]),
            configured_copies=lambda: {"DB2": 3},
            unexpected_errors=lambda: 2,
        )
    )
    text = metrics.render().decode()
    promtool_check(text)
    db = {"database": "DB2", "node": "n"}
    states = {s: value(text, "replication_copy_status", **db, status=s) for s in CopyStatus}
    assert states.pop(CopyStatus.FAILED_AND_SUSPENDED) == 1 and set(states.values()) == {0}
    assert value(text, "replication_copy_queue_length", **db) == 5
    assert value(text, "replication_replay_queue_length", **db) == 1
    assert value(text, "replication_last_log_inspected", **db) == 4
    assert value(text, "replication_replay_lag_time_seconds", **db) == 3600
    # Nothing replayed or inspected yet: no sample (as exporters leave out "never"), not 0.
    found = samples(text)
    for name in ("replication_last_replayed_log_timestamp_seconds",
                 "replication_last_inspected_log_timestamp_seconds"):  # fmt: skip
        assert (name, frozenset(db.items())) not in found, name
    assert "# TYPE replication_last_replayed_log_timestamp_seconds gauge" in text
    assert value(text, "replication_unexpected_errors_total", node="n") == 2
