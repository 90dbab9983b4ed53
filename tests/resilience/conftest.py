"""The resilience suite's seed and reporting: `--seed N` (declared in tests/conftest.py)
replays a scenario's random schedule (without it, one seed is drawn per run and shown in
every test id and line), and each scenario's line of figures is printed in the terminal
summary."""

from __future__ import annotations

import random

import pytest

LINES: list[str] = []
_DRAWN = random.SystemRandom().randrange(1, 1_000_000)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "seed" in metafunc.fixturenames:
        seed = metafunc.config.getoption("--seed")
        seed = _DRAWN if seed is None else seed
        metafunc.parametrize("seed", [seed], ids=[f"seed={seed}"])


def pytest_terminal_summary(terminalreporter) -> None:  # type: ignore[no-untyped-def]
    if LINES:
        terminalreporter.section("resilience scenarios")
        for line in LINES:
            terminalreporter.write_line(line)
