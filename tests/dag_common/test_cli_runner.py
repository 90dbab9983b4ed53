"""The one runner behind every command line: each way a command can end is one line and its
exit code (0 ok, 1 failed, 2 bad input), never a traceback; and the four real commands, run
as a stranger would run them, keep to it."""

from __future__ import annotations

import argparse
import socket
import subprocess
import sys

import aiohttp
import pytest

from dag_common.cli import run
from dag_common.errors import ConfigError, DagError
from tests.cluster_harness import ROOT, cluster_config, free_port, write_cluster_config


class Refused(DagError):
    pass


def _parser(raise_: BaseException | None) -> argparse.ArgumentParser:
    def command(args: argparse.Namespace) -> int:
        if raise_ is not None:
            raise raise_
        print("done")
        return 0

    parser = argparse.ArgumentParser(prog="toy")
    parser.add_argument("--verbose", action="store_true")
    parser.add_argument("--count", type=int, default=1)
    parser.set_defaults(func=command)
    return parser


@pytest.mark.parametrize(
    ("raised", "code", "line"),
    [
        (None, 0, None),
        (ConfigError("cluster.yaml: nodes[0].url: missing"), 2, "nodes[0].url: missing"),
        (Refused("unknown mailbox 'x'"), 2, "unknown mailbox 'x'"),
        (DagError("the node refused: 409"), 1, "the node refused: 409"),
        (aiohttp.ClientConnectionError("Cannot connect to host"), 1, "Cannot connect to host"),
        (TimeoutError(), 1, "a call got no answer in time"),
        (FileNotFoundError(2, "No such file or directory", "/x/y"), 1, "/x/y: No such file"),
        (OSError(22, "Invalid argument"), 1, "Invalid argument (in command, test_cli_runner.py:"),
        (KeyboardInterrupt(), 1, None),
        (KeyError("copies"), 1, "unexpected KeyError: 'copies' (a bug; --verbose shows where)"),
    ],
)
def test_each_way_a_command_ends_is_one_line_and_its_exit_code(capsys, raised, code, line):
    assert run(_parser(raised), [], bad_input=(Refused,)) == code
    err = capsys.readouterr().err
    assert "Traceback" not in err
    if line is None:
        assert err == ""
    else:
        assert err.count("\n") == 1 and err.startswith("error: ") and line in err, err


def test_bad_arguments_exit_2_and_help_exits_0(capsys):
    assert run(_parser(None), ["--count", "many"]) == 2
    assert "invalid int value" in capsys.readouterr().err
    assert run(_parser(None), ["--help"]) == 0
    assert "usage: toy" in capsys.readouterr().out


def _cli(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=timeout,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin", "DG_AUTH_TOKEN": "t" * 32},
    )


@pytest.fixture
def config_of_a_node_that_is_down(tmp_path):
    port = free_port()  # a port nothing listens on
    url = f"http://127.0.0.1:{port}"
    hub = f"http://127.0.0.1:{free_port()}"  # nor on this one
    path = write_cluster_config(
        tmp_path / "cluster.yaml",
        cluster_config(
            [("mbx1", "s", url)],
            [{"name": "DB1", "copies": [{"node": "mbx1", "activation_preference": 1}]}],
            guarantee_api={"listen": f"127.0.0.1:{port}", "http_listen": "127.0.0.1:0"},
            transports=[{"name": "hub1", "site": "s", "url": hub, "data_dir": "hub1"}],
        ),
    )
    return path


