"""The etcd cluster store over TLS and with etcd's authentication, against real etcd processes
(Debian's etcd-server) and certificates made here with the `openssl` command line; one fake
gateway (a real aiohttp server on port 0) for what a real etcd cannot be made to do on cue:
refuse every token."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml
from aiohttp import web

from dag_common.cluster_store import open_cluster_store
from dag_common.cluster_store.etcd import EtcdClusterStore
from dag_common.cluster_store.etcd_gateway import EtcdCredentials, EtcdGateway
from dag_common.cluster_store.interface import ClusterStore
from dag_common.config import ClusterConfig, parse_config
from dag_common.errors import ConfigError
from replication_node.errors import ClusterStoreError
from tests.cluster_harness import ROOT, TOKEN, free_port, start_etcd
from tests.pki import issue, make_ca, openssl

GATEWAY_LOG = "dag_common.cluster_store.etcd_gateway"
PASSWORD = "first password"  # a space in it: only the file's line end is cut


# ---- certificates and etcd processes -------------------------------------------------------


@dataclass(frozen=True)
class Pki:
    """A test CA, the etcd server's certificate (for IP 127.0.0.1) and a client's, all signed
    by it; another CA that signed nothing here; an RSA key pair for etcd's JWT tokens."""

    ca: Path
    server: tuple[Path, Path]
    client: tuple[Path, Path]
    other_ca: Path
    jwt_keys: tuple[Path, Path]  # public, private


@pytest.fixture(scope="module")
def pki(tmp_path_factory) -> Pki:
    d = tmp_path_factory.mktemp("pki")
    ca = make_ca(d, "test-ca")
    # clientAuth too: with --client-cert-auth, etcd's own JSON gateway dials its gRPC server
    # with the server certificate (without it, every gateway call is "503 connection closed")
    server = issue(
        d, "etcd", ca, "subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth,clientAuth\n"
    )
    client = issue(d, "dag-node", ca, "extendedKeyUsage=clientAuth\n")
    other_ca, _ = make_ca(d, "other-ca")
    openssl("genrsa", "-out", d / "jwt.key", "2048")
    openssl("rsa", "-in", d / "jwt.key", "-pubout", "-out", d / "jwt.pub")
    return Pki(ca[0], server, client, other_ca, (d / "jwt.pub", d / "jwt.key"))


@contextlib.contextmanager
def etcd_running(data: Path, **options: Any) -> Iterator[str]:
    data.mkdir(parents=True, exist_ok=True)
    url, proc = start_etcd(data, **options)
    try:
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=10)


@pytest.fixture(scope="module")
def tls_etcd(pki, tmp_path_factory) -> Iterator[str]:
    with etcd_running(tmp_path_factory.mktemp("tls-etcd"), server_cert=pki.server) as url:
        yield url


@pytest.fixture(scope="module")
def mtls_etcd(pki, tmp_path_factory) -> Iterator[str]:
    data = tmp_path_factory.mktemp("mtls-etcd")
    with etcd_running(data, server_cert=pki.server, client_ca=pki.ca) as url:
        yield url


@pytest.fixture
def auth_etcd(tmp_path) -> Iterator[str]:
    """A fresh etcd per test: the tests turn its authentication on and off."""
    with etcd_running(tmp_path / "etcd") as url:
        yield url


# ---- the store as a user opens it ----------------------------------------------------------


def config(tmp_path: Path, **store: Any) -> ClusterConfig:
    """A cluster config whose store is etcd with `store`'s settings (a cluster name of its
    own: the module's etcd processes are shared)."""
    return parse_config(
        {
            "cluster": f"t{time.time_ns()}",
            "cluster_store": {"kind": "etcd", **store},
            "nodes": [{"name": "mbx1", "site": "a", "url": "http://127.0.0.1:1", "data_dir": "d"}],
        },
        base_dir=tmp_path,
    )


@contextlib.asynccontextmanager
async def opened(cfg: ClusterConfig) -> AsyncIterator[ClusterStore]:
    store = open_cluster_store(cfg)
    try:
        yield store
    finally:
        await store.aclose()


async def assert_works(store: ClusterStore, database: str = "DB1") -> None:
    before = await store.active(database)
    epoch = before.epoch if before else 0
    won = await store.set_active(database, "mbx1", expected_epoch=epoch, start_generation=1)
    assert won is not None and won.epoch == epoch + 1
    assert (await store.active(database)) == won


