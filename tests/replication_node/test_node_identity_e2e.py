"""Node identity over real processes (mutual TLS): nodes present their own certificates to
each other and replicate; the replication role is refused to a caller holding every role
by credential but no node's certificate, and a certificate of another CA gets nothing."""

from __future__ import annotations

import aiohttp
import pytest

from tests.pki import issue, make_ca
from tests.replication_node.e2e import converged, databases, write
from tests.tls_cluster import NODE_CERT, TlsCluster, client

pytestmark = pytest.mark.slow


@pytest.fixture
async def pki_cluster(tmp_path):
    pki = tmp_path / "pki"
    pki.mkdir()
    ca = make_ca(pki, "nodes-ca")
    for name in ("mbx1", "mbx2", "mbx3"):
        issue(pki, name, ca, NODE_CERT.format(name=name))
    rogue_ca = make_ca(pki, "rogue-ca")
    (pki / "rogue").mkdir()
    rogue = issue(pki / "rogue", "mbx2", rogue_ca, NODE_CERT.format(name="mbx2"))
    c = TlsCluster(
        tmp_path, nodes=[("mbx1", "redmond"), ("mbx2", "redmond"), ("mbx3", "dublin")],
        databases=databases(), defaults={"failover_after": None},
    )  # fmt: skip
    c.config["tls"] = {
        "cert_file": str(pki / "{node}.pem"), "key_file": str(pki / "{node}.key"),
        "ca_file": str(ca[0]), "client_ca_file": str(ca[0]),
    }  # fmt: skip
    c.write_config()
    c.session = client(ca[0])  # every role by token, no node's certificate
    await c.start()
    yield c, ca, pki, rogue
    await c.close()


async def test_nodes_identified_by_their_certificates_replicate_and_nobody_else_reads_logs(
    pki_cluster,
):
    cluster, ca, pki, rogue = pki_cluster
    await cluster.wait_status("mbx1", "DB1", "Mounted")
    await cluster.ok("PUT", "mbx1", "/v1/databases/DB1/mailboxes/bob")
    await write(cluster, "mbx1", "DB1", "bob", 0, 60)
    await converged(cluster, "DB1", "mbx1", ["mbx2", "mbx3"])  # over mutual TLS
    assert len(await cluster.items("mbx3", "DB1", "bob")) == 60

    logs = "/v1/databases/DB1/logs"
    status, body = await cluster.call("GET", "mbx1", logs)
    assert status == 403, "the token holds every role, but it is not a node's certificate"
    assert "client certificate" in body["error"] and body["role"] == "replication"
    status, _ = await cluster.call("GET", "mbx1", "/v1/databases/DB1/seed")
    assert status == 403

    as_mbx2 = client(ca[0], (pki / "mbx2.pem", pki / "mbx2.key"))
    async with as_mbx2, as_mbx2.get(cluster.url("mbx1") + logs) as resp:
        assert resp.status == 200, "a node's own certificate and credential"
    async with client(ca[0], rogue) as as_rogue:
        with pytest.raises(aiohttp.ClientError):  # refused in the handshake
            async with as_rogue.get(cluster.url("mbx1") + logs) as resp:
                await resp.read()
