"""A fixture whose setup fails after the harness started its processes leaves none running
(tests/leftover_processes.py): they are killed after the test, which fails naming them."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

LEAKS = """
import subprocess
import sys

import pytest

from tests.cluster_harness import STARTED


def _sleeper(tmp_path, name):
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)", name])
    STARTED.append(proc)
    (tmp_path.parent / f"{name}.pid").write_text(str(proc.pid))
    return proc


@pytest.fixture
def cluster_then_a_failure(tmp_path):
    _sleeper(tmp_path, "node-of-a-failed-setup")
    raise RuntimeError("the guarantee API could not listen")  # no teardown will run
    yield


def test_its_setup_fails(cluster_then_a_failure):
    pass


def test_it_stops_its_own(tmp_path):
    proc = _sleeper(tmp_path, "stopped-by-its-test")
    proc.kill()
    proc.wait()
"""


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"


def test_the_processes_of_a_failed_setup_are_killed_and_named(tmp_path: Path) -> None:
    (tmp_path / "test_leaks.py").write_text(LEAKS)
    env = {k: v for k, v in os.environ.items() if k != "PYTEST_ADDOPTS"}
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p",
         "tests.leftover_processes", "--basetemp", str(tmp_path / "base"), "test_leaks.py"],
        cwd=tmp_path, env={**env, "PYTHONPATH": str(ROOT)},
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    out = done.stdout + done.stderr
    assert "1 passed, 2 errors" in out, out
    assert "test_leaks.py::test_its_setup_fails left 1 process(es) running, killed now" in out
    assert "node-of-a-failed-setup" in out and "stopped-by-its-test" not in out, out
    pid = int((tmp_path / "base" / "node-of-a-failed-setup.pid").read_text())
    assert not _alive(pid), "the failed setup's process is still running"
