"""Bad input to the chart's containers: a config missing or malformed, a credential missing,
a data volume the container cannot write.  Each container exits non-zero by itself with one
line naming what is wrong, and the pod's readiness probe, as the chart defines it, fails
(the kubelet would keep it out of its Service and restart it with a back-off).

Each case changes one thing of what the chart renders (the ConfigMap's files, a credential
Secret's, the data claim's owner); everything else is the chart's own pod."""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.image.pods import Kubelet, Pod, Release, kubelet, probe, wait_for
from tests.image.test_cluster import VALUES, start_etcd


@pytest.fixture(scope="module")
def cluster(images: dict[str, str], tmp_path_factory) -> Iterator[Kubelet]:
    """A network with etcd on it (so a node that starts gets as far as it can)."""
    release = Release.render(VALUES, name="dag", namespace="mail")
    root = tmp_path_factory.mktemp("bad-input")
    with kubelet(release, root, prefix=f"dagbad{os.getpid()}") as k:
        start_etcd(k, images["runtime"])
        k.reserve(release.pods())
        yield k


def node(k: Kubelet) -> Pod:
    return k.release.pod("replication-node")


def missing_config(k: Kubelet, pod: Pod) -> None:
    k.overrides[(pod.name, "config")] = {}


def malformed_config(k: Kubelet, pod: Pod) -> None:
    k.overrides[(pod.name, "config")] = {
        "cluster.yaml": b"cluster: dag1\nnodes: [{name: x\n",
        "guarantee.yaml": b"cluster: dag1\nnodes: [{name: x\n",
    }


def missing_credential(k: Kubelet, pod: Pod) -> None:
    presented = pod.env({})["DG_CREDENTIAL_FILE"]  # /etc/dag-credentials/<key>/secret
    k.overrides[(pod.name, f"credential-{Path(presented).parent.name}")] = {}


def unwritable_data(k: Kubelet, pod: Pod) -> None:
    # A volume whose owner the fsGroup change did not reach: root's, 0755.
    path = k.root / "claims" / pod.claims["data"]
    path.mkdir(parents=True, exist_ok=True)
    os.chown(path, 0, 0)
    path.chmod(0o755)


CASES: dict[str, tuple[str, Callable[[Kubelet, Pod], None], str]] = {
    # case: (component, break it, a word the error line must hold)
    "node, config missing": ("replication-node", missing_config, "/etc/dag/cluster.yaml"),
    "node, config malformed": ("replication-node", malformed_config, "cluster.yaml"),
    "node, credential missing": ("replication-node", missing_credential, "/etc/dag-credentials"),
    "node, data volume not writable": ("replication-node", unwritable_data, "/var/lib/dag/data"),
    "guarantee-api, config missing": ("guarantee-api", missing_config, "/etc/dag/guarantee.yaml"),
    "mrs-worker, credential missing": ("mrs-worker", missing_credential, "/etc/dag-credentials"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_bad_input_exits_with_one_line_and_is_not_ready(cluster: Kubelet, case: str) -> None:
    component, spoil, named = CASES[case]
    pod = cluster.release.pod(component)
    spoil(cluster, pod)
    try:
        running = cluster.start(pod)
        wait_for(f"{pod.name} to exit", lambda: not cluster.state(pod)["Running"], timeout=60)
        state = cluster.state(pod)
        lines = [line for line in cluster.logs(pod).splitlines() if line.strip()]
        assert state["ExitCode"] != 0, f"{case}: exit 0\n{lines}"
        assert len(lines) == 1 and named in lines[0], f"{case}: not one line naming {named}:\n" + (
            "\n".join(lines[-20:])
        )
        for kind in ("startupProbe", "readinessProbe"):
            if kind in pod.container:
                assert not probe(pod, running.ip, kind), f"{case}: {kind} passes"
    finally:
        cluster.overrides.clear()
        if pod.name in cluster.running:
            cluster.remove(pod)
        for claim in pod.claims.values():
            path = cluster.root / "claims" / claim
            if path.exists():
                shutil.rmtree(path)