async def one_line_error(store: ClusterStore) -> str:
    with pytest.raises(ClusterStoreError) as caught:
        await store.active("DB1")
    message = str(caught.value)
    assert "\n" not in message and "Traceback" not in message
    return message


# ---- TLS -----------------------------------------------------------------------------------


async def test_over_https_the_store_verifies_etcd_against_ca_file(tls_etcd, pki, tmp_path):
    async with opened(config(tmp_path, endpoints=[tls_etcd], ca_file=str(pki.ca))) as store:
        await assert_works(store)


async def test_an_etcd_certificate_no_trusted_ca_signed_is_a_clear_error(tls_etcd, pki, tmp_path):
    # without ca_file: the system's CAs, which never signed the test CA's certificate
    for settings in ({}, {"ca_file": str(pki.other_ca)}):
        async with opened(config(tmp_path, endpoints=[tls_etcd], **settings)) as store:
            message = await one_line_error(store)
        assert f"{tls_etcd}: its TLS certificate is not trusted (unable to get local issuer" in (
            message
        )
        assert "cluster_store.ca_file must name the CA that signed it" in message


async def test_an_https_etcd_named_with_http_is_told_to_use_https(tls_etcd, tmp_path):
    plain = tls_etcd.replace("https://", "http://")
    async with opened(config(tmp_path, endpoints=[plain], timeout="3s")) as store:
        message = await one_line_error(store)
    assert "name it https://" in message


async def test_with_client_cert_auth_only_the_client_certificate_gets_in(mtls_etcd, pki, tmp_path):
    no_cert = config(tmp_path, endpoints=[mtls_etcd], ca_file=str(pki.ca))
    async with opened(no_cert) as store:
        message = await one_line_error(store)
    assert "etcd refused the TLS handshake" in message
    assert "it wants a client certificate it trusts (cluster_store.cert_file and key_file)" in (
        message
    )
    cert, key = pki.client
    with_cert = config(
        tmp_path, endpoints=[mtls_etcd], ca_file=str(pki.ca), cert_file=str(cert), key_file=str(key)
    )
    async with opened(with_cert) as store:
        await assert_works(store)


def test_the_files_are_checked_when_the_store_opens_not_when_the_config_loads(pki, tmp_path):
    # The config loads where the store is never opened (status, mrs, the chart's tests): the
    # files need to be there only where the store is used, and then they are checked first.
    https = ["https://127.0.0.1:2379"]
    (tmp_path / "empty").write_text("\n")
    (tmp_path / "not-pem").write_text("hello\n")
    cases = [
        ({"ca_file": "missing-ca.pem"}, "cluster_store.ca_file: .*missing-ca.pem: no such file"),
        ({"ca_file": "not-pem"}, "cluster_store.ca_file: .*not-pem: not a PEM CA certificate"),
        (
            {"cert_file": str(pki.client[0]), "key_file": str(pki.server[1])},
            "cluster_store.cert_file/key_file: .*not a usable client certificate and key "
            r"\(the key is not the certificate's\)",
        ),
        (
            {"username": "root", "password_file": "missing-password"},
            "cluster_store.password_file: .*missing-password: no such file",
        ),
        (
            {"username": "root", "password_file": "empty"},
            "cluster_store.password_file .*empty is empty",
        ),
    ]
    for settings, error in cases:
        cfg = config(tmp_path, endpoints=https, **settings)  # loads
        with pytest.raises(ConfigError, match=error):
            open_cluster_store(cfg)


# ---- authentication ------------------------------------------------------------------------


async def gateway_post(
    url: str, path: str, body: dict[str, Any], token: str | None = None
) -> tuple[int, dict[str, Any]]:
    """One call to etcd's JSON gateway, as an operator's admin call would be."""
    headers = {"Authorization": token} if token else None
    async with (
        aiohttp.ClientSession() as session,
        session.post(f"{url}{path}", json=body, headers=headers) as resp,
    ):
        return resp.status, await resp.json(content_type=None)


async def admin(url: str, path: str, body: dict[str, Any], token: str | None = None) -> None:
    status, answer = await gateway_post(url, path, body, token)
    assert status == 200, (path, answer)


