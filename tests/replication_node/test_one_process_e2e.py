"""One process per node and per service port, over real processes: a second `serve` of a
running node, a node whose port another process holds, a second guarantee API on one port.
Each exits 2 with one line naming who holds what, and opens nothing."""

from __future__ import annotations

import socket
import subprocess
import sys

import pytest

from tests.cluster_harness import ROOT, LocalCluster
from tests.replication_node.e2e import two_nodes

pytestmark = pytest.mark.slow


def serve(cluster: LocalCluster, node: str) -> subprocess.CompletedProcess[str]:
    return cluster.node_cli("serve", "--node", node, timeout=60)


@pytest.fixture
async def cluster(tmp_path):
    c = two_nodes(tmp_path)
    yield c
    await c.close()


async def test_a_second_process_for_a_running_node_is_refused_before_it_opens_anything(
    cluster,
):
    await cluster.start("mbx1")
    await cluster.ok("PUT", "mbx1", "/v1/databases/DB1/mailboxes/alice")
    second = serve(cluster, "mbx1")
    assert second.returncode == 2, second.stdout + second.stderr
    lock = cluster.root / "mbx1" / "node.lock"
    assert second.stderr.strip() == (
        f"error: node mbx1 is already running: pid {cluster.procs['mbx1'].pid} holds {lock}"
    ), second.stderr
    assert second.stdout == ""
    # The running node goes on undisturbed.
    assert (await cluster.ok("GET", "mbx1", "/v1/databases/DB1/mailboxes/alice"))["mailbox"]


async def test_a_node_whose_port_is_taken_is_refused_before_it_opens_anything(cluster):
    holder = socket.socket()
    holder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    holder.bind(("127.0.0.1", cluster.ports["mbx2"]))
    holder.listen()
    try:
        result = serve(cluster, "mbx2")
    finally:
        holder.close()
    assert result.returncode == 2, result.stdout + result.stderr
    assert result.stderr.strip() == (
        f"error: node mbx2: 127.0.0.1:{cluster.ports['mbx2']} is already in use by another process"
    ), result.stderr
    # Nothing of the node was opened or created: only its lock, released at its exit.
    assert sorted(p.name for p in (cluster.root / "mbx2").iterdir()) == ["node.lock"]


async def test_a_second_guarantee_api_on_one_port_is_refused(cluster):
    await cluster.start()
    api = await cluster.start_guarantee_api()
    try:
        second = subprocess.run(
            [sys.executable, "-m", "guarantee_api.cli", "serve",
             "--config", str(cluster.config_path)],
            capture_output=True, text=True, env=cluster.env(), cwd=ROOT, timeout=60,
        )  # fmt: skip
    finally:
        api.terminate()
        api.wait(timeout=20)
    assert second.returncode == 2, second.stdout + second.stderr
    listen = cluster.config["guarantee_api"]["listen"]
    assert second.stderr.strip() == (
        f"error: guarantee API (gRPC): {listen} is already in use by another process"
    ), second.stderr
