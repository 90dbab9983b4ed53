"""Options every test run accepts.  pytest reads options only from the conftest files it
loads at start (this one, whatever the tests chosen), so the resilience suite's `--seed`
is declared here and used in tests/resilience/conftest.py; and, for the same reason, the
plugin that fails a test leaving a grpc.aio server running (tests/grpc_servers.py) is
loaded here, as is the one that starts private mail servers (tests/mail_servers.py)."""

from __future__ import annotations

import pytest

pytest_plugins = ["tests.grpc_servers", "tests.mail_servers"]


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--seed",
        type=int,
        default=None,
        help="the resilience scenarios' random schedule (replays a failed run's seed)",
    )
