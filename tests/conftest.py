"""Options every test run accepts.  pytest reads options only from the conftest files it
loads at start (this one, whatever the tests chosen), so the resilience suite's `--seed`
is declared here and used in tests/resilience/conftest.py; and, for the same reason, the
plugin that fails a test leaving a grpc.aio server running (tests/grpc_servers.py) is
loaded here, as is the one that starts private mail servers (tests/mail_servers.py).

`make test` runs the suite in two pytest-xdist workers (`-n 2 --dist loadgroup`, the
Makefile says why).  What must not run beside itself in the other worker is put in one
`xdist_group` here (GROUPS): each group runs in one worker, its tests one after another."""

from __future__ import annotations

import os

import pytest

pytest_plugins = ["tests.grpc_servers", "tests.mail_servers"]

# group: (why its tests share one worker, the paths under tests/ whose tests are in it)
GROUPS: dict[str, tuple[str, tuple[str, ...]]] = {
    "netns": (
        "bridges, network namespaces, iptables and tc on the host; the fault scenarios' "
        "timings (a partition, a disk filling) are read while nothing else cuts links",
        ("resilience/", "replication_node/test_partition_e2e.py"),
    ),
    "image": (
        "podman's one store and its rootful bridge network: images built, tagged, run",
        ("image/",),
    ),
    "apt": (
        "the host's apt and dpkg locks, which these tests hold and wait on",
        ("test_install_debs.py",),
    ),
    "spark": (
        "one JVM for the session's SparkSession, not one per worker on two cores",
        ("spark_metrics/",),
    ),
}


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--seed",
        type=int,
        default=None,
        help="the resilience scenarios' random schedule (replays a failed run's seed)",
    )


def group_of(item: pytest.Item) -> str | None:
    where = str(item.path).replace(os.sep, "/").split("/tests/", 1)[-1]
    for name, (_, paths) in GROUPS.items():
        if where.startswith(paths):
            return name
    return None


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Each group's tests marked.  xdist's loadgroup queues its units by their number of
    tests, most first, and every other test is a unit of one: the groups start at once, each
    in one worker, and the rest is shared as the workers come free."""
    for item in items:
        if (group := group_of(item)) is not None:
            item.add_marker(pytest.mark.xdist_group(group))


def pytest_terminal_summary(terminalreporter) -> None:  # type: ignore[no-untyped-def]
    """The resilience scenarios' lines of figures (tests/resilience/conftest.py puts each
    in its test's report, which reaches this process from an xdist worker as well)."""
    lines = [
        value
        for reports in terminalreporter.stats.values()
        for report in reports
        for key, value in getattr(report, "user_properties", ())
        if key == "resilience scenario"
    ]
    if lines:
        terminalreporter.section("resilience scenarios")
        for line in lines:
            terminalreporter.write_line(line)
