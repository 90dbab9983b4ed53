"""A cluster from the images, run as the chart runs them (tests/image/pods.py derives every
container from `helm template`): etcd, three nodes in two sites, the guarantee service and
an `mrs serve` worker on one podman network, each credential a file of the Secret the
chart made.  Writes, their replication, a move by the worker, a switchover, a node's
container killed and its databases failed over; every container then stopped with SIGTERM
and gone within its pod's grace; the Spark image's `spark-metrics aggregate`, as the
CronJob runs it, over the history the guarantee service wrote.

etcd (the chart expects one outside it) runs in a container of the runtime image from the
host's etcd binary (Debian's etcd-server, which `make test` installs): on the network, under
the name the values give the endpoint, as a Service would be, and removed with the rest; a
host process would have to listen on the bridge's gateway, reachable from everything on
the host, and outlive a failed test unless watched.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import string
import subprocess
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from tests.image.pods import Kubelet, Pod, Release, kubelet, probe, wait_for
from tools.build_image import podman, podman_env

ETCD = "etcd"
VALUES: dict[str, Any] = {
    "clusterStore": {"etcd": {"endpoints": [f"http://{ETCD}:2379"]}},
    "auth": {"roles": {"enabled": True}},
    # One replica: two would serve the same answers, and this machine has two cores.
    # History written every 5 s, so that the Spark job has samples to aggregate.
    "guaranteeApi": {
        "replicas": 1,
        "config": {"poll_interval": "1s", "history_flush_interval": "5s"},
    },
    "mrsWorkers": {"replicas": 1},
}
CONFIG = "/etc/dag/cluster.yaml"


def start_etcd(k: Kubelet, image: str) -> str:
    """etcd in a container of the runtime image (the host's binary, read-only), as uid
    10001 on a read-only root; its address once it answers /health."""
    binary = shutil.which("etcd")
    if binary is None:
        pytest.skip("no etcd binary (make system-deps installs etcd-server)")
    ip = k.address([ETCD])
    name = f"{k.prefix}-etcd"
    binary = os.path.realpath(binary)
    podman(
        "run", "--detach", "--name", name, "--network", k.network, "--ip", ip,
        "--user", "10001:10001", "--read-only", "--cap-drop", "ALL",
        "--mount", "type=tmpfs,destination=/var/lib/etcd,tmpfs-mode=1777",
        "--mount", f"type=bind,source={binary},destination=/usr/local/bin/etcd,ro",
        "--entrypoint", '["/usr/local/bin/etcd"]', image,
        "--data-dir", "/var/lib/etcd/data", "--name", ETCD,
        "--listen-client-urls", "http://0.0.0.0:2379",
        "--advertise-client-urls", f"http://{ETCD}:2379",
        "--listen-peer-urls", "http://127.0.0.1:2380",
    )  # fmt: skip
    k.extra_containers.append(name)
    wait_for("etcd answering /health", lambda: _get(f"http://{ip}:2379/health") is not None,
             timeout=60)  # fmt: skip
    return ip


def _get(url: str, token: str | None = None) -> Any:
    """GET a JSON body; None when the peer does not answer or refuses."""
    request = urllib.request.Request(url)
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return json.loads(response.read())
    except (OSError, ValueError):
        return None


def _post(url: str, token: str) -> None:
    request = urllib.request.Request(url, method="POST", data=b"{}")
    request.add_header("Authorization", f"Bearer {token}")
    request.add_header("Content-Type", "application/json")
    with urllib.request.urlopen(request, timeout=30):
        pass


def _send(url: str, token: str, body: dict[str, Any], method: str = "POST") -> int:
    """A JSON body sent with the token; the answer's status."""
    request = urllib.request.Request(url, method=method, data=json.dumps(body).encode())
    request.add_header("Authorization", f"Bearer {token}")
    request.add_header("Content-Type", "application/json")
    with urllib.request.urlopen(request, timeout=120) as response:
        return response.status


def _read_through(url: str, token: str) -> int:
    """GET an answer as it streams, counting its bytes (never holding it whole)."""
    request = urllib.request.Request(url)
    request.add_header("Authorization", f"Bearer {token}")
    total = 0
    with urllib.request.urlopen(request, timeout=300) as response:
        while chunk := response.read(1 << 20):
            total += len(chunk)
    return total


def exec_in(k: Kubelet, pod: Pod, *argv: str, timeout: float = 180) -> str:
    """`kubectl exec` of a command in a pod's container (its env, its mounts); stdout."""
    result = subprocess.run(
        ["podman", "exec", k.running[pod.name].container, *argv],
        env=podman_env(), capture_output=True, text=True, timeout=timeout, check=False,
    )  # fmt: skip
    assert result.returncode == 0, f"{pod.name}: {' '.join(argv)}:\n{result.stdout}{result.stderr}"
    return result.stdout


def wait_started(k: Kubelet, pod: Pod, timeout: float = 180) -> None:
    """Wait as the kubelet does: the startup probe, then readiness; fail with the logs."""
    ip = k.running[pod.name].ip
    for kind in ("startupProbe", "readinessProbe"):
        if kind not in pod.container:
            continue
        try:
            wait_for(f"{pod.name}: {kind}", lambda kind=kind: probe(pod, ip, kind),
                     timeout=timeout)  # fmt: skip
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n--- logs of {pod.name}:\n{k.logs(pod)[-4000:]}") from None


def test_a_cluster_from_the_chart_s_containers(images: dict[str, str], tmp_path: Path) -> None:
    release = Release.render(VALUES, name="dag", namespace="mail")
    for pod in release.pods():
        image = pod.container["image"]
        assert image in images.values(), f"{pod.name} runs {image}, which make image does not build"
    nodes = [p for p in release.pods() if p.component == "replication-node"]
    guarantee, worker = release.pod("guarantee-api"), release.pod("mrs-worker")
    names = {p.name.removeprefix("dag-dag-replication-"): p.name for p in nodes}
    a0, a1, b0 = names["site-a-0"], names["site-a-1"], names["site-b-0"]
    movers = release.secret_value("dag-dag-replication-credential-movers", "secret")
    operators = "/etc/dag-credentials/operators/secret"  # mounted in the node pods (accepted)

    with kubelet(release, tmp_path, prefix=f"dagimg{os.getpid()}") as k:
        start_etcd(k, images["runtime"])
        k.reserve([*nodes, guarantee, worker])
        for pod in [*nodes, guarantee, worker]:
            k.start(pod)
        for pod in [*nodes, guarantee, worker]:
            wait_started(k, pod)
        ip = {p.name: k.running[p.name].ip for p in nodes}

        def node_url(node: str, path: str) -> str:
            return f"http://{ip[node]}:7100{path}"

        def where(via: str) -> dict[str, Any] | None:
            return _get(node_url(via, "/v1/mailboxes/alice"), movers)

        def count(node: str, db: str) -> int | None:
            body = _get(node_url(node, f"/v1/databases/{db}/mailboxes/alice/items?count=true"),
                        movers)  # fmt: skip
            return None if body is None else body["live_count"]

        def replicated(db: str, active: str, passives: list[str], n: int) -> None:
            _post(node_url(active, f"/v1/databases/{db}/roll-log"), movers)
            for node in passives:
                wait_for(f"{n} items of alice replayed on {node}'s copy of {db}",
                         lambda node=node: count(node, db) == n, timeout=120)  # fmt: skip

        # Writes on DB1's active (activation preference 1), from inside the worker's pod:
        # `mailbox put` finds the active itself, with the movers' credential (store).
        db1 = "--database", "DB1", "--config", CONFIG
        exec_in(k, worker, "replication-node", "mailbox", "create", "alice", *db1)
        exec_in(k, worker, "replication-node", "mailbox", "put", "alice", *db1, "--count", "200")
        assert where(b0)["active_node"] == a0
        replicated("DB1", a0, [a1, b0], 200)

        # Large items under the pods' 1 GiB limit (issue 52): 12 items of 30 MiB written to
        # DB1's active, replicated to both passives, and listed whole in one answer (before,
        # a listing peaked a node at four times the mailbox): no container is OOM-killed.
        big = node_url(a0, "/v1/databases/DB1/mailboxes/big")
        assert _send(big, movers, {"display_name": "Big"}, method="PUT") == 201
        text = "".join(random.Random(52).choices(string.ascii_letters, k=1 << 16)) * 480
        for i in range(12):
            item = {"item_id": f"big{i}", "subject": f"large {i}", "body": text}
            assert _send(big + "/items", movers, item) == 201
        _post(node_url(a0, "/v1/databases/DB1/roll-log"), movers)
        for node in (a1, b0):
            wait_for(
                f"the large items replayed on {node}",
                lambda node=node: (_get(node_url(node, "/v1/databases/DB1/mailboxes/big/digest"),
                                        movers) or {}).get("item_count") == 12,
                timeout=240, every=1,
            )  # fmt: skip
        assert _read_through(big + "/items?since_change=0", movers) > 12 * len(text)
        for pod in nodes:
            assert k.state(pod)["OOMKilled"] is False, f"{pod.name} was OOM-killed"
        metrics = urllib.request.urlopen(node_url(a0, "/metrics"), timeout=10).read().decode()
        assert "process_memory_limit_bytes 1.073741824e+09" in metrics, "the pod's limit"

        # A move, queued as a batch and run by the worker, gated on the guarantee service.
        exec_in(k, worker, "mrs", "batch", "create", "b1", "--mailboxes", "alice", "--to", "DB2",
                "--config", CONFIG)  # fmt: skip
        wait_for("alice moved to DB2",
                 lambda: (w := where(b0)) is not None and w["database"] == "DB2"
                 and w["moving"] is None, timeout=240)  # fmt: skip
        assert where(a0)["active_node"] == a1
        assert count(a1, "DB2") == 200

        # A switchover of DB2, by an operator from inside a node pod (NOTES.txt's way).
        exec_in(k, nodes[0], "replication-node", "db", "switchover", "DB2", "--to", b0,
                "--config", CONFIG, "--credential-file", operators)  # fmt: skip
        wait_for(
            "DB2 active on site-b-0",
            lambda: (w := where(a0)) is not None and w["active_node"] == b0,
            timeout=60,
        )
        db2 = "--database", "DB2", "--config", CONFIG
        exec_in(k, worker, "replication-node", "mailbox", "put", "alice", *db2, "--count", "50")
        replicated("DB2", b0, [a1], 250)

        # site-b-0's container killed: DB2 fails over to site-a-1, nothing lost.
        podman("kill", "--signal", "KILL", k.running[b0].container)
        wait_for("DB2 failed over to site-a-1",
                 lambda: (w := where(a0)) is not None and w["active_node"] == a1,
                 timeout=120)  # fmt: skip
        wait_for("alice's 250 items on the new active", lambda: count(a1, "DB2") == 250,
                 timeout=60)  # fmt: skip
        exec_in(k, worker, "replication-node", "mailbox", "put", "alice", *db2, "--count", "10")
        assert count(a1, "DB2") == 260

        # Every container stopped as the kubelet stops a pod: SIGTERM, then SIGKILL once
        # the grace has passed.  Each must end by itself, well within it, and exit 0.
        by_name = {p.name: p for p in nodes}
        for pod in [worker, guarantee, by_name[a0], by_name[a1]]:
            started = time.monotonic()
            podman("stop", "--time", str(pod.grace), k.running[pod.name].container)
            took = time.monotonic() - started
            print(f"{pod.name}: stopped in {took:.1f}s of a {pod.grace}s grace")
            state = k.state(pod)
            assert state["ExitCode"] == 0 and took < pod.grace, (
                f"{pod.name}: exit {state['ExitCode']} after {took:.1f}s of a {pod.grace}s grace"
                f"\n{k.logs(pod)[-3000:]}"
            )

        # The CronJob's pod, from the Spark image, over the history the service wrote.
        job = release.pod("spark-metrics")
        history = k.claim_dir("dag-dag-replication-history", None)
        assert list((history / "samples").rglob("*.parquet")), "the service wrote no history"
        result = k.run_once(job)
        assert result.returncode == 0, f"spark-metrics aggregate:\n{result.stderr[-4000:]}"
        assert list((history / "aggregates").rglob("*.parquet")), result.stdout
