"""The Helm chart, with a real helm 4 (`make helm`): lint --strict and template for the default
values and the ci/ value sets, every rendered manifest validated offline against the
Kubernetes schemas (kubernetes-validate --strict), the rendered cluster config accepted by
the project's own config model, and values.schema.json refusing bad values."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from dag_common.config import TransportSettings, parse_config
from dag_common.config_imap import ImapFrontSettings
from tests.prometheus import OURS, exported_names

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "dag-replication"
VALUE_SETS = ["default", "production-values.yaml", "minimal-values.yaml"]
# The oldest Kubernetes the chart supports (Chart.yaml kubeVersion) and helm 4's own.
KUBERNETES = ["1.27", "1.35"]


def helm(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    binary = Path(os.environ.get("HELM", ROOT / ".cache" / "helm" / "helm"))
    assert binary.is_file(), f"no helm at {binary}: run `make helm` (make test does)"
    result = subprocess.run([str(binary), *args], capture_output=True, text=True, check=False)
    if check:
        assert result.returncode == 0, f"helm {' '.join(args)}:\n{result.stdout}{result.stderr}"
    return result


def values_args(value_set: str) -> list[str]:
    return [] if value_set == "default" else ["-f", str(CHART / "ci" / value_set)]


def render(value_set: str) -> str:
    return helm(
        "template", "dag", str(CHART), "--namespace", "mail", *values_args(value_set)
    ).stdout


def documents(text: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(text) if d]


def by_kind(docs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [d for d in docs if d["kind"] == kind]


@pytest.fixture(scope="module")
def rendered() -> dict[str, list[dict[str, Any]]]:
    return {v: documents(render(v)) for v in VALUE_SETS}


@pytest.mark.parametrize("value_set", VALUE_SETS)
def test_lint_strict(value_set):
    helm("lint", "--strict", str(CHART), *values_args(value_set))


def test_rendered_manifests_pass_the_kubernetes_schemas_strictly(tmp_path):
    files = []
    for value_set in VALUE_SETS:
        path = tmp_path / f"{value_set}.yaml"
        path.write_text(render(value_set))
        files.append(str(path))
    validate = Path(sys.executable).with_name("kubernetes-validate")
    for version in KUBERNETES:
        result = subprocess.run(
            [str(validate), "--strict", "--quiet", "-k", version, *files],
            capture_output=True,
            text=True,
            check=False,
        )
        out = result.stdout + result.stderr
        assert result.returncode == 0 and "ERROR" not in out, out
        # Only the Prometheus Operator's kinds have no schema here (checked below instead).
        missing = set(re.findall(r"Couldn't find schema for kind (\w+)", out))
        assert missing <= {"ServiceMonitor", "PrometheusRule"}, out


def test_what_each_value_set_deploys(rendered):
    kinds = {v: sorted({d["kind"] for d in docs}) for v, docs in rendered.items()}
    base = {"ConfigMap", "Deployment", "PodDisruptionBudget", "Service", "StatefulSet"}
    assert set(kinds["default"]) == base | {
        "CronJob", "NetworkPolicy", "PersistentVolumeClaim", "Secret"
    }  # fmt: skip
    assert set(kinds["production-values.yaml"]) == base | {
        "CronJob", "NetworkPolicy", "PersistentVolumeClaim", "PrometheusRule", "ServiceMonitor"
    }, "etcd: no store volume; an existing token: no Secret"  # fmt: skip
    assert set(kinds["minimal-values.yaml"]) == base | {"PersistentVolumeClaim", "Secret"}
    assert len(by_kind(rendered["minimal-values.yaml"], "PodDisruptionBudget")) == 1, (
        "no PDB for a single guarantee API replica (it would block every drain)"
    )


@pytest.mark.parametrize("value_set", VALUE_SETS)
def test_every_resource_carries_the_standard_labels(rendered, value_set):
    for doc in rendered[value_set]:
        labels = doc["metadata"]["labels"]
        for key in ("name", "instance", "version", "component", "managed-by", "part-of"):
            assert f"app.kubernetes.io/{key}" in labels, (doc["kind"], key)


@pytest.mark.parametrize("value_set", VALUE_SETS)
def test_the_cluster_config_is_one_the_nodes_accept_and_names_the_pods(rendered, value_set):
    docs = rendered[value_set]
    (configmap,) = by_kind(docs, "ConfigMap")[:1]
    (service,) = [s["metadata"]["name"] for s in component(docs, "Service", "replication-node")]
    pods = {
        f"{s['metadata']['name']}-{i}"
        for s in component(docs, "StatefulSet", "replication-node")
        for i in range(s["spec"]["replicas"])
    }
    for key in ("cluster.yaml", "guarantee.yaml"):
        config = parse_config(yaml.safe_load(configmap["data"][key]), base_dir=Path("/"))
        assert {n.name for n in config.nodes} == pods
        for node in config.nodes:
            assert node.url == f"http://{node.name}.{service}.mail.svc.cluster.local:7100"
        for db in config.databases:
            assert {c.node for c in db.copies} <= pods
    client = parse_config(yaml.safe_load(configmap["data"]["cluster.yaml"]), base_dir=Path("/"))
    server = parse_config(yaml.safe_load(configmap["data"]["guarantee.yaml"]), base_dir=Path("/"))
    assert client.guarantee_api.listen.endswith(".mail.svc.cluster.local:7200"), "what mrs dials"
    assert server.guarantee_api.listen == "0.0.0.0:7200", "what the service binds"


def test_item_limits_and_the_average_window_reach_the_cluster_config(rendered):
    configs = {
        v: parse_config(
            yaml.safe_load(by_kind(docs, "ConfigMap")[0]["data"]["cluster.yaml"]),
            base_dir=Path("/"),
        )
        for v, docs in rendered.items()
    }
    default = configs["default"]
    assert default.defaults.max_item_size == 36 * 1024 * 1024, "Exchange Online's limit"
    production = configs["production-values.yaml"]
    sizes = {db.name: production.max_item_size_of(db) for db in production.databases}
    assert sizes == {"MBX-01": 36 * 1024 * 1024, "MBX-02": 150 * 1024 * 1024}
    assert production.guarantee_api.limits.average_window_time.total_seconds() == 300


def test_watch_timings_and_per_database_block_mode_reach_the_cluster_config(rendered):
    """Settings the config takes that the schema once refused: the guarantee service's
    pushed-progress timings and its longest wait, a database's synchronous copies and
    block mode."""
    cm = by_kind(rendered["production-values.yaml"], "ConfigMap")[0]
    config = parse_config(yaml.safe_load(cm["data"]["cluster.yaml"]), base_dir=Path("/"))
    api = config.guarantee_api
    assert (api.watch_heartbeat.total_seconds(), api.watch_silence.total_seconds()) == (2, 6)
    assert api.max_wait.total_seconds() == 120
    dbs = {db.name: db for db in config.databases}
    assert config.synchronous_copies_of(dbs["MBX-01"]) == 1
    assert config.block_mode_of(dbs["MBX-02"]) is False


def test_sites_are_zones_and_nodes_never_share_a_host(rendered):
    sets = {
        s["metadata"]["name"]: s
        for s in component(rendered["production-values.yaml"], "StatefulSet", "replication-node")
    }
    assert set(sets) == {"dag-redmond", "dag-dublin", "dag-sydney"}
    for name, zone in (("dag-redmond", "us-west-2a"), ("dag-dublin", "eu-west-1a")):
        spec = sets[name]["spec"]
        assert spec["serviceName"] == "dag-nodes" and spec["volumeClaimTemplates"]
        affinity = spec["template"]["spec"]["affinity"]
        (term,) = affinity["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
            "nodeSelectorTerms"
        ]
        assert term["matchExpressions"][0]["values"] == [zone]
        anti = affinity["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
        assert anti[0]["topologyKey"] == "kubernetes.io/hostname"
        spread = spec["template"]["spec"]["topologySpreadConstraints"]
        assert {c["topologyKey"] for c in spread} == {
            "topology.kubernetes.io/zone",
            "kubernetes.io/hostname",
        }
    config = yaml.safe_load(
        by_kind(rendered["production-values.yaml"], "ConfigMap")[0]["data"]["cluster.yaml"]
    )
    assert {n["site"] for n in config["nodes"]} == {"redmond", "dublin", "sydney"}
    assert config["cluster_store"] == {
        "kind": "etcd",
        "endpoints": [
            "https://etcd-0.etcd.dag.svc.cluster.local:2379",
            "https://etcd-1.etcd.dag.svc.cluster.local:2379",
        ],
        "timeout": "3s",
        "ca_file": "/etc/dag-etcd/tls/ca.crt",
        "cert_file": "/etc/dag-etcd/tls/tls.crt",
        "key_file": "/etc/dag-etcd/tls/tls.key",
        "username": "dag",
        "password_file": "/etc/dag-etcd/auth/password",
    }


def test_etcds_client_certificate_and_password_are_secrets_mounted_as_files(rendered):
    # Every pod that opens the cluster store (nodes, guarantee API, mrs workers, transports)
    # reads them as files; the password is never in the ConfigMap.
    docs = rendered["production-values.yaml"]
    pods = [d for d in docs if d["kind"] in ("StatefulSet", "Deployment")]
    assert len(pods) == 6
    for doc in pods:
        spec = doc["spec"]["template"]["spec"]
        volumes = {v["name"]: v for v in spec["volumes"]}
        assert volumes["etcd-tls"]["secret"]["secretName"] == "dag-etcd-client-tls"
        assert volumes["etcd-auth"]["secret"] == {
            "secretName": "dag-etcd-password",
            "defaultMode": 0o440,
            "items": [{"key": "etcd-password", "path": "password"}],
        }
        mounts = {m["name"]: m for m in spec["containers"][0]["volumeMounts"]}
        assert mounts["etcd-tls"] == {
            "name": "etcd-tls", "mountPath": "/etc/dag-etcd/tls", "readOnly": True
        }  # fmt: skip
        assert mounts["etcd-auth"]["mountPath"] == "/etc/dag-etcd/auth"
        assert mounts["etcd-auth"]["readOnly"] is True
    for value_set in ("default", "minimal-values.yaml"):
        for doc in rendered[value_set]:
            if doc["kind"] in ("StatefulSet", "Deployment"):
                names = {v["name"] for v in doc["spec"]["template"]["spec"]["volumes"]}
                assert not names & {"etcd-tls", "etcd-auth"}, "no etcd, no etcd Secrets"


ETCD = {"endpoints": ["https://etcd:2379"]}
BAD_ETCD = {
    "TLS with an http endpoint": (
        {"endpoints": ["https://etcd-0:2379", "http://etcd-1:2379"],
         "tls": {"existingSecret": "etcd-tls"}},
        "every clusterStore.etcd.endpoints must be https://, but http://etcd-1:2379 is not",
    ),
    "a user without its Secret": (
        {**ETCD, "auth": {"username": "dag"}},
        "auth.username is set but auth.existingSecret is not",
    ),
    "a password Secret without a user": (
        {**ETCD, "auth": {"existingSecret": "etcd-password"}},
        "auth.existingSecret is set but auth.username is not",
    ),
    "a TLS Secret used for nothing": (
        {**ETCD, "tls": {"existingSecret": "etcd-tls", "ca": False}},
        "neither tls.ca nor tls.clientCertificate",
    ),
    "etcd settings without etcd": (
        {"endpoints": [], "auth": {"username": "dag", "existingSecret": "etcd-password"}},
        "set clusterStore.etcd.endpoints too",
    ),
}  # fmt: skip


@pytest.mark.parametrize("case", BAD_ETCD)
def test_etcd_settings_that_cannot_work_are_refused_at_template_time(case, tmp_path):
    etcd, error = BAD_ETCD[case]
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump({"clusterStore": {"etcd": etcd}}))
    result = helm("template", "dag", str(CHART), "-f", str(path), check=False)
    assert result.returncode != 0, f"helm template accepted {case}"
    assert error in result.stderr, result.stderr


def test_guarantee_api_replicas_grpc_probes_and_metrics_port(rendered):
    for value_set, replicas in (("default", 2), ("production-values.yaml", 3),
                                ("minimal-values.yaml", 1)):  # fmt: skip
        (deployment,) = component(rendered[value_set], "Deployment", "guarantee-api")
        assert deployment["spec"]["replicas"] == replicas, "guaranteeApi.replicas"
        (container,) = deployment["spec"]["template"]["spec"]["containers"]
        assert container["command"] == ["guarantee-api"]
        assert container["readinessProbe"]["grpc"] == {"port": 7200}
        assert container["livenessProbe"]["grpc"] == {"port": 7200, "service": "liveness"}
        ports = {p["name"]: p["containerPort"] for p in container["ports"]}
        assert ports == {"grpc": 7200, "http-metrics": 7201}


def component(docs: list[dict[str, Any]], kind: str, name: str) -> list[dict[str, Any]]:
    return [d for d in by_kind(docs, kind) if d["metadata"]["labels"].get(
        "app.kubernetes.io/component") == name]  # fmt: skip


def test_mrs_workers_run_serve_with_their_limits_and_are_scraped(rendered):
    assert not component(rendered["default"], "Deployment", "mrs-worker"), "0 by default"
    docs = rendered["production-values.yaml"]
    (deployment,) = component(docs, "Deployment", "mrs-worker")
    assert deployment["spec"]["replicas"] == 2
    pod = deployment["spec"]["template"]
    (container,) = pod["spec"]["containers"]
    assert container["command"] == ["mrs"]
    args = container["args"]
    assert args[:3] == ["serve", "--config", "/etc/dag/cluster.yaml"]
    flags = dict(zip(args[3::2], args[4::2], strict=True))
    assert flags == {
        "--http-listen": "0.0.0.0:7301", "--grace": "30s", "--max-moves": "50",
        "--max-per-source-database": "5", "--max-per-target-database": "3",
        "--max-per-source-node": "20", "--max-per-target-node": "5",
    }  # fmt: skip
    assert pod["spec"]["terminationGracePeriodSeconds"] == 40, "the grace, and a little more"
    assert {e["name"] for e in container["env"]} == {"DG_AUTH_TOKEN"}
    # a client of the nodes and the guarantee API (their network policies let it in)
    assert pod["metadata"]["labels"]["dag-replication-client"] == "true"
    (service,) = component(docs, "Service", "mrs-worker")
    assert [p["name"] for p in service["spec"]["ports"]] == ["http-metrics"], "scraped"
    (monitor,) = by_kind(docs, "ServiceMonitor")
    assert "http-metrics" in {e["port"] for e in monitor["spec"]["endpoints"]}
    # the worker reads the cluster config every node reads: etcd here, from any host
    (config_map,) = [d for d in by_kind(docs, "ConfigMap") if "cluster.yaml" in d["data"]]
    config = parse_config(yaml.safe_load(config_map["data"]["cluster.yaml"]), base_dir=Path("/"))
    assert config.cluster_store.kind == "etcd"


def cluster_config(docs: list[dict[str, Any]], key: str = "cluster.yaml") -> dict[str, Any]:
    """The rendered cluster config, as the YAML the pods read."""
    (config_map,) = [d for d in by_kind(docs, "ConfigMap") if key in d["data"]]
    return yaml.safe_load(config_map["data"][key])


def selects(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    """Whether a matchLabels selector picks a pod with these labels."""
    return selector["matchLabels"].items() <= labels.items()


def test_transports_are_off_by_default(rendered):
    for value_set in ("default", "minimal-values.yaml"):
        docs = rendered[value_set]
        assert not [d for d in docs if d["metadata"]["labels"].get(
            "app.kubernetes.io/component") == "transport"], value_set  # fmt: skip
        for key in ("cluster.yaml", "guarantee.yaml"):
            config = cluster_config(docs, key)
            assert "transports" not in config and "transport" not in config, (
                "without transports, the config the nodes read is the one they always read"
            )


def test_the_cluster_config_names_each_transport_by_its_pods_dns_and_volume(rendered):
    docs = rendered["production-values.yaml"]
    (statefulset,) = component(docs, "StatefulSet", "transport")
    assert statefulset["spec"]["replicas"] == 2
    (headless,) = [s for s in component(docs, "Service", "transport")
                   if s["spec"].get("clusterIP") == "None"]  # fmt: skip
    assert statefulset["spec"]["serviceName"] == headless["metadata"]["name"] == "dag-transports"
    (container,) = statefulset["spec"]["template"]["spec"]["containers"]
    (mount,) = [m for m in container["volumeMounts"] if m["name"] == "data"]
    (claim,) = statefulset["spec"]["volumeClaimTemplates"]
    assert claim["metadata"]["name"] == "data", "data_dir is on the pod's own volume"
    assert claim["spec"]["resources"]["requests"]["storage"] == "50Gi"
    assert claim["spec"]["storageClassName"] == "fast-ssd"
    for key in ("cluster.yaml", "guarantee.yaml"):
        config = parse_config(cluster_config(docs, key), base_dir=Path("/"))
        assert [(t.name, t.site, t.url, str(t.data_dir)) for t in config.transports] == [
            (f"dag-transport-{i}", "redmond",
             f"http://dag-transport-{i}.dag-transports.mail.svc.cluster.local:7400",
             mount["mountPath"])
            for i in range(2)
        ]  # fmt: skip
        assert {t.name for t in config.transports} == {
            f"{statefulset['metadata']['name']}-{i}" for i in range(2)
        }, "each transport is named by its pod: `--name $(POD_NAME)`"
        assert {(t.smtp_port, t.lmtp_port) for t in config.transports} == {(2525, 2424)}
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports == {"http": 7400, "smtp": 2525, "lmtp": 2424}, "the mail listeners' ports"
    (senders,) = [s for s in component(docs, "Service", "transport")
                  if s["spec"].get("clusterIP") != "None"]  # fmt: skip
    assert {p["name"]: p["port"] for p in senders["spec"]["ports"]} == {
        "submit": 7400,
        "smtp": 2525,
        "lmtp": 2424,
    }, "an MTA reaches the listeners through the senders' Service"
    settings = parse_config(cluster_config(docs), base_dir=Path("/")).transport
    assert settings == TransportSettings(
        max_dumpster_size_per_database=225 * 1024 * 1024, message_expiration="1d"
    ), "the production overrides, and the defaults for the rest"


def test_transports_with_default_values_take_the_first_site_and_the_default_settings():
    docs = documents(helm("template", "dag", str(CHART), "--namespace", "mail",
                          "--set", "transports.replicas=2").stdout)  # fmt: skip
    config = parse_config(cluster_config(docs), base_dir=Path("/"))
    assert [(t.name, t.site) for t in config.transports] == [
        ("dag-dag-replication-transport-0", "site-a"),
        ("dag-dag-replication-transport-1", "site-a"),
    ]
    assert config.transport == TransportSettings(), "values.yaml repeats the config's defaults"
    assert {n.url for n in config.nodes}.isdisjoint({t.url for t in config.transports})


def test_a_site_named_as_the_transports_is_refused_at_template_time(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump({
        "transports": {"replicas": 1},
        "replicationNode": {"sites": [{"name": "transport", "replicas": 1}]},
        "config": {"databases": []},
    }))  # fmt: skip
    result = helm("template", "dag", str(CHART), "-f", str(path), check=False)
    assert result.returncode != 0
    assert 'a site named "transport" would share its StatefulSet and pod names' in result.stderr
    # Without transports the name is free.
    path.write_text(yaml.safe_dump({
        "replicationNode": {"sites": [{"name": "transport", "replicas": 1}]},
        "config": {"databases": []},
    }))  # fmt: skip
    helm("template", "dag", str(CHART), "-f", str(path))


def test_the_transport_pods_serve_with_the_token_probes_and_a_grace(rendered):
    docs = rendered["production-values.yaml"]
    (statefulset,) = component(docs, "StatefulSet", "transport")
    pod = statefulset["spec"]["template"]
    (container,) = pod["spec"]["containers"]
    assert container["command"] == ["transport"]
    assert container["args"] == [
        "serve", "--config", "/etc/dag/cluster.yaml", "--name", "$(POD_NAME)",
        "--listen-host", "0.0.0.0",
    ]  # fmt: skip
    env = {e["name"]: e["valueFrom"] for e in container["env"]}
    assert env["POD_NAME"] == {"fieldRef": {"fieldPath": "metadata.name"}}
    assert env["DG_AUTH_TOKEN"]["secretKeyRef"] == {"name": "dag-cluster-token",
                                                    "key": "cluster-token"}  # fmt: skip
    assert container["ports"] == [
        {"name": name, "containerPort": port, "protocol": "TCP"}
        for name, port in (("http", 7400), ("smtp", 2525), ("lmtp", 2424))
    ]
    for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
        assert container[probe]["httpGet"] == {"path": "/healthz", "port": "http"}, probe
    assert container["resources"]["requests"] == {"cpu": "100m", "memory": "128Mi"}
    assert pod["spec"]["terminationGracePeriodSeconds"] == 30
    assert "checksum/config" in pod["metadata"]["annotations"], "it reads its config once"
    assert {v["name"] for v in pod["spec"]["volumes"]} >= {"config", "etcd-tls", "etcd-auth"}
    (pdb,) = component(docs, "PodDisruptionBudget", "transport")
    assert pdb["spec"]["maxUnavailable"] == 1
    assert selects(pdb["spec"]["selector"], pod["metadata"]["labels"])
    services = {s["metadata"]["name"]: s["spec"] for s in component(docs, "Service", "transport")}
    assert set(services) == {"dag-transports", "dag-transport"}
    headless, submit = services["dag-transports"], services["dag-transport"]
    assert headless["clusterIP"] == "None" and headless["publishNotReadyAddresses"] is True
    assert headless["ports"] == [{"name": "http", "port": 7400, "targetPort": "http",
                                  "appProtocol": "http"}]  # fmt: skip
    assert submit["type"] == "ClusterIP"
    assert submit["ports"][0] == {"name": "submit", "port": 7400, "targetPort": "http",
                                  "appProtocol": "http"}  # fmt: skip
    for spec in services.values():
        assert selects({"matchLabels": spec["selector"]}, pod["metadata"]["labels"])


def test_transports_are_scraped_once_and_the_network_lets_them_and_the_nodes_talk(rendered):
    docs = rendered["production-values.yaml"]
    (monitor,) = by_kind(docs, "ServiceMonitor")
    scraped = {e["port"] for e in monitor["spec"]["endpoints"]}
    services = component(docs, "Service", "transport")
    named = {s["metadata"]["name"]: {p["name"] for p in s["spec"]["ports"]} for s in services}
    assert all(selects(monitor["spec"]["selector"], s["metadata"]["labels"]) for s in services)
    assert [n for n, ports in named.items() if ports & scraped] == ["dag-transports"], (
        "each transport scraped through one Service, not twice"
    )
    transport = component(docs, "StatefulSet", "transport")[0]["spec"]["template"]["metadata"]
    node = component(docs, "StatefulSet", "replication-node")[0]["spec"]["template"]["metadata"]
    policies = {p["metadata"]["labels"]["app.kubernetes.io/component"]: p["spec"]
                for p in by_kind(docs, "NetworkPolicy")}  # fmt: skip

    def admits(policy: dict[str, Any], labels: dict[str, str], port: str) -> bool:
        return any(
            any("podSelector" in f and "namespaceSelector" not in f
                and selects(f["podSelector"], labels) for f in rule["from"])
            and {"port": port, "protocol": "TCP"} in rule["ports"]
            for rule in policy["ingress"]
        )  # fmt: skip

    assert selects(policies["transport"]["podSelector"], transport["labels"])
    assert admits(policies["transport"], node["labels"], "http"), "redelivery: nodes to transports"
    assert admits(policies["replication-node"], transport["labels"], "http"), "delivery"
    assert admits(policies["transport"], {"dag-replication-client": "true"}, "http"), "senders"
    assert not admits(policies["transport"], {"app": "anything-else"}, "http")
    (prometheus,) = [f for rule in policies["replication-node"]["ingress"]
                     for f in rule["from"] if "namespaceSelector" in f]  # fmt: skip
    assert any(prometheus in rule["from"] for rule in policies["transport"]["ingress"]), (
        "Prometheus scrapes the transports as it scrapes the nodes"
    )


@pytest.mark.parametrize("value_set", VALUE_SETS)
def test_pods_run_restricted(rendered, value_set):
    for doc in rendered[value_set]:
        if doc["kind"] not in ("StatefulSet", "Deployment", "CronJob"):
            continue
        if doc["kind"] == "CronJob":
            spec = doc["spec"]["jobTemplate"]["spec"]["template"]["spec"]
        else:
            spec = doc["spec"]["template"]["spec"]
        assert spec["securityContext"]["runAsNonRoot"] is True
        assert spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
        assert spec["automountServiceAccountToken"] is False
        for container in spec["containers"]:
            sc = container["securityContext"]
            assert sc["readOnlyRootFilesystem"] is True
            assert sc["allowPrivilegeEscalation"] is False
            assert sc["capabilities"]["drop"] == ["ALL"]
            assert container["resources"]["requests"], "resources requested"
            assert container["command"][0] in {"replication-node", "guarantee-api", "spark-metrics",
                                                "mrs", "transport", "imap-front"}  # fmt: skip


def test_the_token_secret_is_generated_or_existing(rendered):
    (secret,) = by_kind(rendered["default"], "Secret")
    assert len(secret["data"]["token"]) >= 48
    statefulset = by_kind(rendered["production-values.yaml"], "StatefulSet")[0]
    env = statefulset["spec"]["template"]["spec"]["containers"][0]["env"]
    token = next(e for e in env if e["name"] == "DG_AUTH_TOKEN")
    assert token["valueFrom"]["secretKeyRef"] == {
        "name": "dag-cluster-token",
        "key": "cluster-token",
    }


def test_monitoring_resources_ship_the_tested_rules_and_dashboard(rendered):
    docs = rendered["production-values.yaml"]
    (rule,) = by_kind(docs, "PrometheusRule")
    shipped = yaml.safe_load((CHART / "files" / "alerts.yaml").read_text())
    assert rule["spec"] == shipped, "the PrometheusRule is files/alerts.yaml, unchanged"
    assert rule["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    (monitor,) = by_kind(docs, "ServiceMonitor")
    assert monitor["spec"]["jobLabel"] == "app.kubernetes.io/component"
    assert {e["port"] for e in monitor["spec"]["endpoints"]} == {"http", "http-metrics"}
    dashboard = next(
        d for d in by_kind(docs, "ConfigMap") if d["metadata"]["name"] == "dag-dashboard"
    )
    assert dashboard["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert json.loads(dashboard["data"]["dag-replication.json"])["uid"] == "dag-replication"
    (cronjob,) = by_kind(docs, "CronJob")
    args = cronjob["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args[0] == "aggregate" and args[-2:] == [
        "--master", "spark://spark-master.spark.svc.cluster.local:7077"
    ]  # fmt: skip


def test_the_dashboard_queries_only_metrics_the_code_exports(tmp_path):
    dashboard = json.loads((CHART / "files" / "grafana" / "dag-replication.json").read_text())
    exprs = [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]
    assert len(exprs) >= 20
    used = {re.sub(r"_(bucket|sum|count)$", "", m) for e in exprs for m in OURS.findall(e)}
    assert any(m.startswith("transport_") for m in used), "the transport's row"
    names = {re.sub(r"_total$", "", n) for n in exported_names(tmp_path)}
    missing = {re.sub(r"_total$", "", n) for n in used} - names
    assert not missing, sorted(missing)


IMAP_VALUES = {
    "tls": {"enabled": True, "existingSecret": "dag-tls"},
    "imapFront": {"replicas": 3, "users": {"existingSecret": "dag-imap-users"},
                  "service": {"type": "LoadBalancer"}},
    "metrics": {"serviceMonitor": {"enabled": True}},
}  # fmt: skip


@pytest.fixture(scope="module")
def imap(tmp_path_factory) -> list[dict[str, Any]]:
    path = tmp_path_factory.mktemp("imap") / "imap.yaml"
    path.write_text(yaml.safe_dump(IMAP_VALUES))
    return documents(
        helm("template", "dag", str(CHART), "--namespace", "mail", "-f", str(path)).stdout
    )


def test_imap_fronts_are_off_by_default(rendered):
    for value_set, docs in rendered.items():
        assert not [d for d in docs if d["metadata"]["labels"].get(
            "app.kubernetes.io/component") == "imap-front"], value_set  # fmt: skip
        assert "imap.yaml" not in by_kind(docs, "ConfigMap")[0]["data"]


def test_the_imap_front_is_a_deployment_serving_its_own_config_copy(imap, tmp_path):
    (deployment,) = component(imap, "Deployment", "imap-front")
    assert deployment["spec"]["replicas"] == 3, "stateless: any number"
    pod = deployment["spec"]["template"]
    (container,) = pod["spec"]["containers"]
    assert container["command"] == ["imap-front"]
    assert container["args"] == ["serve", "--config", "/etc/dag/imap.yaml", "--name",
                                 "$(POD_NAME)", "--metrics-port", "7500"]  # fmt: skip
    env = {e["name"]: e["valueFrom"] for e in container["env"]}
    assert env["DG_AUTH_TOKEN"]["secretKeyRef"]["name"] == "dag-dag-replication-token"
    assert container["ports"] == [
        {"name": name, "containerPort": port, "protocol": "TCP"}
        for name, port in (("imap", 1143), ("imaps", 1993), ("imap-metrics", 7500))
    ], "unprivileged ports in the pod (capabilities dropped); 143 and 993 on the Service"
    for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
        assert container[probe]["httpGet"] == {"path": "/healthz", "port": "imap-metrics"}
    assert "checksum/config" in pod["metadata"]["annotations"], "it reads its config once"
    volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
    mounts = {m["name"]: m for m in container["volumeMounts"]}
    assert volumes["imap-users"]["secret"]["secretName"] == "dag-imap-users"
    assert volumes["imap-users"]["secret"]["items"] == [{"key": "users.yaml",
                                                         "path": "users.yaml"}]  # fmt: skip
    assert mounts["imap-users"] == {
        "name": "imap-users",
        "mountPath": "/etc/dag-imap-users",
        "readOnly": True,
    }, "whole: an update reaches the fronts"
    assert "imap-tls" not in volumes, "without imapFront.tls: the chart's pair"
    (configmap,) = by_kind(imap, "ConfigMap")
    config = parse_config(yaml.safe_load(configmap["data"]["imap.yaml"]), base_dir=Path("/"))
    assert (config.imap.host, config.imap.port, config.imap.tls_port) == ("0.0.0.0", 1143, 1993)
    assert str(config.imap.users_file) == "/etc/dag-imap-users/users.yaml"
    defaults = ImapFrontSettings().model_dump(exclude={"host", "port", "tls_port", "users_file"})
    assert config.imap.model_dump(exclude={"host", "port", "tls_port", "users_file"}) == (
        defaults
    ), "values.yaml repeats the config's defaults"
    assert config.tls is not None and str(config.tls.cert_file) == "/etc/dag-tls/server/tls.crt"
    assert "imap" not in yaml.safe_load(configmap["data"]["cluster.yaml"]), (
        "the nodes' config is the one they always read"
    )
    (pdb,) = component(imap, "PodDisruptionBudget", "imap-front")
    assert selects(pdb["spec"]["selector"], pod["metadata"]["labels"])
    path = tmp_path / "imap.yaml"
    path.write_text(yaml.safe_dump_all(imap))
    validate = Path(sys.executable).with_name("kubernetes-validate")
    for version in KUBERNETES:
        result = subprocess.run([str(validate), "--strict", "--quiet", "-k", version, str(path)],
                                capture_output=True, text=True, check=False)  # fmt: skip
        out = result.stdout + result.stderr
        assert result.returncode == 0 and "ERROR" not in out, out


def test_the_imap_service_answers_143_and_993_and_prometheus_scrapes_each_front_once(imap):
    pod = component(imap, "Deployment", "imap-front")[0]["spec"]["template"]
    services = {s["metadata"]["name"]: s["spec"] for s in component(imap, "Service", "imap-front")}
    assert set(services) == {"dag-dag-replication-imap", "dag-dag-replication-imap-metrics"}
    clients, metrics = services["dag-dag-replication-imap"], services[
        "dag-dag-replication-imap-metrics"]  # fmt: skip
    assert clients["type"] == "LoadBalancer"
    assert clients["ports"] == [
        {"name": "imap", "port": 143, "targetPort": "imap", "appProtocol": "imap"},
        {"name": "imaps", "port": 993, "targetPort": "imaps", "appProtocol": "imaps"},
    ]
    assert metrics["clusterIP"] == "None"
    for spec in services.values():
        assert selects({"matchLabels": spec["selector"]}, pod["metadata"]["labels"])
    (monitor,) = by_kind(imap, "ServiceMonitor")
    endpoints = {e["port"]: e for e in monitor["spec"]["endpoints"]}
    assert endpoints["imap-metrics"] == {"port": "imap-metrics", "path": "/metrics",
                                         "interval": "30s"}, "plain HTTP"  # fmt: skip
    scraped = [n for n, s in services.items() if {p["name"] for p in s["ports"]} & set(endpoints)]
    assert scraped == ["dag-dag-replication-imap-metrics"], "once, and not on the LoadBalancer"
    assert monitor["spec"]["jobLabel"] == "app.kubernetes.io/component", "job=imap-front"
    policies = {p["metadata"]["labels"]["app.kubernetes.io/component"]: p["spec"]
                for p in by_kind(imap, "NetworkPolicy")}  # fmt: skip
    front = policies["imap-front"]
    assert selects(front["podSelector"], pod["metadata"]["labels"])
    (clients_rule,) = [r for r in front["ingress"] if "from" not in r]
    assert clients_rule["ports"] == [
        {"port": "imap", "protocol": "TCP"},
        {"port": "imaps", "protocol": "TCP"},
    ], "mail clients"
    (prometheus,) = [f for rule in policies["replication-node"]["ingress"]
                     for f in rule["from"] if "namespaceSelector" in f]  # fmt: skip
    assert {"from": [prometheus], "ports": [{"port": "imap-metrics", "protocol": "TCP"}]} in (
        front["ingress"]
    ), "metrics from Prometheus only"
    # The nodes let the fronts in (this release's pods).
    (release,) = [f for f in policies["replication-node"]["ingress"][0]["from"]
                  if "podSelector" in f and "app.kubernetes.io/instance" in
                  f["podSelector"]["matchLabels"]]  # fmt: skip
    assert selects(release["podSelector"], pod["metadata"]["labels"])


def test_an_imap_front_with_its_own_certificate_serves_it(tmp_path):
    path = tmp_path / "own.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                **IMAP_VALUES,
                "imapFront": {
                    **IMAP_VALUES["imapFront"],
                    "tlsPort": 0,
                    "tls": {"existingSecret": "imap-public"},
                },
            }
        )
    )
    docs = documents(helm("template", "dag", str(CHART), "-f", str(path)).stdout)
    (configmap,) = by_kind(docs, "ConfigMap")
    config = parse_config(yaml.safe_load(configmap["data"]["imap.yaml"]), base_dir=Path("/"))
    assert config.tls is not None and str(config.tls.cert_file) == "/etc/dag-imap-tls/tls.crt"
    assert config.imap.tls_port is None, "tlsPort 0: no implicit-TLS port"
    pod = component(docs, "Deployment", "imap-front")[0]["spec"]["template"]
    volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
    assert volumes["imap-tls"]["secret"]["secretName"] == "imap-public"
    (service,) = [s for s in component(docs, "Service", "imap-front")
                  if s["metadata"]["name"].endswith("-imap")]  # fmt: skip
    assert [p["name"] for p in service["spec"]["ports"]] == ["imap"]


IMAP_REFUSED = {
    "an IMAP front without TLS": (
        {"imapFront": {"replicas": 1, "users": {"existingSecret": "u"}}},
        "imapFront.replicas > 0 needs tls.enabled",
    ),
    "an IMAP front without its users": (
        {"imapFront": {"replicas": 1}, "tls": {"enabled": True, "existingSecret": "t"}},
        "imapFront.replicas > 0 needs imapFront.users.existingSecret",
    ),
}


@pytest.mark.parametrize("case", IMAP_REFUSED)
def test_an_imap_front_that_cannot_work_is_refused_at_template_time(case, tmp_path):
    values, message = IMAP_REFUSED[case]
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(values))
    result = helm("template", "dag", str(CHART), "-f", str(path), check=False)
    assert result.returncode != 0 and message in result.stderr, result.stderr


BAD_VALUES = {
    "a port out of range for the front": ({"imapFront": {"port": 70000}}, "/imapFront/port"),
    "an IMAP limit the config lacks": (
        {"imapFront": {"config": {"max_commands": 3}}},
        "max_commands",
    ),
    "no argon2 verification at all": (
        {"imapFront": {"config": {"login_concurrency": 0}}},
        "/imapFront/config/login_concurrency",
    ),
    "an IMAP Service type Kubernetes lacks": (
        {"imapFront": {"service": {"type": "Public"}}},
        "/imapFront/service/type",
    ),
    "a users key with a slash": (
        {"imapFront": {"users": {"existingSecretKey": "a/b"}}},
        "/imapFront/users/existingSecretKey",
    ),
    "negative workers": ({"mrsWorkers": {"replicas": -1}}, "/mrsWorkers/replicas"),
    "a string for the transports": ({"transports": {"replicas": "2"}}, "/transports/replicas"),
    "a transport setting the config lacks": (
        {"transports": {"config": {"max_retries": 3}}},
        "max_retries",
    ),
    "a transport duration that is not one": (
        {"transports": {"config": {"message_expiration": "two days"}}},
        "/transports/config/message_expiration",
    ),
    "no tries before the poison queue": (
        {"transports": {"config": {"max_tries": 0}}},
        "/transports/config/max_tries",
    ),
    "a transport site that is not a DNS label": (
        {"transports": {"site": "Site_A"}},
        "/transports/site",
    ),
    "an emptyDir for acknowledged mail": (
        {"transports": {"persistence": {"size": ""}}},
        "/transports/persistence/size",
    ),
    "a worker limit of none": (
        {"mrsWorkers": {"limits": {"perTargetDatabase": 0}}},
        "/mrsWorkers/limits/perTargetDatabase",
    ),
    "a string for a count": ({"guaranteeApi": {"replicas": "3"}}, "/guaranteeApi/replicas"),
    "no replicas at all": ({"guaranteeApi": {"replicas": 0}}, "/guaranteeApi/replicas"),
    "an unknown dial": (
        {"config": {"defaults": {"auto_database_mount_dial": "MostlyLossless"}}},
        "/config/defaults/auto_database_mount_dial",
    ),
    "an unknown constraint": (
        {
            "config": {
                "databases": [
                    {
                        "name": "DB1",
                        "data_move_replication_constraint": "ThirdCopy",
                        "copies": [{"node": "site-a-0", "activation_preference": 1}],
                    }
                ]
            }
        },
        "data_move_replication_constraint",
    ),
    "an unknown key": ({"guaranteeApi": {"replica": 2}}, "replica"),
    "a negative synchronous copy count": (
        {"config": {"defaults": {"synchronous_copies": -1}}},
        "synchronous_copies",
    ),
    "a bad lease": ({"config": {"defaults": {"lease_ttl": "a while"}}}, "lease_ttl"),
    "an item limit past 150 MiB": (
        {"config": {"defaults": {"max_item_size": 200 * 1024 * 1024}}},
        "/config/defaults/max_item_size",
    ),
    "an item limit that is not a size": (
        {"config": {"defaults": {"max_item_size": "big"}}},
        "/config/defaults/max_item_size",
    ),
    "a watch that is not a flag": (
        {"guaranteeApi": {"config": {"watch": "sometimes"}}},
        "/guaranteeApi/config/watch",
    ),
    "a negative synchronous count for one database": (
        {
            "config": {
                "databases": [
                    {
                        "name": "DB1",
                        "synchronous_copies": -1,
                        "copies": [{"node": "site-a-0", "activation_preference": 1}],
                    }
                ]
            }
        },
        "synchronous_copies",
    ),
    "a bad average window": (
        {"guaranteeApi": {"config": {"limits": {"average_window_time": "a while"}}}},
        "average_window_time",
    ),
    "root": ({"podSecurityContext": {"runAsNonRoot": False}}, "/podSecurityContext/runAsNonRoot"),
    "a bad duration": ({"config": {"defaults": {"failover_after": "soon"}}}, "failover_after"),
    "an unknown etcd setting": (
        {"clusterStore": {"etcd": {"endpoints": ["https://etcd:2379"], "password": "x"}}},
        "password",
    ),
    "a bad etcd timeout": (
        {"clusterStore": {"etcd": {"endpoints": ["https://etcd:2379"], "timeout": "soon"}}},
        "/clusterStore/etcd/timeout",
    ),
    "a site that is not a DNS label": (
        {"replicationNode": {"sites": [{"name": "Site_A", "replicas": 1}]}},
        "/replicationNode/sites",
    ),
}


@pytest.mark.parametrize("case", BAD_VALUES)
def test_values_schema_refuses_bad_values(case, tmp_path):
    values, where = BAD_VALUES[case]
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(values))
    for command in (["template", "dag"], ["lint", "--strict"]):
        result = helm(*command, str(CHART), "-f", str(path), check=False)
        assert result.returncode != 0, f"helm {command[0]} accepted {case}"
        assert where in result.stdout + result.stderr, result.stdout + result.stderr


def test_a_copy_on_no_node_is_refused_with_the_nodes_there_are(tmp_path):
    path = tmp_path / "bad.yaml"
    copies = [{"node": "site-c-0", "activation_preference": 1}]
    path.write_text(yaml.safe_dump({"config": {"databases": [{"name": "DB1", "copies": copies}]}}))
    result = helm("template", "dag", str(CHART), "-f", str(path), check=False)
    assert result.returncode != 0
    assert 'copy on "site-c-0", which is no node' in result.stderr
    assert "site-a-0, site-a-1, site-b-0" in result.stderr