# What aiohttp says of a connection it could not make, which no operator should read.
LIBRARY_TEXT = ("ClientConnectorError", "Cannot connect to host", "ssl:default", "Errno",
                "Connect call failed", "ClientOSError", "Error(")  # fmt: skip


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["db", "suspend", "DB1", "--node", "mbx1"], "node mbx1 (http://127.0.0.1:"),
        (["db", "resume", "DB1", "--node", "mbx1"], "node mbx1 (http://127.0.0.1:"),
        (["db", "reseed", "DB1", "--node", "mbx1", "--wait"], "node mbx1 (http://127.0.0.1:"),
        (["db", "activate", "DB1", "--node", "mbx1"], "node mbx1 (http://127.0.0.1:"),
        (["db", "switchover", "DB1", "--to", "mbx1"], "node mbx1 (http://127.0.0.1:"),
        (["db", "backup", "DB1", "--from", "mbx1", "--to", "/nowhere"], "node mbx1 (http"),
        (["db", "history", "DB1"], "no node answered: node mbx1 (http://127.0.0.1:"),
        (["db", "roll-log", "DB1"], "no reachable active copy of DB1: node mbx1"),
        (["db", "mount", "DB1"], "no reachable active copy of DB1: node mbx1"),
        (["audit"], "node mbx1 (http://127.0.0.1:"),
        (["mailbox", "create", "alice", "--database", "DB1"], "DB1 can be reached: node mbx1"),
        (["mailbox", "list", "alice", "--database", "DB1"], "DB1 can be reached: node mbx1"),
        (["mailbox", "where", "alice"], "no node answered: node mbx1 (http://127.0.0.1:"),
    ],
)
def test_a_node_that_cannot_be_reached_is_one_line_naming_it(
    config_of_a_node_that_is_down, args, says
):
    done = _cli("replication_node.cli.main", *args, "--config", str(config_of_a_node_that_is_down))
    assert done.returncode == 1, done.stderr
    assert done.stdout == "" and done.stderr.count("\n") == 1, done.stderr
    assert says in done.stderr and "cannot be reached" in done.stderr, done.stderr
    assert "connection refused" in done.stderr, done.stderr
    assert not any(text in done.stderr for text in LIBRARY_TEXT), done.stderr


@pytest.mark.parametrize(
    "args",
    [
        ["submit", "--via", "hub1", "--to", "alice", "--message-id", "m1"],
        ["status", "--via", "hub1"],
        ["poison", "--via", "hub1"],
    ],
)
def test_a_transport_that_cannot_be_reached_is_one_line_naming_it(
    config_of_a_node_that_is_down, args
):
    done = _cli("transport.cli", *args, "--config", str(config_of_a_node_that_is_down))
    assert done.returncode == 1, done.stderr
    assert done.stdout == "" and done.stderr.count("\n") == 1, done.stderr
    assert done.stderr.startswith("error: transport hub1 (http://127.0.0.1:"), done.stderr
    assert done.stderr.endswith(" cannot be reached: connection refused\n"), done.stderr
    assert not any(text in done.stderr for text in LIBRARY_TEXT), done.stderr


@pytest.mark.parametrize(
    ("args", "code", "says"),
    [
        (["db", "suspend", "DB9", "--node", "mbx1"], 2, "no database 'DB9'"),
        (["status"], 1, "unreachable: connection refused"),
    ],
)
def test_replication_node_against_a_node_that_is_down(
    config_of_a_node_that_is_down, args, code, says
):
    done = _cli("replication_node.cli.main", *args, "--config", str(config_of_a_node_that_is_down))
    text = done.stdout + done.stderr
    assert done.returncode == code, text
    assert "Traceback" not in text and says in text, text


def test_a_bad_config_is_exit_2_for_every_command(tmp_path):
    bad = tmp_path / "cluster.yaml"
    bad.write_text("cluster: t\nnodes: [}\n")
    for args in (
        ["replication_node.cli.main", "status", "--config", str(bad)],
        ["mrs_client.cli", "list", "--config", str(bad)],
        ["guarantee_api.cli", "serve", "--config", str(bad)],
        ["spark_metrics.cli", "aggregate", "--input", str(tmp_path), "--output",
         str(tmp_path / "o"), "--config", str(bad)],
    ):  # fmt: skip
        done = _cli(*args)
        assert done.returncode == 2, (args, done.stderr)
        assert done.stderr.startswith("error: ") and "Traceback" not in done.stderr, done.stderr


def test_a_guarantee_service_on_a_taken_port_exits_2(config_of_a_node_that_is_down):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        text = config_of_a_node_that_is_down.read_text()
        config_of_a_node_that_is_down.write_text(
            text.replace("http_listen: 127.0.0.1:0", f"http_listen: 127.0.0.1:{port}")
        )
        done = _cli("guarantee_api.cli", "serve", "--config", str(config_of_a_node_that_is_down))
    assert done.returncode == 2, done.stderr  # what it would take is taken: nothing started
    assert done.stderr == (
        f"error: guarantee API (HTTP): 127.0.0.1:{port} is already in use by another process\n"
    )
