"""The chart's least privilege (auth.roles) and TLS with node identity (tls): off by default,
rendering what it always rendered; on, each component presents its own credential, each pod
mounts exactly the credentials it presents or accepts (a service reads every credential its
config names), no pod gets the cluster token, and each process finds the certificate files
its config names.  Rendered by the real helm, validated strictly, read by the project's own
config model."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path, PurePosixPath
from typing import Any

import pytest
import yaml

from dag_common.config import ClusterConfig, CredentialConfig, parse_config
from dag_common.credentials import Role
from tests.deploy.test_chart import CHART, KUBERNETES, by_kind, component, documents, helm

ROLES_SET = CHART / "ci" / "least-privilege-values.yaml"
COMPONENTS = ("replication-node", "guarantee-api", "mrs-worker", "transport", "imap-front")
# README "Credentials, roles and node identity": what each credential holds, which one
# each component presents, and the credentials each service must accept to be called.
ROLES = {
    "nodes": {Role.REPLICATION, Role.MONITOR},
    "guarantee": {Role.MONITOR},
    "movers": {Role.MOVER, Role.STORE, Role.MONITOR},
    "transports": {Role.STORE, Role.MONITOR},
    "operators": {Role.OPERATOR, Role.MONITOR},
}
PRESENTS = {
    "replication-node": "nodes",
    "guarantee-api": "guarantee",
    "mrs-worker": "movers",
    "transport": "transports",
    "imap-front": "transports",  # store and monitor, as a transport's
}
ACCEPTS = {
    "replication-node": set(ROLES),
    "guarantee-api": {"movers"},
    "mrs-worker": set(),
    "transport": {"nodes", "transports"},
    "imap-front": set(),  # mail clients log in with the users file; /metrics takes none
}
MOUNTS = {name: ACCEPTS[name] | {PRESENTS[name]} for name in COMPONENTS}
READS = {"replication-node": "cluster.yaml", "guarantee-api": "guarantee.yaml",
         "transport": "transport.yaml", "imap-front": "imap.yaml"}  # fmt: skip
# ci/least-privilege-values.yaml renames the operators' credential and brings its Secret.
NAMES = {"operators": "ops"}
SECRETS = {"operators": ("dag-operators", "ops-secret")}


def template(*args: str) -> list[dict[str, Any]]:
    return documents(helm("template", "dag", str(CHART), "--namespace", "mail", *args).stdout)


@pytest.fixture(scope="module")
def default() -> list[dict[str, Any]]:
    return template("--set", "transports.replicas=2", "--set", "mrsWorkers.replicas=1",
                    "--set", "metrics.serviceMonitor.enabled=true")  # fmt: skip


@pytest.fixture(scope="module")
def locked() -> list[dict[str, Any]]:
    return template("-f", str(ROLES_SET))


def workloads(docs: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """Each component's pod templates (a StatefulSet per site for the nodes)."""
    return {
        name: [
            d["spec"]["template"]
            for kind in ("StatefulSet", "Deployment")
            for d in component(docs, kind, name)
        ]
        for name in COMPONENTS
    }


def container(pod: dict[str, Any]) -> dict[str, Any]:
    (only,) = pod["spec"]["containers"]
    return only


def env(pod: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container(pod)["env"]}


