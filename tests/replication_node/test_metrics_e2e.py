"""`GET /metrics` on real node processes: after writes, a roll on size and a roll-log, every
node exports the promised names with sensible values, without the token, and promtool
accepts the body."""

from __future__ import annotations

import subprocess
import sys

import aiohttp
import pytest

from tests.cluster_harness import (
    ROOT,
    TOKEN,
    LocalCluster,
    cluster_config,
    free_port,
    wait_until,
    write_cluster_config,
)
from tests.prometheus import promtool_check, samples, value
from tests.replication_node.e2e import converged, three_nodes, write

pytestmark = pytest.mark.slow

# Per database copy on every node, whatever its role.
COPY_GAUGES = (
    "replication_copy_queue_length",
    "replication_replay_queue_length",
    "replication_last_log_generated",
    "replication_last_log_copied",
    "replication_last_log_inspected",
    "replication_last_log_replayed",
    "replication_epoch",
)


@pytest.fixture
async def cluster(tmp_path):
    c = three_nodes(tmp_path)
    await c.start()
    yield c
    await c.close()


async def scrape(cluster: LocalCluster, node: str) -> str:
    async with (
        aiohttp.ClientSession() as anonymous,  # no token
        anonymous.get(f"{cluster.url(node)}/metrics") as resp,
    ):
        assert resp.status == 200, await resp.text()
        return await resp.text()


async def test_every_node_exports_its_copies_and_pipeline(cluster):
    await cluster.ok("PUT", "mbx1", "/v1/databases/DB1/mailboxes/alice")
    await write(cluster, "mbx1", "DB1", "alice", 0, 300)  # 600-byte items: rolls on 64 KiB
    generated = await converged(cluster, "DB1", "mbx1", ["mbx2", "mbx3"])
    assert generated >= 3

    texts = {node: await scrape(cluster, node) for node in ("mbx1", "mbx2", "mbx3")}
    for text in texts.values():
        promtool_check(text)
    found = {node: samples(text) for node, text in texts.items()}
    active = {"database": "DB1", "node": "mbx1"}
    a = found["mbx1"]
    assert value(a, "replication_commits_total", **active) == 7  # the mailbox, 6 batches
    assert value(a, "replication_group_commit_size_sum", **active) == 7
    assert value(a, "replication_commit_duration_seconds_count", **active) >= 1
    assert value(a, "replication_log_fsync_duration_seconds_count", **active) >= generated
    assert value(a, "replication_log_rolls_total", **active, cause="size") >= 2
    assert value(a, "replication_log_rolls_total", **active, cause="demand") == 1
    assert value(a, "replication_copy_role", **active, role="Active") == 1
    assert value(a, "replication_copy_status", **active, status="Mounted") == 1
    assert value(a, "replication_last_log_generated", **active) == generated
    epoch = value(a, "replication_epoch", **active)
    assert epoch >= 1

    for node in ("mbx2", "mbx3"):
        copy = {"database": "DB1", "node": node}
        p = found[node]
        for name in COPY_GAUGES:
            value(p, name, **copy)
        assert value(p, "replication_copy_role", **copy, role="Passive") == 1
        assert value(p, "replication_copy_status", **copy, status="Healthy") == 1
        assert value(p, "replication_copy_status", **copy, status="FailedAndSuspended") == 0
        for marker in ("generated", "copied", "inspected", "replayed"):
            assert value(p, f"replication_last_log_{marker}", **copy) == generated, marker
        assert value(p, "replication_copy_queue_length", **copy) == 0
        assert value(p, "replication_replay_queue_length", **copy) == 0
        assert value(p, "replication_epoch", **copy) == epoch
        # a copy seeded while the writes ran copies only the generations above its seed
        copied = value(p, "replication_generations_copied_total", **copy)
        assert copied >= 1
        assert value(p, "replication_copied_bytes_total", **copy) > copied * 512
        assert value(p, "replication_generations_replayed_total", **copy) >= 1
        assert value(p, "replication_replay_batch_duration_seconds_count", **copy) >= 1
        assert value(p, "replication_inspection_failures_total", **copy) == 0
        assert value(p, "replication_recopies_total", **copy) == 0

    # DB2 is active on mbx2 and passive on mbx3: one node, two roles
    assert (
        value(found["mbx2"], "replication_copy_role", database="DB2", node="mbx2", role="Active")
        == 1
    )
    assert (
        value(found["mbx3"], "replication_copy_role", database="DB2", node="mbx3", role="Passive")
        == 1
    )
    assert value(found["mbx3"], "replication_database_configured_copies", database="DB1") == 3

    # the token is still needed everywhere else
    async with aiohttp.ClientSession() as anonymous:
        async with anonymous.get(f"{cluster.url('mbx1')}/v1/status") as resp:
            assert resp.status == 401
        async with anonymous.post(f"{cluster.url('mbx1')}/v1/databases/DB1/roll-log") as resp:
            assert resp.status == 401


async def test_a_node_in_a_pod_binds_every_address_while_its_url_names_dns(tmp_path):
    """In Kubernetes a node's url names its pod's DNS record, which resolves only once the
    pod runs: `serve --listen-host` binds without resolving it."""
    port = free_port()
    config = cluster_config(
        [("n0", "zone-a", f"http://n0.nodes.invalid:{port}")],
        [{"name": "DB1", "copies": [{"node": "n0", "activation_preference": 1}]}],
        cluster="pod",
        cluster_store={"kind": "embedded", "path": "cluster.db"},
    )
    write_cluster_config(tmp_path / "cluster.yaml", config)
    args = [sys.executable, "-m", "replication_node.cli.main", "serve", "--node", "n0"]
    args += ["--config", str(tmp_path / "cluster.yaml"), "--listen-host", "127.0.0.1"]
    log = open(tmp_path / "n0.log", "wb")  # noqa: SIM115 - the child owns it
    env = {"DG_AUTH_TOKEN": TOKEN, "PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}
    proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=ROOT)
    try:
        async with aiohttp.ClientSession() as anonymous:

            async def mounted() -> bool:
                assert proc.poll() is None, (tmp_path / "n0.log").read_text()[-2000:]
                async with anonymous.get(f"http://127.0.0.1:{port}/metrics") as resp:
                    return 'status="Mounted"} 1.0' in await resp.text()

            await wait_until(
                "the node's metrics to show its copy mounted", mounted, every=0.1,
                tolerate=(aiohttp.ClientError,),
            )  # fmt: skip
    finally:
        proc.terminate()
        proc.wait(timeout=30)
