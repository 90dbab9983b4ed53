"""The chart's pods run by podman, as a kubelet would run them: a kubelet in miniature.

Everything a container runs with comes from the manifests `helm template` renders, never
from the test: the image, command and arguments (`$(VAR)` expanded from the env), the user
and groups (runAsUser, runAsGroup, fsGroup), the security context (read-only root, no
capabilities, no privilege escalation), the env (fieldRef metadata.name, secretKeyRef),
the volumes (a ConfigMap's or a Secret's files, written with the mode and group the kubelet
gives them; emptyDir; a PVC or a volumeClaimTemplate as a directory of the pod's fsGroup),
the termination grace, and the probes, run the way the kubelet runs them (HTTP GET, the
gRPC health check).  What the cluster resolves by DNS, the pods' and the Services' names,
is given to every container as host entries derived from the rendered Services.  So what
the chart says and what the test runs cannot drift: change a template and the test runs
the change.
"""

from __future__ import annotations

import base64
import contextlib
import ipaddress
import json
import os
import re
import shutil
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import yaml
from grpc_health.v1 import health_pb2, health_pb2_grpc

from tools.build_image import podman, podman_env

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "dag-replication"
FS_GROUP_DEFAULT_MODE = 0o644  # the kubelet's defaultMode for ConfigMap and Secret volumes


def helm(*args: str) -> str:
    """helm's output; the binary `make helm` fetched (or $HELM)."""
    binary = Path(os.environ.get("HELM", ROOT / ".cache" / "helm" / "helm"))
    result = subprocess.run([str(binary), *args], capture_output=True, text=True, check=False)
    assert result.returncode == 0, f"helm {' '.join(args)}:\n{result.stderr}"
    return result.stdout


@dataclass(frozen=True)
class Release:
    """A rendered release: its manifests by kind, and where its names resolve."""

    docs: list[dict[str, Any]]
    namespace: str
    cluster_domain: str

    @classmethod
    def render(cls, values: dict[str, Any], *, name: str, namespace: str) -> Release:
        """`helm template` of the chart with these values."""
        values_file = _write_temp_yaml(values)
        try:
            out = helm("template", name, str(CHART), "--namespace", namespace, "-f", values_file)
        finally:
            os.unlink(values_file)
        docs = [d for d in yaml.safe_load_all(out) if d]
        return cls(docs, namespace, values.get("clusterDomain", "cluster.local"))

    def kind(self, kind: str) -> list[dict[str, Any]]:
        """The manifests of one kind."""
        return [d for d in self.docs if d["kind"] == kind]

    def get(self, kind: str, name: str) -> dict[str, Any]:
        """One manifest by kind and name."""
        (found,) = [d for d in self.kind(kind) if d["metadata"]["name"] == name]
        return found

    def pods(self) -> list[Pod]:
        """Every pod the workloads would make: a StatefulSet's by ordinal, a Deployment's
        replicas (named -0, -1, … here: the kubelet's random suffix matters to nothing),
        a CronJob's one job pod."""
        pods: list[Pod] = []
        for sts in self.kind("StatefulSet"):
            for i in range(sts["spec"]["replicas"]):
                name = f"{sts['metadata']['name']}-{i}"
                claims = {t["metadata"]["name"]: f"{t['metadata']['name']}-{name}"
                          for t in sts["spec"].get("volumeClaimTemplates", [])}  # fmt: skip
                pods.append(Pod(name, sts["spec"]["template"], sts, claims,
                                subdomain=sts["spec"].get("serviceName")))  # fmt: skip
        for dep in self.kind("Deployment"):
            for i in range(dep["spec"]["replicas"]):
                pods.append(Pod(f"{dep['metadata']['name']}-{i}", dep["spec"]["template"], dep))
        for cron in self.kind("CronJob"):
            template = cron["spec"]["jobTemplate"]["spec"]["template"]
            pods.append(Pod(f"{cron['metadata']['name']}-0", template, cron))
        return pods

    def pod(self, component: str, index: int = 0) -> Pod:
        """The `index`th pod of a component (app.kubernetes.io/component)."""
        return [p for p in self.pods() if p.component == component][index]

    def volume_source(self, pod: Pod, volume: dict[str, Any]) -> dict[str, bytes]:
        """A ConfigMap, Secret or projected volume's files: path -> bytes."""
        files: dict[str, bytes] = {}
        if "configMap" in volume:
            data = self.get("ConfigMap", volume["configMap"]["name"])["data"]
            files = _items({k: v.encode() for k, v in data.items()}, volume["configMap"])
        elif "secret" in volume:
            files = self._secret_files(volume["secret"]["secretName"], volume["secret"])
        elif "projected" in volume:
            for source in volume["projected"]["sources"]:
                (kind,) = source
                spec = source[kind]
                if kind == "secret":
                    files |= self._secret_files(spec["name"], spec)
                else:
                    data = self.get("ConfigMap", spec["name"])["data"]
                    files |= _items({k: v.encode() for k, v in data.items()}, spec)
        return files

    def _secret_files(self, name: str, spec: dict[str, Any]) -> dict[str, bytes]:
        secret = self.get("Secret", name)
        data = {k: base64.b64decode(v) for k, v in secret.get("data", {}).items()}
        data |= {k: v.encode() for k, v in secret.get("stringData", {}).items()}
        return _items(data, spec)

    def hostnames(self, pod: Pod) -> list[str]:
        """The DNS names a pod answers to: its hostname under its StatefulSet's headless
        Service, and every ClusterIP Service that selects it."""
        suffix = f"{self.namespace}.svc.{self.cluster_domain}"
        names = []
        if pod.subdomain:
            names.append(f"{pod.name}.{pod.subdomain}.{suffix}")
        for svc in self.kind("Service"):
            selector = svc["spec"].get("selector", {})
            if svc["spec"].get("clusterIP") != "None" and selector.items() <= pod.labels.items():
                name = svc["metadata"]["name"]
                names += [f"{name}.{suffix}", f"{name}.{self.namespace}", name]
        return names

    def secret_value(self, name: str, key: str) -> str:
        """A rendered Secret's value (the chart makes the credentials)."""
        return base64.b64decode(self.get("Secret", name)["data"][key]).decode()


