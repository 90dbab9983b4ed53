"""Every command line explains itself: each command, option and argument has help, a
duration says how it is written, and `--version` answers, for the five commands; and it
answers at once: `--help` imports none of the libraries a command's work needs (issue 48)."""

from __future__ import annotations

import argparse
import subprocess
import sys

import pytest

from guarantee_api.cli import _parser as guarantee_parser
from mrs_client.cli import build_parser as mrs_parser
from replication_node.cli.main import build_parser as node_parser
from spark_metrics.cli import _parser as spark_parser
from tests.cluster_harness import ROOT
from transport.cli import _parser as transport_parser

PARSERS = {
    "replication-node": node_parser,
    "guarantee-api": guarantee_parser,
    "mrs": mrs_parser,
    "spark-metrics": spark_parser,
    "transport": transport_parser,
}


def walk(parser: argparse.ArgumentParser, path: str):
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from walk(sub, f"{path} {name}")
        elif not isinstance(action, (argparse._HelpAction, argparse._VersionAction)):
            yield path, action


@pytest.mark.parametrize("prog", PARSERS)
def test_every_option_and_argument_has_help(prog):
    missing = [
        f"{path} {'/'.join(a.option_strings) or a.dest}"
        for path, a in walk(PARSERS[prog](), prog)
        if not a.help
    ]
    assert missing == []


@pytest.mark.parametrize("prog", PARSERS)
def test_a_duration_option_says_how_a_duration_is_written(prog):
    for path, action in walk(PARSERS[prog](), prog):
        name = "/".join(action.option_strings)
        if action.nargs == 0:  # a flag takes no value (`db reseed --wait`: follow it)
            continue
        if action.metavar == "N":  # a count (`mrs move --large-item-limit N`: items)
            continue
        if any(w in name for w in ("interval", "limit", "wait", "refresh")):
            assert "a duration: a number and a unit" in (action.help or ""), (path, name)


@pytest.mark.parametrize(
    ("module", "prog"),
    [
        ("replication_node.cli.main", "replication-node"),
        ("guarantee_api.cli", "guarantee-api"),
        ("mrs_client.cli", "mrs"),
        ("spark_metrics.cli", "spark-metrics"),
        ("transport.cli", "transport"),
    ],
)
def test_version(module, prog):
    done = subprocess.run(
        [sys.executable, "-m", module, "--version"], capture_output=True, text=True, cwd=ROOT
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"{prog} ") and done.stdout.strip() != f"{prog} unknown"


@pytest.mark.parametrize("prog", PARSERS)
def test_every_duration_option_is_parsed_as_one(prog):
    """An option whose help says it takes a duration is parsed as one as the line is read,
    so a bad value is refused by the parser (exit 2), never by the command as a bug."""
    from dag_common.cli import DurationAction

    for path, action in walk(PARSERS[prog](), prog):
        if "a duration: a number and a unit" in (action.help or ""):
            assert isinstance(action, DurationAction), (path, action.option_strings)


@pytest.mark.parametrize(
    ("module", "args", "option"),
    [
        ("mrs_client.cli", ["move", "--mailbox", "a", "--to", "DB2", "--stall-limit", "bogus"],
         "--stall-limit"),
        ("mrs_client.cli", ["move", "--mailbox", "a", "--to", "DB2", "--flush-limit", "5 parsecs"],
         "--flush-limit"),
        ("mrs_client.cli", ["suspend", "m-1", "--wait", "soon"], "--wait"),
        ("replication_node.cli.main", ["serve", "--node", "mbx1", "--config-refresh", "x"],
         "--config-refresh"),
        ("replication_node.cli.main", ["cluster", "up", "--config-refresh", "1y"],
         "--config-refresh"),
    ],
)  # fmt: skip
def test_a_bad_duration_is_one_error_line_naming_the_option(tmp_path, module, args, option):
    done = subprocess.run(
        [sys.executable, "-m", module, *args, "--config", str(tmp_path / "none.yaml")],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith(f"error: {option}: ") and done.stderr.count("\n") == 1, (
        done.stderr
    )
    assert "is not a duration (use e.g. 500ms, 30s" in done.stderr
    assert done.stdout == ""


# What a command's work imports, and `--help` must not: each costs a tenth of a second or
# more to import (issue 48: `replication-node --help` took 0.6-1.8 s).
HEAVY = ("aiohttp", "pydantic", "grpc", "yaml", "orjson", "rich", "pyspark", "prometheus_client")
IMPORTED = """
import sys
from importlib import import_module
code = import_module(sys.argv[1]).main(sys.argv[2:])
heavy = sorted({name.split(".")[0] for name in sys.modules} & set(HEAVY))
print("imported:", *heavy)
sys.exit(code)
"""


@pytest.mark.parametrize(
    ("module", "args"),
    [
        ("replication_node.cli.main", ["--help"]),
        ("replication_node.cli.main", ["db", "--help"]),
        ("replication_node.cli.main", ["cluster", "--help"]),
        ("replication_node.cli.main", ["log", "--help"]),
        ("replication_node.cli.main", ["--version"]),
        ("replication_node.cli.main", ["no-such-command"]),
        ("mrs_client.cli", ["--help"]),
        ("mrs_client.cli", ["--version"]),
        ("transport.cli", ["--help"]),
        ("guarantee_api.cli", ["--help"]),
        ("spark_metrics.cli", ["--help"]),
    ],
)
def test_help_imports_none_of_what_the_commands_work_needs(module, args):
    """In a fresh interpreter: `--help` (and a command's group listing, `--version`, a
    mistyped command) reads its table of commands, never a command's module."""
    done = subprocess.run(
        [sys.executable, "-c", IMPORTED.replace("HEAVY", repr(HEAVY)), module, *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert done.returncode == (2 if args == ["no-such-command"] else 0), done.stderr
    assert done.stdout.splitlines()[-1] == "imported:", (module, args, done.stdout[-300:])
