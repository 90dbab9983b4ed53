"""The status reads over TLS (issue 48, item 15: they call with the blocking client now, not
aiohttp): `replication-node status` and `transport status` against nodes and a transport
that speak HTTPS, trusting them by the cluster's `tls:` section's CA, and saying in the same
words as before when that CA is not the one that signed their certificates."""

from __future__ import annotations

import asyncio
import subprocess
import sys

import pytest
import yaml

from tests.cluster_harness import ROOT
from tests.pki import make_ca
from tests.tls_cluster import db1_on, tls_cluster
from tests.transport.harness import Hubs

pytestmark = pytest.mark.slow

UNTRUSTED = "its TLS certificate is not trusted (unable to get local issuer certificate)"


@pytest.fixture
async def lab(tmp_path):
    cluster, pki, _ = tls_cluster(
        tmp_path, **db1_on("mbx1", "mbx2"), certs=("hub1",), defaults={"failover_after": None}
    )
    hubs = Hubs(cluster, "hub1", scheme="https")
    await cluster.start()
    try:
        await cluster.wait_status("mbx1", "DB1", "Mounted")
        await cluster.wait_status("mbx2", "DB1", "Healthy")
        await hubs.start("hub1")
        stranger = make_ca(pki, "stranger")
        config = yaml.safe_load(cluster.config_path.read_text())
        config["tls"]["ca_file"] = str(stranger[0])
        (tmp_path / "stranger.yaml").write_text(yaml.safe_dump(config))
        yield cluster, tmp_path / "stranger.yaml"
    finally:
        hubs.stop_all()
        await cluster.close()


def cli(cluster, config, module: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", module, *args, "--config", str(config)],
        capture_output=True, text=True, env=cluster.env(), cwd=ROOT, timeout=60,
    )  # fmt: skip


async def test_the_status_reads_speak_tls_as_the_cluster_says(lab):
    cluster, stranger = lab
    run = lambda config, module, *args: asyncio.to_thread(cli, cluster, config, module, *args)  # noqa: E731

    table = await run(cluster.config_path, "replication_node.cli.main", "status")
    assert table.returncode == 0, table.stdout + table.stderr
    rows = [line.split()[:2] for line in table.stdout.splitlines()[2:4]]
    assert rows == [["DB1\\mbx1", "Mounted"], ["DB1\\mbx2", "Healthy"]], table.stdout
    queue = await run(cluster.config_path, "transport.cli", "status", "--via", "hub1")
    assert queue.returncode == 0, queue.stdout + queue.stderr
    assert queue.stdout.startswith("transport hub1: 0 waiting, 0 queued"), queue.stdout

    table = await run(stranger, "replication_node.cli.main", "status")
    assert table.returncode == 1, table.stdout + table.stderr
    assert table.stdout.count(f"unreachable: {UNTRUSTED}") == 2, table.stdout
    queue = await run(stranger, "transport.cli", "status", "--via", "hub1")
    assert queue.returncode == 1 and queue.stdout == "", queue.stdout + queue.stderr
    assert queue.stderr == (
        f"error: transport hub1 ({cluster.config['transports'][0]['url']}) cannot be reached: "
        f"{UNTRUSTED}\n"
    )