async def add_root(url: str, password: str) -> None:
    await admin(url, "/v3/auth/user/add", {"name": "root", "password": password})
    await admin(url, "/v3/auth/user/grant", {"user": "root", "role": "root"})


async def root_token(url: str, password: str) -> str:
    status, answer = await gateway_post(
        url, "/v3/auth/authenticate", {"name": "root", "password": password}
    )
    assert status == 200, answer
    return answer["token"]


def password_file(tmp_path: Path, password: str) -> Path:
    path = tmp_path / "etcd-password"
    path.write_text(password + "\n")  # as `kubectl create secret --from-file` of an echo
    return path


def with_root(tmp_path: Path, url: str) -> ClusterConfig:
    return config(tmp_path, endpoints=[url], username="root", password_file="etcd-password")


async def test_with_the_right_password_the_store_works_and_without_it_says_why(auth_etcd, tmp_path):
    await add_root(auth_etcd, PASSWORD)
    await admin(auth_etcd, "/v3/auth/enable", {})
    password_file(tmp_path, PASSWORD)
    async with opened(with_root(tmp_path, auth_etcd)) as store:
        await assert_works(store)
    async with opened(config(tmp_path, endpoints=[auth_etcd])) as anonymous:
        message = await one_line_error(anonymous)
    assert "HTTP 400 etcdserver: user name is empty" in message
    assert "set cluster_store.username and password_file" in message


async def test_a_wrong_password_is_one_clear_error_each_call(auth_etcd, tmp_path, caplog):
    await add_root(auth_etcd, PASSWORD)
    await admin(auth_etcd, "/v3/auth/enable", {})
    password_file(tmp_path, "not the password")
    caplog.set_level(logging.INFO, logger=GATEWAY_LOG)
    async with opened(with_root(tmp_path, auth_etcd)) as store:
        for _ in range(2):  # each call asks once, and says the same
            message = await one_line_error(store)
            assert message == (
                "etcd refused user 'root': wrong user name or password (cluster_store.username, "
                f"and the password in {tmp_path / 'etcd-password'})"
            )
    assert "not the password" not in caplog.text


async def test_a_node_given_a_wrong_password_stops_with_one_error_line(auth_etcd, tmp_path):
    await add_root(auth_etcd, PASSWORD)
    await admin(auth_etcd, "/v3/auth/enable", {})
    password_file(tmp_path, "not the password")
    store = {"kind": "etcd", "endpoints": [auth_etcd], "username": "root",
             "password_file": "etcd-password"}  # fmt: skip
    node = {"name": "mbx1", "site": "a", "url": f"http://127.0.0.1:{free_port()}",
            "data_dir": "mbx1"}  # fmt: skip
    database = {"name": "DB1", "copies": [{"node": "mbx1", "activation_preference": 1}]}
    (tmp_path / "cluster.yaml").write_text(
        yaml.safe_dump(
            {"cluster": "c1", "cluster_store": store, "nodes": [node], "databases": [database]}
        )
    )
    result = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "replication_node.cli.main", "serve",
         "--config", str(tmp_path / "cluster.yaml"), "--node", "mbx1"],
        capture_output=True, text=True, timeout=60, cwd=ROOT,
        env={**os.environ, "DG_AUTH_TOKEN": TOKEN, "PYTHONPATH": str(ROOT)},
    )  # fmt: skip
    assert result.returncode == 1, result.stderr
    errors = [line for line in result.stderr.splitlines() if "WARNING" not in line]
    assert errors == [
        "error: etcd refused user 'root': wrong user name or password (cluster_store.username, "
        f"and the password in {tmp_path / 'etcd-password'})"
    ], "one line: no traceback, no unclosed session"


async def test_a_token_revoked_by_turning_auth_off_and_on_is_renewed(auth_etcd, tmp_path, caplog):
    await add_root(auth_etcd, PASSWORD)
    await admin(auth_etcd, "/v3/auth/enable", {})
    password_file(tmp_path, PASSWORD)
    caplog.set_level(logging.INFO, logger=GATEWAY_LOG)
    async with opened(with_root(tmp_path, auth_etcd)) as store:
        await assert_works(store)  # the store holds a token now
        assert "authenticating again" not in caplog.text
        old = await root_token(auth_etcd, PASSWORD)
        await admin(auth_etcd, "/v3/auth/disable", {}, token=old)
        await admin(auth_etcd, "/v3/auth/enable", {})
        status, answer = await gateway_post(auth_etcd, "/v3/kv/range", {"key": "YQ=="}, old)
        assert (status, answer["error"]) == (401, "etcdserver: invalid auth token"), "revoked"
        await assert_works(store)
    assert "etcdserver: invalid auth token; authenticating again" in caplog.text


