"""Least privilege over real node processes: nodes that hold only their own credential
(replication and monitor) replicate; a mail client's credential (store) can write mail and
nothing else — no activation, reseed, log share, seed or block stream, and nothing changed;
and a credential rotated while writes flow refuses none of them."""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys

import pytest

from tests.cluster_harness import ROOT, wait_until
from tests.mrs_client.e2e import shorten_guarantee_waits
from tests.replication_node.e2e import converged, three_nodes

pytestmark = pytest.mark.slow

SECRETS = {
    "nodes": "nodes-secret-0123456789",
    "ops": "ops-secret-0123456789ab",
    "mail": "mail-secret-0123456789a",
    "admin": "admin-secret-0123456789",
}
ROLES = {
    "nodes": ["replication", "monitor"],
    "ops": ["operator", "monitor"],
    "mail": ["store"],
    "admin": ["replication", "operator", "mover", "store", "monitor"],
}


def bearer(secret: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {secret}"}


@pytest.fixture
async def cluster(tmp_path):
    c = three_nodes(tmp_path, defaults={"failover_after": None})
    c.config["credentials"] = [
        {"name": name, "roles": ROLES[name], "file": f"{name}.cred"} for name in SECRETS
    ]
    c.write_config()
    for name, secret in SECRETS.items():
        (tmp_path / f"{name}.cred").write_text(secret + "\n")
    # No cluster token anywhere: each node presents and accepts only the credentials above.
    env = {"DG_AUTH_TOKEN": "", "DG_CREDENTIAL_FILE": str(tmp_path / "nodes.cred")}
    for node in c.ports:
        c.start_node(node, env=env)
    import aiohttp

    c.session = aiohttp.ClientSession(
        headers=bearer(SECRETS["admin"]), timeout=aiohttp.ClientTimeout(total=30)
    )
    for node in c.ports:
        await c.wait_healthy(node)
    yield c
    await c.close()


async def write(cluster, secret: str, first: int, n: int) -> list[int]:
    statuses = []
    for i in range(first, first + n):
        status, _ = await cluster.call(
            "POST", "mbx1", "/v1/databases/DB1/mailboxes/carol/items",
            json={"item_id": f"i{i}", "subject": f"s{i}", "body": "b" * 200},
            headers=bearer(secret),
        )  # fmt: skip
        statuses.append(status)
    return statuses


async def test_nodes_with_their_own_credential_replicate_and_a_store_credential_writes_mail_only(
    cluster,
):
    await cluster.wait_status("mbx1", "DB1", "Mounted")
    mail = bearer(SECRETS["mail"])
    status, _ = await cluster.call("PUT", "mbx1", "/v1/databases/DB1/mailboxes/carol", headers=mail)
    assert status == 201
    assert set(await write(cluster, SECRETS["mail"], 0, 30)) == {201}
    await converged(cluster, "DB1", "mbx1", ["mbx2", "mbx3"])  # shipped with nodes' credential
    assert len(await cluster.items("mbx3", "DB1", "carol")) == 30

    before = await cluster.status("mbx2")
    refused = [
        ("POST", "mbx2", "/v1/databases/DB1/activate", {"node": "mbx2"}, "operator"),
        ("POST", "mbx2", "/v1/databases/DB1/copies/mbx2/reseed", {}, "operator"),
        ("POST", "mbx1", "/v1/databases/DB1/dismount", {}, "operator"),
        ("GET", "mbx1", "/v1/databases/DB1/logs", None, "replication"),
        ("GET", "mbx1", "/v1/databases/DB1/logs/E00000001.log", None, "replication"),
        ("GET", "mbx1", "/v1/databases/DB1/seed", None, "replication"),
        ("GET", "mbx1", "/v1/databases/DB1/logs/blocks?generation=1&offset=0&node=x", None,
         "replication"),
        ("POST", "mbx1", "/v1/databases/DB1/mailboxes/carol/lock", {}, "mover"),
        ("DELETE", "mbx1", "/v1/databases/DB1/mailboxes/carol", None, "mover"),
        ("POST", "mbx1", "/v1/databases/DB1/mailboxes/carol/items?override_lock=true",
         {"item_id": "x1", "subject": "s"}, "mover"),
        ("GET", "mbx1", "/v1/status", None, "monitor"),
    ]  # fmt: skip
    for method, node, path, body, role in refused:
        status, answer = await cluster.call(method, node, path, json=body, headers=mail)
        assert status == 403, (path, status, answer)
        assert answer["role"] == role and f"needs the {role} role" in answer["error"], answer
    after = await cluster.status("mbx2")
    assert (after["DB1"]["role"], after["DB1"]["status"]) == ("Passive", "Healthy")
    assert after["DB1"]["epoch"] == before["DB1"]["epoch"], "nothing was activated"
    assert (await cluster.status("mbx1"))["DB1"]["status"] == "Mounted", "nor dismounted"
    items = await cluster.items("mbx1", "DB1", "carol")
    assert len(items) == 30 and "x1" not in items
    status, _ = await cluster.call("GET", "mbx1", "/v1/status", headers=bearer("x" * 20))
    assert status == 401

    # the operator's credential does what it is for
    ops = bearer(SECRETS["ops"])
    status, answer = await cluster.call(
        "POST", "mbx2", "/v1/databases/DB1/copies/mbx2/suspend", json={"reason": "t"}, headers=ops
    )
    assert status == 200, answer
    said = await asyncio.to_thread(
        cluster.node_cli, "db", "resume", "DB1", "--node", "mbx2", "--credential-file",
        str(cluster.root / "mail.cred"),
    )  # fmt: skip
    assert said.returncode == 2 and "needs the operator role" in said.stderr, said.stderr
    said = await asyncio.to_thread(
        cluster.node_cli, "db", "resume", "DB1", "--node", "mbx2", "--credential-file",
        str(cluster.root / "ops.cred"),
    )  # fmt: skip
    assert said.returncode == 0, said.stderr

    # the audit trail: who asked what, refused or done, never a secret
    said = await asyncio.to_thread(
        cluster.node_cli, "audit", "--database", "DB1", "--json", "--limit", "100",
        "--credential-file", str(cluster.root / "ops.cred"),
    )  # fmt: skip
    assert said.returncode == 0, said.stderr
    lines = json.loads(said.stdout)
    seen = {(e["credential"], e["method"], e["path"].rsplit("/", 1)[-1], e["result"])
            for e in lines}  # fmt: skip
    assert ("mail", "POST", "activate", "refused") in seen
    assert ("mail", "GET", "seed", "refused") in seen
    assert ("ops", "POST", "suspend", "done") in seen and ("ops", "POST", "resume", "done") in seen
    assert ("mail", "POST", "resume", "refused") in seen
    assert not any(s in said.stdout for s in SECRETS.values())
    _, metrics = await cluster.call("GET", "mbx2", "/metrics")
    assert 'replication_audit_events_total{result="refused",role="operator"}' in metrics.decode()


async def test_a_credential_rotated_while_writes_flow_refuses_none_of_them(cluster):
    await cluster.wait_status("mbx1", "DB1", "Mounted")
    old, new = SECRETS["mail"], "mail-secret-rotated-9876543"
    status, _ = await cluster.call(
        "PUT", "mbx1", "/v1/databases/DB1/mailboxes/carol", headers=bearer(old)
    )
    assert status == 201
    using = {"secret": old}
    answers: list[int] = []
    stop = asyncio.Event()

    async def writer() -> None:
        i = 0
        while not stop.is_set():
            answers.extend(await write(cluster, using["secret"], i, 1))
            i += 1

    task = asyncio.create_task(writer())
    path = cluster.root / "mail.cred"

    def hup() -> None:  # every node rereads its credentials now
        for proc in cluster.procs.values():
            proc.send_signal(signal.SIGHUP)

    await flowing(answers)
    path.write_text(f"{old}\n{new}\n")  # 1. add the new secret beside the old
    hup()

    async def accepted(secret: str) -> bool:
        status, _ = await cluster.call("GET", "mbx1", "/v1/databases/DB1/mailboxes",
                                       headers=bearer(secret))  # fmt: skip
        return status == 200

    await wait_until("the new secret accepted", lambda: accepted(new), timeout=30)
    using["secret"] = new  # 2. the client moves to it
    await flowing(answers)
    path.write_text(f"{new}\n")  # 3. the old one removed
    hup()
    await wait_until("the old secret refused", lambda: _not(accepted(old)), timeout=30)
    await flowing(answers)
    stop.set()
    await task
    assert answers and set(answers) == {201}, f"a write refused during the rotation: {answers}"


async def flowing(answers: list[int], more: int = 5) -> None:
    """Until the writer has had `more` answers beyond those it has now."""
    start = len(answers)
    await wait_until("writes flowing", lambda: len(answers) >= start + more, timeout=30)


async def _not(result) -> bool:
    return not await result


async def test_a_move_runs_with_each_process_holding_only_its_own_credential(cluster):
    """The guarantee service presents `monitor` to the nodes and asks its callers for
    `mover`; `mrs move` holds mover, store and monitor, which are every role its calls
    need: the move completes."""
    creds = cluster.root
    (creds / "guarantee.cred").write_text("guarantee-secret-0123456789\n")
    (creds / "movers.cred").write_text("movers-secret-0123456789\n")
    cluster.config["credentials"] += [
        {"name": "guarantee", "roles": ["monitor"], "file": "guarantee.cred"},
        {"name": "movers", "roles": ["mover", "store", "monitor"], "file": "movers.cred"},
    ]
    shorten_guarantee_waits(cluster)
    cluster.write_config()
    for proc in cluster.procs.values():
        proc.send_signal(signal.SIGHUP)  # the new credentials, without a restart

    async def accepted() -> bool:
        for node in cluster.procs:
            status, _ = await cluster.call(
                "GET", node, "/v1/status", headers=bearer("movers-secret-0123456789")
            )
            if status != 200:
                return False
        return True

    await wait_until("the movers' credential accepted by every node", accepted, timeout=30)
    api = await cluster.start_guarantee_api(
        env={"DG_AUTH_TOKEN": "", "DG_CREDENTIAL_FILE": str(creds / "guarantee.cred")}
    )
    try:
        await cluster.wait_status("mbx1", "DB1", "Mounted")
        mail = bearer(SECRETS["mail"])
        status, _ = await cluster.call(
            "PUT", "mbx1", "/v1/databases/DB1/mailboxes/carol", headers=mail
        )
        assert status == 201
        assert set(await write(cluster, SECRETS["mail"], 0, 40)) == {201}

        def mrs(credential: str) -> subprocess.CompletedProcess[str]:
            env = {**cluster.env(), "DG_AUTH_TOKEN": "",
                   "DG_CREDENTIAL_FILE": str(creds / credential)}  # fmt: skip
            return subprocess.run(
                [sys.executable, "-m", "mrs_client.cli", "move", "--mailbox", "carol",
                 "--to", "DB2", "--health-check-interval", "200ms", "--stall-retry-interval",
                 "300ms", "--flush-retry-interval", "200ms", "--config",
                 str(cluster.config_path)],
                capture_output=True, text=True, env=env, cwd=ROOT, timeout=180,
            )  # fmt: skip

        moved = await asyncio.to_thread(mrs, "movers.cred")
        assert moved.returncode == 0, moved.stdout + moved.stderr
        assert len(await cluster.items("mbx2", "DB2", "carol")) == 40
    finally:
        api.terminate()
        api.wait(timeout=20)
