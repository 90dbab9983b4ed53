"""aiohttp imported with its default TLS contexts' system CAs read on first use
(`dag_common.tls_on_use`, issue 48): not read at import, and an https:// call on aiohttp's
default context verifies the server as it always did, the CAs read then.

Each case is a fresh interpreter (aiohttp imported once per process), a real TLS server on
port 0 and a real aiohttp client; the "system's CAs" are a test CA named by SSL_CERT_FILE,
which OpenSSL's default paths read."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.cluster_harness import ROOT
from tests.pki import issue, make_ca

CLIENT = """
import asyncio, ssl, sys
from pathlib import Path
from dag_common.tls_on_use import defer_aiohttp_tls
if sys.argv[1] == "deferred":
    defer_aiohttp_tls()
import aiohttp
import aiohttp.connector as connector
from aiohttp import web

def state():
    return "pending" if "_cas_pending" in vars(connector._SSL_CONTEXT_VERIFIED) else "read"

async def main(cert, key):
    server_tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_tls.load_cert_chain(cert, key)
    app = web.Application()
    app.router.add_get("/", lambda request: web.Response(text="hello"))
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=server_tls)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]
    print("at import:", state())
    try:
        async with aiohttp.ClientSession() as s, s.get(f"https://127.0.0.1:{port}/") as r:
            print("answer:", r.status, await r.text())
    except aiohttp.ClientConnectorCertificateError:
        print("answer: certificate refused")
    finally:
        await runner.cleanup()
    print("after:", state())

asyncio.run(main(sys.argv[2], sys.argv[3]))
"""


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    d = tmp_path_factory.mktemp("pki")
    trusted, stranger = make_ca(d, "trusted-ca"), make_ca(d, "stranger-ca")
    ext = "subjectAltName = IP:127.0.0.1\nextendedKeyUsage = serverAuth\n"
    return {
        "ca": trusted[0],
        "known": issue(d, "known", trusted, ext),
        "unknown": issue(d, "unknown", stranger, ext),
    }


def client(mode: str, server: tuple, ca) -> list[str]:
    env = {**os.environ, "SSL_CERT_FILE": str(ca), "PYTHONPATH": str(ROOT)}
    env.pop("SSL_CERT_DIR", None)
    done = subprocess.run(
        [sys.executable, "-c", CLIENT, mode, *map(str, server)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


@pytest.mark.parametrize("mode", ["deferred", "as aiohttp does"])
def test_a_server_the_system_trusts_is_verified_on_the_default_context(pki, mode):
    lines = client(mode, pki["known"], pki["ca"])
    at_import = "pending" if mode == "deferred" else "read"
    assert lines == [f"at import: {at_import}", "answer: 200 hello", "after: read"]


@pytest.mark.parametrize("mode", ["deferred", "as aiohttp does"])
def test_a_server_the_system_does_not_trust_is_refused(pki, mode):
    lines = client(mode, pki["unknown"], pki["ca"])
    assert lines[1:] == ["answer: certificate refused", "after: read"]


def test_nothing_changes_once_aiohttp_is_imported():
    """Called after aiohttp's import, it does nothing (the contexts are read already), and
    `ssl.SSLContext` is left as it was."""
    code = (
        "import ssl, sys, aiohttp, aiohttp.connector as c\n"
        "from dag_common.tls_on_use import defer_aiohttp_tls\n"
        "defer_aiohttp_tls()\n"
        "print(len(sys.meta_path), 'set_default_verify_paths' in vars(ssl.SSLContext),\n"
        "      type(c._SSL_CONTEXT_VERIFIED) is ssl.SSLContext)\n"
    )
    plain = subprocess.run(
        [sys.executable, "-c", code.replace("defer_aiohttp_tls()\n", "")],
        capture_output=True, text=True, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
    )  # fmt: skip
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True, text=True, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout == plain.stdout
    assert done.stdout.split()[1:] == ["False", "True"]
