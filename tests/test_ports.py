"""tools/ports.py under pytest-xdist: each worker, and every process it starts, picks ports
from a slice of its own, so two workers never pick the same port (a port picked is free at
the pick, not yet bound: a node still starting holds nothing the other worker could see)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from tests.cluster_harness import ROOT
from tools.ports import _HIGH, _LOW, _range

PICK = (
    "import json; from tools.ports import free_port; "
    "print(json.dumps([free_port() for _ in range(300)]))"
)


def test_two_workers_take_disjoint_slices_of_the_range():
    slices = [
        _range({"PYTEST_XDIST_WORKER": f"gw{i}", "PYTEST_XDIST_WORKER_COUNT": "2"})
        for i in range(2)
    ]
    assert slices == [(_LOW, _LOW + 6000), (_LOW + 6000, _HIGH)]
    assert _range({}) == (_LOW, _HIGH)  # not under xdist: the whole range


def picked(worker: str) -> set[int]:
    env = {**os.environ, "PYTEST_XDIST_WORKER": worker, "PYTEST_XDIST_WORKER_COUNT": "2"}
    done = subprocess.run(
        [sys.executable, "-c", PICK], env={**env, "PYTHONPATH": str(ROOT)},
        capture_output=True, text=True, cwd=ROOT, timeout=60, check=True,
    )  # fmt: skip
    return set(json.loads(done.stdout))


def test_processes_of_two_workers_never_pick_the_same_port():
    first, second = picked("gw0"), picked("gw1")
    assert len(first) == len(second) == 300
    assert not first & second
    assert all(_LOW <= p < _LOW + 6000 for p in first)
    assert all(_LOW + 6000 <= p < _HIGH for p in second)