def _items(data: dict[str, bytes], spec: dict[str, Any]) -> dict[str, bytes]:
    if "items" not in spec:
        return dict(data)
    return {item["path"]: data[item["key"]] for item in spec["items"]}


def _write_temp_yaml(values: dict[str, Any]) -> str:
    import tempfile

    fd, path = tempfile.mkstemp(suffix=".yaml")
    with os.fdopen(fd, "w") as f:
        yaml.safe_dump(values, f)
    return path


@dataclass(frozen=True)
class Pod:
    """One pod of a workload: its name, template and owner."""

    name: str
    template: dict[str, Any]
    owner: dict[str, Any]
    claims: dict[str, str] = field(default_factory=dict)
    subdomain: str | None = None

    @property
    def spec(self) -> dict[str, Any]:
        """The pod spec."""
        return self.template["spec"]

    @property
    def labels(self) -> dict[str, str]:
        """The pod's labels."""
        return self.template["metadata"]["labels"]

    @property
    def component(self) -> str:
        """Its app.kubernetes.io/component."""
        return self.labels["app.kubernetes.io/component"]

    @property
    def container(self) -> dict[str, Any]:
        """Its one container (every workload of the chart has one)."""
        (container,) = self.spec["containers"]
        return container

    @property
    def grace(self) -> int:
        """terminationGracePeriodSeconds (Kubernetes' default 30)."""
        return self.spec.get("terminationGracePeriodSeconds", 30)

    def env(self, extra: dict[str, str] | None = None) -> dict[str, str]:
        """The container's env as the kubelet sets it (fieldRef and secretKeyRef resolved
        by `release`, given through `extra` for the secrets)."""
        out: dict[str, str] = {}
        for var in self.container.get("env", []):
            if "value" in var:
                out[var["name"]] = _expand(var["value"], out)
            elif "fieldRef" in var["valueFrom"]:
                path = var["valueFrom"]["fieldRef"]["fieldPath"]
                assert path == "metadata.name", f"fieldRef {path} not supported here"
                out[var["name"]] = self.name
            else:
                out[var["name"]] = (extra or {})[var["name"]]
        return out

    def port(self, name_or_number: str | int) -> int:
        """A probe's port: a number, or the name of a container port."""
        if isinstance(name_or_number, int):
            return name_or_number
        (port,) = [p["containerPort"] for p in self.container["ports"]
                   if p["name"] == name_or_number]  # fmt: skip
        return port


def _expand(text: str, env: dict[str, str]) -> str:
    """Kubernetes' $(VAR) expansion of command, args and env values."""
    return re.sub(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)", lambda m: env.get(m[1], m[0]), text)


@dataclass
class Running:
    """A started pod: its container's name and address."""

    pod: Pod
    container: str
    ip: str


