"""The resilience suite's seed and reporting: `--seed N` (declared in tests/conftest.py)
replays a scenario's random schedule (without it, one seed is drawn per run and shown in
every test id and line), and each scenario's line of figures is printed in the terminal
summary (by tests/conftest.py, from the reports: under pytest-xdist this conftest is
loaded in the workers only, and the summary is printed by the controller)."""

from __future__ import annotations

import hashlib
import os
import random

import pytest

LINES: list[str] = []


def _drawn() -> int:
    """One seed per run.  Under pytest-xdist every worker collects every test and their ids
    must agree, so the seed is derived from the run's id, which xdist gives every worker."""
    run = os.environ.get("PYTEST_XDIST_TESTRUNUID")
    if run:
        return int(hashlib.sha256(run.encode()).hexdigest(), 16) % 999_999 + 1
    return random.SystemRandom().randrange(1, 1_000_000)


_DRAWN = _drawn()


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "seed" in metafunc.fixturenames:
        seed = metafunc.config.getoption("--seed")
        seed = _DRAWN if seed is None else seed
        metafunc.parametrize("seed", [seed], ids=[f"seed={seed}"])


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]):  # type: ignore[no-untyped-def]
    """The scenario's line (tests/resilience/scenario.py appends it to LINES) goes with its
    report, which xdist hands the controller whole."""
    outcome = yield
    report = outcome.get_result()
    while LINES:
        report.user_properties.append((SCENARIO_LINE, LINES.pop(0)))


SCENARIO_LINE = "resilience scenario"
