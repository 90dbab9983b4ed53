"""Options every test run accepts.  pytest reads options only from the conftest files it
loads at start (this one, whatever the tests chosen), so the resilience suite's `--seed`
is declared here and used in tests/resilience/conftest.py; and, for the same reason, the
plugin that fails a test leaving a grpc.aio server running (tests/grpc_servers.py) is
loaded here, as are the one that starts private mail servers (tests/mail_servers.py) and the
one that kills, and fails a test for, the harness's node processes it left running
(tests/leftover_processes.py).

`make test` runs the suite in two pytest-xdist workers (`-n 2 --dist loadgroup`, the
Makefile says why).  What must not run beside itself in the other worker is put in one
group here (GROUPS): each group runs in one worker, its tests one after another."""

from __future__ import annotations

import pytest

pytest_plugins = ["tests.grpc_servers", "tests.mail_servers", "tests.leftover_processes"]

# group: (why its tests share one worker, the paths under tests/ whose tests are in it)
GROUPS: dict[str, tuple[str, tuple[str, ...]]] = {
    "host-network": (
        "the host's network: the labs' bridges, namespaces, iptables and tc, podman's store "
        "and its rootful bridge network with the firewall rules it adds; and the fault "
        "scenarios' timings (a partition, a disk filling) read while nothing else cuts links",
        ("resilience/", "replication_node/test_partition_e2e.py", "image/"),
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


def group_of(nodeid: str) -> str | None:
    """The group of a test by its node id (`tests/resilience/test_x.py::test_y`)."""
    where = nodeid.split("::", 1)[0].removeprefix("tests/")
    for name, (_, paths) in GROUPS.items():
        if where.startswith(paths):
            return name
    return None


@pytest.hookimpl(optionalhook=True)  # a run without xdist (-p no:xdist) has no such hook
def pytest_xdist_make_scheduler(config: pytest.Config, log):  # type: ignore[no-untyped-def]
    """With `--dist loadgroup`, xdist's scheduling by scope, each group one scope.  Not its
    own `xdist_group` marks: xdist 3.8 tells the controller a test's group by appending it to
    the test's node id, which pytest 9.2 no longer lets it change (its tests then spread over
    both workers).  The controller collects nothing, so the group is read from the node id's
    path.  Scopes are queued by their number of tests, most first, and every other test is a
    scope of one: the groups start at once, each in one worker, and the rest is shared as
    the workers come free."""
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class GroupScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            group = group_of(nodeid)
            return f"group:{group}" if group else nodeid

    return GroupScheduling(config, log)


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
