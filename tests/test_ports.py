"""tools/ports.py under pytest-xdist: each worker, and every process it starts, picks ports
from a slice of its own, so two workers never pick the same port (a port picked is free at
the pick, not yet bound: a node still starting holds nothing the other worker could see);
and no two processes on the machine pick the same port within tools.ports.RESERVED_FOR,
whatever their slices and offsets (a CI run's worker lost a node's start to "127.0.0.1:25943
is already in use by another process")."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from subprocess import PIPE

from tests.cluster_harness import ROOT
from tools.ports import _HIGH, _LOW, RESERVED_FOR, _range, _read

PICK = (
    "import json; from tools.ports import free_port; "
    "print(json.dumps([free_port() for _ in range(300)]))"
)
# Two processes starting at the same offset of the same slice: what a worker's child (a bench,
# the tutorial) or another run's worker of the same number does whenever its offset comes
# near this one's.
PICK_FROM_THE_START = (
    "import itertools, json, sys; import tools.ports as p; "
    "p._PORTS = itertools.cycle(range(p._low, p._high)); "
    "sys.stdin.readline(); "
    "print(json.dumps([p.free_port() for _ in range(200)]))"
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
    env.pop("DAG_PORT_RESERVATIONS", None)
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


def test_two_processes_at_one_offset_never_pick_the_same_port(tmp_path):
    """Picked at once, from the same slice and the same offset: no port twice."""
    env = {
        **os.environ,
        "PYTEST_XDIST_WORKER": "gw0",
        "PYTEST_XDIST_WORKER_COUNT": "2",
        "DAG_PORT_RESERVATIONS": str(tmp_path / "reserved"),
        "PYTHONPATH": str(ROOT),
    }
    command = [sys.executable, "-c", PICK_FROM_THE_START]
    procs = [
        subprocess.Popen(command, env=env, cwd=ROOT, text=True, stdin=PIPE, stdout=PIPE)
        for _ in range(2)
    ]
    outs = [proc.communicate("go\n", timeout=60)[0] for proc in procs]
    assert [proc.returncode for proc in procs] == [0, 0]
    first, second = (set(json.loads(out)) for out in outs)
    assert len(first) == len(second) == 200
    assert not first & second, sorted(first & second)[:10]


def test_a_reservation_lasts_its_time_and_no_longer():
    text = "20001 110.0\n20002 100.5\n20003 99.0\nbroken\n20004 9999.0\n"
    assert _read(text, 100.0) == {20001: 110.0, 20002: 100.5}
    assert RESERVED_FOR < 9899  # 20004's expiry is from before a reboot: not held
