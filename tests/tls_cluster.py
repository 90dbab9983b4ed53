"""A LocalCluster whose nodes speak HTTPS: a test CA made with openssl (tests/pki.py), a
certificate for each node and for each other process a test names (a transport hub, an IMAP
front, the guarantee API), the cluster config's `tls` section, and an aiohttp session that
trusts the CA.  The e2e tests of the mail protocols build their clusters with it."""

from __future__ import annotations

import ssl
from pathlib import Path
from typing import Any

import aiohttp

from tests.cluster_harness import TOKEN, LocalCluster
from tests.pki import issue, make_ca

NODE_CERT = "subjectAltName=IP:127.0.0.1,DNS:{name}\nextendedKeyUsage=serverAuth,clientAuth\n"


class TlsCluster(LocalCluster):
    def url(self, node: str) -> str:
        return f"https://127.0.0.1:{self.ports[node]}"


def client(ca: object, cert: tuple | None = None) -> aiohttp.ClientSession:
    ctx = ssl.create_default_context(cafile=str(ca))
    if cert is not None:
        ctx.load_cert_chain(*cert)
    return aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(ssl=ctx),
        headers={"Authorization": f"Bearer {TOKEN}"},
        timeout=aiohttp.ClientTimeout(total=30),
    )


def db1_on(*nodes: str, site: str = "redmond", **settings: Any) -> dict[str, Any]:
    """`nodes` (all at `site`) and DB1 with a copy on each, preferred in that order:
    LocalCluster's `nodes` and `databases` arguments; `settings` go into DB1's entry."""
    copies = [{"node": n, "activation_preference": i} for i, n in enumerate(nodes, 1)]
    return {
        "nodes": [(n, site) for n in nodes],
        "databases": [{"name": "DB1", **settings, "copies": copies}],
    }


def tls_cluster(
    tmp_path: Path,
    *,
    nodes: list[tuple[str, str]],
    databases: list[dict[str, Any]],
    certs: tuple[str, ...] = (),
    **kw: Any,
) -> tuple[TlsCluster, Path, tuple[Path, Path]]:
    """A TlsCluster in `tmp_path` (LocalCluster's arguments), not started: a CA in
    `tmp_path/pki`, a certificate each for the nodes and for `certs` (the other processes),
    the config's `tls` section naming them, and the cluster's session trusting the CA.
    Returns (cluster, the pki folder, the CA's (certificate, key))."""
    pki = tmp_path / "pki"
    pki.mkdir()
    ca = make_ca(pki, "ca")
    for name in (*(n for n, _ in nodes), *certs):
        issue(pki, name, ca, NODE_CERT.format(name=name))
    cluster = TlsCluster(tmp_path, nodes=nodes, databases=databases, **kw)
    cluster.config["tls"] = {
        "cert_file": str(pki / "{node}.pem"), "key_file": str(pki / "{node}.key"),
        "ca_file": str(ca[0]),
    }  # fmt: skip
    cluster.write_config()
    cluster.session = client(ca[0])
    return cluster, pki, ca
