"""Bad input named in an error, cut short: short input quoted whole, long input by its
first characters and its size."""

from __future__ import annotations

import subprocess
import sys

import pytest

from dag_common.echo import MAX_ECHO, clipped, quoted
from tests.cluster_harness import ROOT, cluster_config, write_cluster_config

LONG = "D" * 10_240


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("DB1", "'DB1'"),
        ("", "''"),
        ("x" * MAX_ECHO, repr("x" * MAX_ECHO)),
        ("x" * (MAX_ECHO + 1), f"{'x' * MAX_ECHO!r}…({MAX_ECHO + 1} bytes)"),
        (LONG, f"{'D' * MAX_ECHO!r}…(10240 bytes)"),
        ("é" * 100, f"{'é' * MAX_ECHO!r}…(200 bytes)"),  # bytes in UTF-8, not characters
        ("a\nb", "'a\\nb'"),  # a newline in a name stays on the error's one line
    ],
    ids=["short", "empty", "at the limit", "one over", "10 KB", "two-byte letters", "newline"],
)
def test_quoted(value, expected):
    assert quoted(value) == expected


def test_clipped_keeps_short_text_and_cuts_long_text_unquoted():
    assert clipped("/v1/status") == "/v1/status"
    assert clipped("/" + "x" * 8000) == "/" + "x" * (MAX_ECHO - 1) + "…(8001 bytes)"
    assert clipped("abcdef", 3) == "abc…(6 bytes)"


def test_a_lone_surrogate_is_counted_not_raised():
    assert quoted("\ud800" * 70).endswith("…(210 bytes)")


@pytest.mark.parametrize(
    "args",
    [
        ["replication_node.cli.main", "status", "--database", LONG],
        ["replication_node.cli.main", "status", "--node", LONG],
        ["replication_node.cli.main", "db", "suspend", LONG, "--node", "mbx1"],
        ["transport.cli", "status", "--via", LONG],
    ],
    ids=["status --database", "status --node", "db suspend", "transport status"],
)
def test_a_command_names_a_long_argument_in_one_short_line(tmp_path, args):
    config = write_cluster_config(
        tmp_path / "cluster.yaml",
        cluster_config(
            [("mbx1", "s", "http://127.0.0.1:9")],
            [{"name": "DB1", "copies": [{"node": "mbx1", "activation_preference": 1}]}],
        ),
    )
    done = subprocess.run(
        [sys.executable, "-m", *args, "--config", str(config)],
        capture_output=True, text=True, cwd=ROOT, timeout=60,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin", "DG_AUTH_TOKEN": "t" * 32},
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith("error: ") and done.stderr.count("\n") == 1, done.stderr
    assert "…(10240 bytes)" in done.stderr and len(done.stderr) < 300, done.stderr