def volumes(pod: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {v["name"]: v for v in pod["spec"]["volumes"]}


def mounts(pod: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {m["name"]: m for m in container(pod)["volumeMounts"]}


def config_of(docs: list[dict[str, Any]], pod: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """The config file a pod's process reads (its --config), as rendered."""
    args = container(pod)["args"]
    path = PurePosixPath(args[args.index("--config") + 1])
    assert path.parent == PurePosixPath("/etc/dag"), "the ConfigMap's mount"
    (config_map,) = [d for d in by_kind(docs, "ConfigMap") if "cluster.yaml" in d["data"]]
    return path.name, yaml.safe_load(config_map["data"][path.name])


def parsed(config: dict[str, Any]) -> ClusterConfig:
    return parse_config(config, base_dir=Path("/"))


def mounted_credentials(pod: dict[str, Any]) -> set[str]:
    return {m["mountPath"].rsplit("/", 1)[1] for name, m in mounts(pod).items()
            if name.startswith("credential-")}  # fmt: skip


def projected(pod: dict[str, Any]) -> dict[str, tuple[str, str]]:
    """What the `tls` volume lays out under /etc/dag-tls: path -> (Secret, key)."""
    return {
        item["path"]: (source["secret"]["name"], item["key"])
        for source in volumes(pod)["tls"]["projected"]["sources"]
        for item in source["secret"]["items"]
    }


def test_off_by_default_every_pod_presents_the_cluster_token_as_before(default):
    pods = workloads(default)
    assert not pods.pop("imap-front"), "an IMAP front needs TLS: none without it"
    assert all(pods.values()), "every other component deployed"
    for name, templates in pods.items():
        for pod in templates:
            variables = env(pod)
            assert "DG_CREDENTIAL_FILE" not in variables, name
            assert variables["DG_AUTH_TOKEN"] == {"secretKeyRef": {
                "name": "dag-dag-replication-token", "key": "token"}}, name  # fmt: skip
            assert not {v for v in volumes(pod) if v.startswith("credential-") or v == "tls"}
            _, config = config_of(default, pod)
            assert "credentials" not in config and "tls" not in config, name
            assert "auth_token_file" not in config, "the token comes from the environment"
    secrets = [s["metadata"]["name"] for s in by_kind(default, "Secret")]
    assert secrets == ["dag-dag-replication-token"]
    (config_map,) = [d for d in by_kind(default, "ConfigMap") if "cluster.yaml" in d["data"]]
    assert set(config_map["data"]) == {"cluster.yaml", "guarantee.yaml"}
    (guarantee,) = pods["guarantee-api"]
    assert container(guarantee)["readinessProbe"]["grpc"] == {"port": 7200}
    assert container(guarantee)["args"] == ["serve", "--config", "/etc/dag/guarantee.yaml"]
    for pod in pods["replication-node"] + pods["transport"]:
        assert "scheme" not in container(pod)["readinessProbe"]["httpGet"]
    (monitor,) = by_kind(default, "ServiceMonitor")
    assert all("scheme" not in e for e in monitor["spec"]["endpoints"])


def test_off_explicitly_renders_what_the_defaults_render():
    def text(*args: str) -> str:
        out = helm("template", "dag", str(CHART), "--namespace", "mail", *args).stdout
        # The generated token is random on every render (lookup finds none offline).
        return "\n".join(line for line in out.splitlines() if not line.startswith("  token: "))

    off = ["auth.roles.enabled=false", "tls.enabled=false", "tls.nodeIdentity=false",
           "auth.roles.credentials.nodes.name=n"]  # fmt: skip
    assert text("--set", ",".join(off)) == text()


def test_each_component_presents_its_own_credential_and_never_the_cluster_token(locked):
    for name, templates in workloads(locked).items():
        assert templates, name
        for pod in templates:
            variables = env(pod)
            assert "DG_AUTH_TOKEN" not in variables, name
            own = PRESENTS[name]
            assert variables["DG_CREDENTIAL_FILE"] == f"/etc/dag-credentials/{own}/secret"
            assert own in mounted_credentials(pod), f"{name} cannot read what it presents"
            _, config = config_of(locked, pod)
            assert "auth_token_file" not in config, name
    assert "operators" not in PRESENTS.values(), "the operators' credential is for people"
    secrets = {s["metadata"]["name"]: s for s in by_kind(locked, "Secret")}
    assert "dag-dag-replication-token" not in secrets, "no cluster token made"
    assert set(secrets) == {f"dag-dag-replication-credential-{key}"
                            for key in ("nodes", "guarantee", "movers", "transports")}, (
        "one Secret per credential, but none for the operators' existing one"
    )  # fmt: skip
    for secret in secrets.values():
        assert len(secret["data"]["secret"]) >= 64, "48 characters, base64"
        assert secret["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"


def test_each_pod_mounts_exactly_the_credentials_it_presents_or_accepts(locked):
    for name, templates in workloads(locked).items():
        for pod in templates:
            assert mounted_credentials(pod) == MOUNTS[name], name
            for volume_name, mount in mounts(pod).items():
                if not volume_name.startswith("credential-"):
                    continue
                assert mount["readOnly"] is True and "subPath" not in mount, (
                    "whole and read-only: Kubernetes updates it in place, the services reload"
                )
                key = mount["mountPath"].rsplit("/", 1)[1]
                secret = volumes(pod)[volume_name]["secret"]
                name_and_key = SECRETS.get(key, (f"dag-dag-replication-credential-{key}", "secret"))
                assert secret["secretName"] == name_and_key[0]
                assert secret["items"] == [{"key": name_and_key[1], "path": "secret"}]
    pods = workloads(locked)
    assert "operators" not in mounted_credentials(pods["transport"][0])
    assert "nodes" not in mounted_credentials(pods["mrs-worker"][0])


def accepted(docs: list[dict[str, Any]], pod: dict[str, Any]) -> dict[str, CredentialConfig]:
    """The credentials a pod's config names, by the directory each one's file is in."""
    credentials = parsed(config_of(docs, pod)[1]).credentials
    assert all(c.file is not None and c.env is None for c in credentials), "files, reloaded"
    return {PurePosixPath(str(c.file)).parent.name: c for c in credentials}


def test_each_service_names_only_credentials_its_pod_can_read(locked):
    """A service loads every credential of its config at start and on every reload: one it
    cannot read stops it.  (`mrs serve` accepts no credential: it reads cluster.yaml and
    loads none of them.)"""
    for name, key in READS.items():
        for pod in workloads(locked)[name]:
            assert config_of(locked, pod)[0] == key, name
            credentials = accepted(locked, pod)
            assert set(credentials) == ACCEPTS[name], name
            assert set(credentials) <= mounted_credentials(pod), name
            for directory, c in credentials.items():
                assert str(c.file) == f"/etc/dag-credentials/{directory}/secret"
                assert c.name == NAMES.get(directory, directory)
                assert set(c.roles) == ROLES[directory], c.name


def test_every_caller_is_accepted_with_the_role_its_calls_need(locked):
    pods = workloads(locked)
    nodes, guarantee, transport = (
        {key: set(c.roles) for key, c in accepted(locked, pods[name][0]).items()}
        for name in ("replication-node", "guarantee-api", "transport")
    )
    for caller, own in PRESENTS.items():
        assert Role.MONITOR in nodes[own], f"{caller} finds the active on the nodes"
    assert Role.REPLICATION in nodes["nodes"] and Role.OPERATOR in nodes["operators"]
    assert Role.STORE in nodes["transports"], "delivery"
    assert Role.MOVER in nodes["movers"]
    assert set(guarantee) == {"movers"} and Role.MOVER in guarantee["movers"], "Check* calls"
    assert Role.REPLICATION in transport["nodes"], "a node asks a transport to redeliver"
    assert Role.STORE in transport["transports"], "senders"
    assert "operators" not in transport and "operators" not in guarantee


def test_node_identity_gives_each_process_the_certificate_its_config_names(locked):
    pods = workloads(locked)
    config = parsed(config_of(locked, pods["replication-node"][0])[1])
    assert config.tls is not None and config.tls.client_ca_file is not None
    assert all(n.url.startswith("https://") for n in config.nodes + config.transports)
    for templates in pods.values():
        for pod in templates:
            assert mounts(pod)["tls"] == {"name": "tls", "mountPath": "/etc/dag-tls",
                                          "readOnly": True}  # fmt: skip
            files = {f"/etc/dag-tls/{path}": source for path, source in projected(pod).items()}
            assert files["/etc/dag-tls/server/ca.crt"] == ("dag-tls", "ca.crt")
            assert str(config.tls.client_ca_file) in files
    for statefulset in component(locked, "StatefulSet", "replication-node"):
        pod = statefulset["spec"]["template"]
        files = projected(pod)
        names = [f"{statefulset['metadata']['name']}-{i}"
                 for i in range(statefulset["spec"]["replicas"])]  # fmt: skip
        for node in names:  # what `--node $(POD_NAME)` reads: its own Secret
            own = config.tls.for_node(node)
            for path, key in ((own.cert_file, "tls.crt"), (own.key_file, "tls.key")):
                relative = str(path.relative_to("/etc/dag-tls"))
                assert files[relative] == (f"dag-dag-replication-tls-{node}", key)
        assert {p.split("/")[1] for p in files if p.startswith("pod/")} == set(names), (
            "a site's pods, and no other site's"
        )
        assert "server/tls.key" not in files, "a node serves and presents its own pair"
        for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
            assert container(pod)[probe]["httpGet"]["scheme"] == "HTTPS"
    (transports,) = pods["transport"]
    for i in range(2):
        own = config.tls.for_node(f"dag-dag-replication-transport-{i}")
        assert projected(transports)[str(own.key_file.relative_to("/etc/dag-tls"))] == (
            "dag-tls", "tls.key")  # fmt: skip
    (worker,) = pods["mrs-worker"]
    assert projected(worker)[str(config.tls.cert_file.relative_to("/etc/dag-tls"))] == (
        "dag-tls", "tls.crt"), "mrs serve reads cert_file as written, {node} and all"  # fmt: skip
    assert container(worker)["readinessProbe"]["httpGet"]["scheme"] == "HTTPS"
    (guarantee,) = pods["guarantee-api"]
    args = container(guarantee)["args"]
    for flag, key in (("--tls-cert", "tls.crt"), ("--tls-key", "tls.key")):
        path = args[args.index(flag) + 1]
        assert projected(guarantee)[path.removeprefix("/etc/dag-tls/")] == ("dag-tls", key)
    for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
        got = container(guarantee)[probe]
        assert "grpc" not in got, "the kubelet's gRPC probe speaks no TLS"
        assert got["httpGet"]["scheme"] == "HTTPS" and got["httpGet"]["port"] == "http-metrics"
    (front,) = pods["imap-front"]
    own = parsed(config_of(locked, front)[1]).tls
    assert own is not None and own.client_ca_file is None, "it calls the nodes presenting none"
    assert (str(own.cert_file), str(own.key_file)) == ("/etc/dag-imap-tls/tls.crt",
                                                       "/etc/dag-imap-tls/tls.key")  # fmt: skip
    assert volumes(front)["imap-tls"]["secret"]["secretName"] == "dag-imap-tls"
    assert mounts(front)["imap-tls"]["mountPath"] == "/etc/dag-imap-tls"
    assert projected(front) == {"server/ca.crt": ("dag-tls", "ca.crt")}, "no pair of the cluster's"
    (monitor,) = by_kind(locked, "ServiceMonitor")
    schemes = {e["port"]: e.get("scheme") for e in monitor["spec"]["endpoints"]}
    assert schemes.pop("imap-metrics") is None, "the front's metrics listener is plain HTTP"
    assert set(schemes.values()) == {"https"}


def test_tls_without_node_identity_serves_one_certificate_and_asks_for_none():
    docs = template("--set", "tls.enabled=true", "--set", "tls.existingSecret=dag-tls")
    config = parsed(yaml.safe_load(by_kind(docs, "ConfigMap")[0]["data"]["cluster.yaml"]))
    assert config.tls is not None and config.tls.client_ca_file is None
    assert str(config.tls.cert_file) == "/etc/dag-tls/server/tls.crt"
    for pod in workloads(docs)["replication-node"]:
        assert projected(pod) == {f"server/{k}": ("dag-tls", k)
                                  for k in ("ca.crt", "tls.crt", "tls.key")}  # fmt: skip
        assert env(pod)["DG_AUTH_TOKEN"], "TLS and roles are separate switches"


def test_the_least_privilege_set_lints_and_passes_the_kubernetes_schemas(tmp_path):
    helm("lint", "--strict", str(CHART), "-f", str(ROLES_SET))
    path = tmp_path / "least-privilege.yaml"
    path.write_text(helm("template", "dag", str(CHART), "-f", str(ROLES_SET)).stdout)
    validate = Path(sys.executable).with_name("kubernetes-validate")
    for version in KUBERNETES:
        result = subprocess.run([str(validate), "--strict", "--quiet", "-k", version, str(path)],
                                capture_output=True, text=True, check=False)  # fmt: skip
        out = result.stdout + result.stderr
        assert result.returncode == 0 and "ERROR" not in out, out


BAD = {
    "a switch that is not a boolean": ({"auth": {"roles": {"enabled": "yes"}}},
                                       "/auth/roles/enabled"),
    "a credential the chart does not know": (
        {"auth": {"roles": {"credentials": {"mail": {"name": "mail"}}}}}, "mail"),
    "a credential name with a space": (
        {"auth": {"roles": {"credentials": {"movers": {"name": "the movers"}}}}},
        "/auth/roles/credentials/movers/name"),
    "node identity as a string": ({"tls": {"nodeIdentity": "true"}}, "/tls/nodeIdentity"),
    "an unknown TLS key": ({"tls": {"clientCa": "ca"}}, "clientCa"),
}  # fmt: skip
REFUSED = {
    "TLS without its Secret": ({"tls": {"enabled": True}}, "tls.enabled needs tls.existingSecret"),
    "node identity without TLS": ({"tls": {"nodeIdentity": True}},
                                  "tls.nodeIdentity needs tls.enabled"),
    "two credentials of one name": (
        {"auth": {"roles": {"enabled": True, "credentials": {"movers": {"name": "nodes"}}}}},
        'movers and nodes are both named "nodes"'),
    "the cluster token's name": (
        {"auth": {"roles": {"enabled": True, "credentials": {"guarantee": {"name": "cluster"}}}}},
        "is the cluster token's name"),
}  # fmt: skip


@pytest.mark.parametrize("case", [*BAD, *REFUSED])
def test_bad_values_are_refused(case, tmp_path):
    values, where = BAD.get(case) or REFUSED[case]
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(values))
    result = helm("template", "dag", str(CHART), "-f", str(path), check=False)
    assert result.returncode != 0, f"helm template accepted {case}"
    assert where in result.stdout + result.stderr, result.stdout + result.stderr