async def test_a_rotated_password_is_read_again_from_its_file(auth_etcd, tmp_path, caplog):
    await add_root(auth_etcd, PASSWORD)
    await admin(auth_etcd, "/v3/auth/enable", {})
    password_file(tmp_path, PASSWORD)
    caplog.set_level(logging.INFO, logger=GATEWAY_LOG)
    async with opened(with_root(tmp_path, auth_etcd)) as store:
        await assert_works(store)
        token = await root_token(auth_etcd, PASSWORD)
        # etcd drops the user's tokens when its password changes: the store's one too
        changepw = {"name": "root", "password": "second"}
        await admin(auth_etcd, "/v3/auth/user/changepw", changepw, token)
        message = await one_line_error(store)  # the file still holds the old password
        assert "etcd refused user 'root': wrong user name or password" in message
        assert "etcdserver: invalid auth token; authenticating again" in caplog.text
        password_file(tmp_path, "second")  # the Secret is updated
        await assert_works(store)


async def test_a_jwt_issued_before_an_auth_change_is_renewed(pki, tmp_path, caplog):
    public, private = pki.jwt_keys
    jwt = f"jwt,pub-key={public},priv-key={private},sign-method=RS256"
    with etcd_running(tmp_path / "etcd", auth_token=jwt) as url:
        await add_root(url, PASSWORD)
        await admin(url, "/v3/auth/enable", {})
        password_file(tmp_path, PASSWORD)
        caplog.set_level(logging.INFO, logger=GATEWAY_LOG)
        async with opened(with_root(tmp_path, url)) as store:
            await assert_works(store)
            token = await root_token(url, PASSWORD)
            await admin(url, "/v3/auth/user/add", {"name": "reader", "password": "x"}, token)
            await assert_works(store)
    assert "etcdserver: revision of auth store is old; authenticating again" in caplog.text


async def test_auth_turned_on_after_the_store_started_is_followed(auth_etcd, tmp_path, caplog):
    await add_root(auth_etcd, PASSWORD)
    password_file(tmp_path, PASSWORD)
    caplog.set_level(logging.INFO, logger=GATEWAY_LOG)
    async with opened(with_root(tmp_path, auth_etcd)) as store:
        await assert_works(store)
        assert "has authentication off: calls go without a token" in caplog.text
        await admin(auth_etcd, "/v3/auth/enable", {})
        await assert_works(store)
    assert "etcdserver: user name is empty; authenticating again" in caplog.text


async def test_concurrent_calls_renew_once_and_a_token_refused_after_renewal_is_not_chased(
    tmp_path,
):
    # A gateway that takes every token but the first ("t1"), until told to take none.
    issued: list[str] = []
    refuse_all = False

    async def authenticate(request: web.Request) -> web.Response:
        issued.append(f"t{len(issued) + 1}")
        return web.json_response({"token": issued[-1]})

    async def kv(request: web.Request) -> web.Response:
        if refuse_all or request.headers.get("Authorization") in (None, "t1"):
            error = "etcdserver: invalid auth token"
            return web.json_response({"error": error, "message": error, "code": 16}, status=401)
        return web.json_response({"kvs": []})

    app = web.Application()
    app.router.add_post("/v3/auth/authenticate", authenticate)
    app.router.add_post("/v3/kv/range", kv)
    runner = web.AppRunner(app)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    gateway = EtcdGateway(
        [f"http://127.0.0.1:{port}"],
        credentials=EtcdCredentials("root", password_file(tmp_path, PASSWORD)),
    )
    store = EtcdClusterStore(gateway, cluster="x")
    try:
        assert await asyncio.gather(*(store.active(f"DB{i}") for i in range(5))) == [None] * 5
        assert issued == ["t1", "t2"], "five calls refused at once: one renewal"
        refuse_all = True
        message = await one_line_error(store)
        assert message.endswith("HTTP 401 etcdserver: invalid auth token")
        assert issued == ["t1", "t2", "t3"], "renewed once in the call, then it gives up"
    finally:
        store.close()
        await runner.cleanup()
