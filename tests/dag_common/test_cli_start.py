"""A status read starts with what its work needs (issue 48, item 15): the config, the HTTP
client, the stores it reads; not the modules of other commands' work, and not the system's
CA bundle, which no call to a cluster without `tls:` uses.  `bench/cli_start.py` times it;
this holds it deterministically, as test_cli_help.py holds `--help` (a timing test would not
be): each command run as its console script runs (`entry`, through `exit_now`), in a fresh
interpreter, against nodes and a transport that refuse the connection."""

from __future__ import annotations

import subprocess
import sys

import pytest
import yaml

from tests.cluster_harness import ROOT
from tools.ports import free_port

# Runs `module.entry()` with argv, and says at its exit (exit_now's os._exit) what it imported
# of WATCHED, whether aiohttp's default TLS context read the system's CAs, and pydantic's
# plugin switch.
ENTRY = """
import os, sys
from importlib import import_module
WATCHED = {watched!r}
real_exit = os._exit

def report(code):
    connector = sys.modules.get("aiohttp.connector")
    cas = "-" if connector is None else (
        "unread" if "_cas_pending" in vars(connector._SSL_CONTEXT_VERIFIED) else "read")
    print("imported:", *sorted(WATCHED & set(sys.modules)))
    print("system CAs:", cas)
    print("pydantic plugins:", os.environ.get("PYDANTIC_DISABLE_PLUGINS"))
    sys.stdout.flush()
    real_exit(code)

os._exit = report
sys.argv = sys.argv[1:]  # the module, then its arguments (entry reads sys.argv[1:])
module = sys.argv[0]
import_module(module).entry()
"""

# What a status read has no use for: each was imported by one of them before (issue 48).
WATCHED = {
    "aiohttp.web",  # the server side of aiohttp (transport status, by transport.messages)
    "dag_common.http_body",  # the same
    "dag_common.store_api",  # the store API's models (mrs list, by the move records)
    "replication_node.log.logfile",  # the log format (replication-node status, by a constant)
    "transport.app",  # the transport service
    "replication_node.node",  # the node
    "grpc",  # the guarantee service's wire
    "rich",  # only to draw on a terminal
    "aiohttp",  # a command that calls nothing over HTTP (mrs list); the status reads, which
    # call with the blocking client (dag_common.blocking_http)
    "asyncio",  # a read with no event loop (transport status; a clock took it in before)
    "dag_common.mailbox_digest",  # the digest's sums and the email parser (mrs list, by the
    # records' skipped items); a transport's messages use it (transport status)
}


@pytest.fixture(scope="module")
def config(tmp_path_factory):
    d = tmp_path_factory.mktemp("start")
    url = lambda: f"http://127.0.0.1:{free_port()}"  # noqa: E731 - nothing listens there
    path = d / "cluster.yaml"
    path.write_text(
        yaml.safe_dump({
            "cluster": "start",
            "cluster_store": {"kind": "embedded", "path": "cluster.db"},
            "nodes": [{"name": n, "site": "s", "url": url(), "data_dir": n} for n in ("a", "b")],
            "transports": [{"name": "hub1", "site": "s", "url": url(), "data_dir": "h"}],
            "databases": [{"name": "DB1", "copies": [{"node": "a", "activation_preference": 1}]}],
        })
    )  # fmt: skip
    return path


@pytest.mark.parametrize(
    ("module", "args", "uses"),
    [
        ("replication_node.cli.main", ["status"], ["asyncio"]),  # the embedded store's
        ("mrs_client.cli", ["list"], ["asyncio"]),  # its move store's
        ("transport.cli", ["status", "--via", "hub1"], ["dag_common.mailbox_digest"]),
    ],
)
def test_a_status_read_imports_what_it_uses(config, module, args, uses):
    env = {"PATH": "/usr/bin:/bin", "DG_AUTH_TOKEN": "start-token-0123456789abcdef"}
    done = subprocess.run(
        [sys.executable, "-c", ENTRY.format(watched=WATCHED), module, *args, "--config",
         str(config)],
        capture_output=True, text=True, cwd=ROOT, env={**env, "PYTHONPATH": str(ROOT)},
        timeout=120,
    )  # fmt: skip
    lines = done.stdout.splitlines()[-3:]
    uses_aiohttp = "aiohttp" in uses
    assert lines == [
        " ".join(["imported:", *uses]),
        f"system CAs: {'unread' if uses_aiohttp else '-'}",
        "pydantic plugins: __all__",
    ], (done.stdout[-1000:], done.stderr[-1000:])