class Kubelet:
    """Runs a release's pods as podman containers on one network, with the volumes under
    `root`; `close()` removes the containers and the network."""

    def __init__(self, release: Release, root: Path, *, prefix: str) -> None:
        self.release = release
        self.root = root
        self.prefix = prefix
        self.network = f"{prefix}-net"
        podman("network", "create", self.network)
        subnet = json.loads(podman("network", "inspect", self.network).stdout)[0]["subnets"][0]
        self._addresses = ipaddress.ip_network(subnet["subnet"]).hosts()
        next(self._addresses)  # the gateway
        self.hosts: dict[str, str] = {}  # name -> IP, for every container's /etc/hosts
        self.running: dict[str, Running] = {}
        self.extra_containers: list[str] = []  # not the chart's (etcd): removed at the end
        # (pod, volume) -> the files to mount instead of the rendered ones (bad input)
        self.overrides: dict[tuple[str, str], dict[str, bytes]] = {}

    def address(self, names: list[str]) -> str:
        """A new address on the network, `names` resolving to it in every later container."""
        ip = str(next(self._addresses))
        for name in names:
            self.hosts[name] = ip
        return ip

    def reserve(self, pods: list[Pod]) -> None:
        """Addresses for pods before any starts (a node's peers are named in its config)."""
        for pod in pods:
            if pod.name not in self.hosts:
                self.address([pod.name, *self.release.hostnames(pod)])

    def _volume_args(self, pod: Pod) -> list[str]:
        security = pod.spec.get("securityContext", {})
        fs_group = security.get("fsGroup")
        volumes = {v["name"]: v for v in pod.spec.get("volumes", [])}
        args: list[str] = []
        for mount in pod.container.get("volumeMounts", []):
            name, target = mount["name"], mount["mountPath"]
            ro = ",ro" if mount.get("readOnly") else ""
            volume = volumes.get(name)
            if volume is not None and "emptyDir" in volume:
                args += ["--mount", f"type=tmpfs,destination={target},tmpfs-mode=1777"]
                continue
            if volume is None or "persistentVolumeClaim" in volume:
                claim = pod.claims[name] if volume is None else (
                    volume["persistentVolumeClaim"]["claimName"])  # fmt: skip
                host = self.claim_dir(claim, fs_group)
            else:
                host = self._write_volume(pod, volume, fs_group)
            args += ["--mount", f"type=bind,source={host},destination={target}{ro}"]
        return args

    def claim_dir(self, claim: str, fs_group: int | None) -> Path:
        """A PVC: a directory the pod's fsGroup owns (the kubelet's fsGroup change)."""
        path = self.root / "claims" / claim
        if not path.exists():
            path.mkdir(parents=True)
            if fs_group is not None:
                os.chown(path, 0, fs_group)
                path.chmod(0o2775)
        return path

    def _write_volume(self, pod: Pod, volume: dict[str, Any], fs_group: int | None) -> Path:
        source = next(v for k, v in volume.items() if k != "name")
        mode = source.get("defaultMode", FS_GROUP_DEFAULT_MODE)
        path = self.root / "volumes" / pod.name / volume["name"]
        if path.exists():
            shutil.rmtree(path)
        files = self.overrides.get((pod.name, volume["name"]))
        if files is None:
            files = self.release.volume_source(pod, volume)
        for rel, data in files.items():
            file = path / rel
            file.parent.mkdir(parents=True, exist_ok=True)
            file.write_bytes(data)
            file.chmod(mode)
            if fs_group is not None:
                os.chown(file, 0, fs_group)
        path.mkdir(parents=True, exist_ok=True)
        return path

    def run_args(self, pod: Pod, *, image: str | None = None) -> list[str]:
        """The `podman run` arguments of a pod, from its manifest alone."""
        c = pod.container
        security = pod.spec.get("securityContext", {})
        ctx = c.get("securityContext", {})
        secrets = {
            var["name"]: self.release.secret_value(
                var["valueFrom"]["secretKeyRef"]["name"], var["valueFrom"]["secretKeyRef"]["key"]
            )
            for var in c.get("env", [])
            if "secretKeyRef" in var.get("valueFrom", {})
        }
        env = pod.env(secrets)
        args = ["--name", f"{self.prefix}-{pod.name}", "--hostname", pod.name]
        args += ["--network", self.network, "--ip", self.hosts[pod.name]]
        args += [f"--add-host={name}:{ip}" for name, ip in sorted(self.hosts.items())]
        if "runAsUser" in ctx or "runAsUser" in security:
            user = ctx.get("runAsUser", security.get("runAsUser"))
            group = ctx.get("runAsGroup", security.get("runAsGroup", user))
            args += ["--user", f"{user}:{group}"]
        if "fsGroup" in security:
            args += ["--group-add", str(security["fsGroup"])]
        if ctx.get("readOnlyRootFilesystem"):
            args.append("--read-only")
        if "ALL" in ctx.get("capabilities", {}).get("drop", []):
            args += ["--cap-drop", "ALL"]
        if ctx.get("allowPrivilegeEscalation") is False:
            args += ["--security-opt", "no-new-privileges"]
        if ctx.get("privileged"):
            args.append("--privileged")
        if limit := c.get("resources", {}).get("limits", {}).get("memory"):
            args += ["--memory", limit.replace("Gi", "g").replace("Mi", "m")]
        args += ["--stop-timeout", str(pod.grace)]
        for name, value in env.items():
            args += ["--env", f"{name}={value}"]
        args += self._volume_args(pod)
        command = [_expand(a, env) for a in c.get("command", [])]
        if command:
            args += ["--entrypoint", json.dumps(command[:1])]
        argv = command[1:] + [_expand(str(a), env) for a in c.get("args", [])]
        return [*args, image or c["image"], *argv]

    def start(self, pod: Pod, *, image: str | None = None) -> Running:
        """Start a pod's container (detached); its address."""
        self.reserve([pod])
        podman("run", "--detach", *self.run_args(pod, image=image))
        running = Running(pod, f"{self.prefix}-{pod.name}", self.hosts[pod.name])
        self.running[pod.name] = running
        return running

    def run_once(self, pod: Pod, *, image: str | None = None, timeout: float = 600):
        """Run a pod's container to its end (a job); the completed process."""
        self.reserve([pod])
        return subprocess.run(
            ["podman", "run", "--rm", *self.run_args(pod, image=image)],
            env=podman_env(), capture_output=True, text=True, timeout=timeout, check=False,
        )  # fmt: skip

    def remove(self, pod: Pod) -> None:
        """Remove a pod's container (a pod deleted)."""
        running = self.running.pop(pod.name)
        podman("rm", "--force", "--time", "0", running.container, check=False)

    def state(self, pod: Pod) -> dict[str, Any]:
        """The container's state (Running, ExitCode, …)."""
        out = podman("inspect", "--format", "{{json .State}}", f"{self.prefix}-{pod.name}")
        return json.loads(out.stdout)

    def logs(self, pod: Pod) -> str:
        """The container's output."""
        result = podman("logs", f"{self.prefix}-{pod.name}", check=False)
        return result.stdout + result.stderr

    def close(self) -> None:
        """Remove every container and the network."""
        containers = [r.container for r in self.running.values()] + self.extra_containers
        for container in containers:
            podman("rm", "--force", "--time", "0", container, check=False)
        podman("network", "rm", "--force", self.network, check=False)


