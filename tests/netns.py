"""Hosts on one machine: a network namespace per member, wired to a bridge, and partitions
cut with iptables inside a member's namespace.

The test process stays in the root namespace, on the bridge's own address, so it reaches
every member (a client of the cut-off node still reaches it).  Each lab takes a /24 no
interface here uses, names its namespaces and links after this process, and removes them
all when it closes (the veths go with their namespaces, the bridge is deleted).
"""

from __future__ import annotations

import contextlib
import fcntl
import ipaddress
import os
import shutil
import subprocess
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from tests.cluster_harness import LocalCluster, start_etcd


class NetnsUnavailable(Exception):
    """Namespaces, veths or iptables cannot be used here (not root, no CAP_NET_ADMIN)."""


class LabError(Exception):
    """The machine allows namespaces, yet the lab could not be made or changed (a name
    already taken by a lab left behind, a bad argument): a failure, never a skip."""


def _run(*args: str) -> None:
    done = subprocess.run(args, capture_output=True, text=True)
    if done.returncode != 0:
        why = f"{' '.join(args)}: {done.stderr.strip() or done.returncode}"
        if "not permitted" in why or "Permission denied" in why:
            raise NetnsUnavailable(why)  # not allowed here: the suites skip
        raise LabError(why)


# The /24s labs take are claimed under this machine-wide lock, held from the look at the
# addresses in use until the new bridge has its own: two labs made at once (the suite's xdist
# workers, or another suite on this machine) would otherwise both see the same /24 free.
SUBNET_LOCK = Path("/run/lock" if Path("/run/lock").is_dir() else "/tmp") / "dag-netns-subnet.lock"


def _free_subnet() -> ipaddress.IPv4Network:
    used = subprocess.run(["ip", "-4", "-o", "addr"], capture_output=True, text=True).stdout
    for third in range(200, 255):
        net = ipaddress.ip_network(f"10.231.{third}.0/24")
        if f" 10.231.{third}." not in used:
            return net
    raise NetnsUnavailable("no free 10.231.x.0/24 for the lab")


class NetnsLab:
    """A bridge and one namespace per member; `add(name)` returns the member's address."""

    def __init__(self) -> None:
        if os.geteuid() != 0 or not shutil.which("ip"):
            raise NetnsUnavailable("network namespaces need root and iproute2")
        if not shutil.which("iptables"):
            raise NetnsUnavailable("iptables is missing (Debian's iptables package)")
        tag = f"{os.getpid() % 100000}"
        self._tag = tag
        self.bridge = f"dgbr{tag}"
        self.members: dict[str, str] = {}  # name -> address
        self._namespaces: dict[str, str] = {}  # name -> netns
        self._links: list[str] = []  # the veths' ends on the bridge
        with SUBNET_LOCK.open("a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # released as the file closes
            self.subnet = _free_subnet()
            hosts = self.subnet.hosts()
            self.gateway = str(next(hosts))  # the bridge: where the test process speaks from
            self._hosts = hosts
            _run("ip", "link", "add", self.bridge, "type", "bridge")
            try:
                _run("ip", "addr", "add", f"{self.gateway}/24", "dev", self.bridge)
                _run("ip", "link", "set", self.bridge, "up")
            except (NetnsUnavailable, LabError):
                self.close()
                raise

    def add(self, name: str) -> str:
        """A member `name` in its own namespace, on the bridge; its address."""
        index = len(self.members)
        ns, outer, inner = f"dg{self._tag}{name}", f"dgv{self._tag}{index}", "eth0"
        address = str(next(self._hosts))
        _run("ip", "netns", "add", ns)
        self._namespaces[name] = ns
        _run("ip", "link", "add", outer, "type", "veth", "peer", "name", inner, "netns", ns)
        self._links.append(outer)
        _run("ip", "link", "set", outer, "master", self.bridge, "up")
        self.exec(name, "ip", "addr", "add", f"{address}/24", "dev", inner)
        self.exec(name, "ip", "link", "set", inner, "up")
        self.exec(name, "ip", "link", "set", "lo", "up")
        self.members[name] = address
        return address

    def prefix(self, name: str) -> list[str]:
        """The command prefix that runs a process in `name`'s namespace."""
        return ["ip", "netns", "exec", self._namespaces[name]]

    def exec(self, name: str, *args: str) -> None:
        _run(*self.prefix(name), *args)

    def cut(self, name: str, *others: str) -> None:
        """Drop every packet between `name` and `others` (both ways), in `name`'s namespace;
        everyone else, the test process included, still reaches it."""
        for other in others:
            address = self.members[other]
            self.exec(name, "iptables", "-A", "INPUT", "-s", address, "-j", "DROP")
            self.exec(name, "iptables", "-A", "OUTPUT", "-d", address, "-j", "DROP")

    def heal(self, name: str) -> None:
        """Remove every cut made in `name`'s namespace."""
        self.exec(name, "iptables", "-F")

    def close(self) -> None:
        for link in self._links:  # its namespace's end goes with it
            subprocess.run(["ip", "link", "del", link], capture_output=True)
        for ns in self._namespaces.values():
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)
        subprocess.run(["ip", "link", "del", self.bridge], capture_output=True)
        self._namespaces.clear()


@contextmanager
def netns_lab() -> Iterator[NetnsLab]:
    lab = NetnsLab()
    try:
        yield lab
    finally:
        lab.close()


@contextlib.asynccontextmanager
async def cluster_in_namespaces(
    root: Path,
    *,
    nodes: list[tuple[str, str]],
    databases: list[dict[str, Any]],
    defaults: dict[str, Any],
) -> AsyncIterator[tuple[NetnsLab, LocalCluster]]:
    """Each node and a one-member etcd (the cluster store) in its own namespace on one
    bridge: the lab and the cluster, not started; everything stopped and removed after.
    NetnsUnavailable at once where namespaces cannot be made."""
    net = NetnsLab()
    cluster = etcd = None
    try:
        hosts = {name: net.add(name) for name, _ in nodes}
        (root / "etcd").mkdir(parents=True, exist_ok=True)
        url, etcd = start_etcd(root / "etcd", host=net.add("etcd"), prefix=net.prefix("etcd"))
        cluster = LocalCluster(
            root,
            nodes=nodes,
            databases=databases,
            defaults=defaults,
            hosts=hosts,
            prefix={name: net.prefix(name) for name in hosts},
            cluster_store={"kind": "etcd", "endpoints": [url], "timeout": "1s"},
        )
        yield net, cluster
    finally:
        # Each step whatever the one before did: a node that would not stop fails the test,
        # and the lab still goes (left behind, it would make every later lab fail to start).
        try:
            if cluster is not None:
                await cluster.close()
        finally:
            try:
                if etcd is not None:
                    etcd.terminate()
                    etcd.wait(timeout=30)
            finally:
                net.close()
