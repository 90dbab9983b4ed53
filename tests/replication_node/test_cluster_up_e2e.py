"""`replication-node cluster up` as an operator runs it: a node that dies is named with why
and started again while the others keep running; with --exit-on-failure the cluster stops."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from tests.cluster_harness import ROOT, LocalCluster
from tests.replication_node.e2e import two_nodes

pytestmark = pytest.mark.slow


def up(cluster: LocalCluster, *flags: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "replication_node.cli.main", "cluster", "up",
         "--config", str(cluster.config_path), "--log-dir", str(cluster.root), *flags],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env=cluster.env(), cwd=ROOT,
    )  # fmt: skip


def pid_of(cluster: LocalCluster, node: str) -> int | None:
    """The pid holding the node's data directory (its node.lock); None between a starting
    node's lock and its writing its pid there (the file is empty for that moment)."""
    text = (cluster.root / node / "node.lock").read_text().strip()
    return int(text) if text else None


@pytest.fixture
async def cluster(tmp_path):
    c = two_nodes(tmp_path)
    await c.start()  # only to open the harness's session and check the config serves
    for node in list(c.procs):
        c.terminate(node)
    yield c
    await c.close()


async def healthy(cluster: LocalCluster, node: str) -> bool:
    try:
        return (await cluster.status(node))["DB1"]["status"] in ("Mounted", "Healthy")
    except Exception:
        return False


async def test_a_node_that_dies_is_named_and_restarted_while_the_others_run(cluster):
    proc = up(cluster)
    try:
        for node in ("mbx1", "mbx2"):
            await cluster.wait_for(f"{node} up", lambda n=node: healthy(cluster, n))
        first = pid_of(cluster, "mbx2")
        assert first is not None  # healthy: its pid was written long before
        os.kill(first, signal.SIGKILL)
        await cluster.wait_for(
            "mbx2 started again",
            lambda: (
                (cluster.root / "mbx2" / "node.lock").exists()
                and pid_of(cluster, "mbx2") not in (first, None)
                and healthy(cluster, "mbx2")
            ),
        )
        assert proc.poll() is None, "cluster up keeps running"
        assert await healthy(cluster, "mbx1")
    finally:
        proc.send_signal(signal.SIGTERM)
        _out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert "node mbx2 exited (killed by SIGKILL)" in err, err
    assert "restarting mbx2 in 1s" in err and "node mbx2 started again" in err, err
    assert "Traceback" not in err


async def test_with_exit_on_failure_the_cluster_stops_and_says_which_node(cluster):
    proc = up(cluster, "--exit-on-failure")
    try:
        for node in ("mbx1", "mbx2"):
            await cluster.wait_for(f"{node} up", lambda n=node: healthy(cluster, n))
        mbx1, mbx2 = pid_of(cluster, "mbx1"), pid_of(cluster, "mbx2")
        assert mbx1 is not None and mbx2 is not None  # healthy: their pids were written
        os.kill(mbx2, signal.SIGKILL)
        _out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 1, err
    assert "node mbx2 exited (killed by SIGKILL)" in err, err
    assert "stopping the cluster: node mbx2 exited (--exit-on-failure)" in err, err
    with pytest.raises(ProcessLookupError):
        os.kill(mbx1, 0)  # the other node was stopped too
