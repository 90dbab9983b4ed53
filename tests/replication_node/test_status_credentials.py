"""`replication-node status` and the credential it presents, against a node's real role
middleware on a real aiohttp server (the status behind it a stub): a credential the node
refuses is one `error:` line and exit 2, as the credentials page promises (a table of
refusals, a false "no copy is mounted" and exit 1 before); none presented where the config
draws credentials names every way to present one."""

from __future__ import annotations

import asyncio
import subprocess
import sys

import pytest
from aiohttp import web

from dag_common.credentials import Credential, Credentials, Role, digest
from dag_common.route_roles import add_route, role_middleware
from tests.cluster_harness import ROOT, cluster_config, serve_app, write_cluster_config

SECRETS = {"mail": "mail-secret-0123456789ab", "ops": "ops-secret-0123456789abc"}
ROLES = {"mail": [Role.STORE], "ops": [Role.OPERATOR, Role.MONITOR]}


@pytest.fixture
async def node(tmp_path):
    async def status(request: web.Request) -> web.Response:
        copy = {
            "database": "DB1", "node": "mbx1", "site": "s", "role": "Active",
            "status": "Mounted", "activation_preference": 1,
        }  # fmt: skip
        return web.json_response({"node": "mbx1", "site": "s", "copies": [copy]})

    accepted = Credentials(
        Credential(name, frozenset(ROLES[name]), (digest(secret),))
        for name, secret in SECRETS.items()
    )
    app = web.Application(middlewares=[role_middleware(lambda: accepted)])
    add_route(app, "GET", "/v1/status", status, Role.MONITOR)
    runner, url = await serve_app(app)
    for name, secret in SECRETS.items():
        (tmp_path / f"{name}.cred").write_text(secret + "\n")
    config = write_cluster_config(
        tmp_path / "cluster.yaml",
        cluster_config(
            [("mbx1", "s", url)],
            [{"name": "DB1", "copies": [{"node": "mbx1", "activation_preference": 1}]}],
            credentials=[
                {"name": n, "roles": [str(r) for r in ROLES[n]], "file": f"{n}.cred"}
                for n in SECRETS
            ],
        ),
    )
    yield config
    await runner.cleanup()


def status(config, *args: str) -> subprocess.CompletedProcess[str]:
    """The command, in a thread (the node answers from the test's event loop)."""
    return subprocess.run(
        [sys.executable, "-m", "replication_node.cli.main", "status", "--config", str(config),
         *args],
        capture_output=True, text=True, cwd=ROOT, timeout=60,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},  # no cluster token
    )  # fmt: skip


async def test_a_credential_without_the_monitor_role_is_one_error_line_and_exit_2(node, tmp_path):
    said = await asyncio.to_thread(status, node, "--credential-file", str(tmp_path / "mail.cred"))
    assert said.returncode == 2, said.stdout + said.stderr
    assert said.stdout == "", "no table of refusals, no note of an unmounted database"
    assert said.stderr.count("\n") == 1 and said.stderr.startswith("error: "), said.stderr
    assert "needs the monitor role; credential 'mail' (store) does not hold it" in said.stderr


async def test_an_unknown_credential_is_one_error_line_and_exit_2(node, tmp_path):
    (tmp_path / "stranger.cred").write_text("a-secret-no-node-knows-0000\n")
    stranger = str(tmp_path / "stranger.cred")
    said = await asyncio.to_thread(status, node, "--credential-file", stranger)
    assert said.returncode == 2 and said.stdout == "", said.stdout + said.stderr
    assert said.stderr == "error: authentication failed (check the token)\n"


async def test_a_credential_with_the_monitor_role_sees_the_table(node, tmp_path):
    said = await asyncio.to_thread(status, node, "--credential-file", str(tmp_path / "ops.cred"))
    assert said.returncode == 0, said.stderr
    assert "Mounted" in said.stdout


async def test_no_credential_presented_names_every_way_to_present_one(node):
    said = await asyncio.to_thread(status, node)
    assert said.returncode == 2 and said.stderr.count("\n") == 1, said.stderr
    for way in ("--credential-file", "$DG_CREDENTIAL_FILE", "$DG_AUTH_TOKEN", "auth_token_file"):
        assert way in said.stderr, (way, said.stderr)