def probe(pod: Pod, ip: str, kind: str) -> bool:
    """One run of the pod's `kind` probe (readinessProbe, livenessProbe, startupProbe) the
    way the kubelet runs it: success or failure, never an exception."""
    spec = pod.container[kind]
    timeout = spec.get("timeoutSeconds", 1)
    if "httpGet" in spec:
        get = spec["httpGet"]
        scheme = get.get("scheme", "HTTP").lower()
        url = f"{scheme}://{ip}:{pod.port(get['port'])}{get.get('path', '/')}"
        try:
            with urllib.request.urlopen(url, timeout=timeout) as response:
                return 200 <= response.status < 400
        except (urllib.error.URLError, OSError):
            return False
    if "grpc" in spec:
        target = f"{ip}:{pod.port(spec['grpc']['port'])}"
        with grpc.insecure_channel(target) as channel:
            stub = health_pb2_grpc.HealthStub(channel)
            request = health_pb2.HealthCheckRequest(service=spec["grpc"].get("service", ""))
            try:
                answer = stub.Check(request, timeout=timeout)
            except grpc.RpcError:
                return False
            return answer.status == health_pb2.HealthCheckResponse.SERVING
    raise AssertionError(f"{pod.name}: {kind} of an unknown kind: {spec}")


def wait_for(what: str, check: Callable[[], bool], *, timeout: float, every: float = 0.25):
    """Wait until `check()` is true; fail naming `what` after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g}s waiting for {what}")
        time.sleep(every)


@contextlib.contextmanager
def kubelet(release: Release, root: Path, *, prefix: str) -> Iterator[Kubelet]:
    """A Kubelet, its containers and network removed at the end."""
    k = Kubelet(release, root, prefix=prefix)
    try:
        yield k
    finally:
        k.close()
