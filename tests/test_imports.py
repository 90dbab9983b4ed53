"""No import cycle: every module of the product imports first, on its own, in a fresh
interpreter (a forked child of one that imported none of them)."""

from __future__ import annotations

import subprocess
import sys

from tests.cluster_harness import ROOT

CHECK = r"""
import os, sys
from pathlib import Path
names = []
for package in sys.argv[1:]:  # found on disk: finding them by import would import them
    for path in sorted(Path(package).rglob("*.py")):
        parts = path.with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        if parts[-1] != "__main__":  # running it is its import
            names.append(".".join(parts))
assert not any(m.split(".")[0] in sys.argv[1:] for m in sys.modules)
limit, running = os.cpu_count() or 1, {}
def reap():
    pid, status = os.wait()
    if status != 0:
        print(f"FAILED {running[pid]}", flush=True)
    del running[pid]
for name in names:
    if len(running) >= limit:
        reap()
    pid = os.fork()
    if pid == 0:
        try:
            __import__(name)
        except BaseException as exc:
            print(f"import {name}: {type(exc).__name__}: {exc}", flush=True)
            os._exit(1)
        os._exit(0)
    running[pid] = name
while running:
    reap()
print(f"checked {len(names)}", flush=True)
"""

PACKAGES = (
    "dag_common",
    "replication_node",
    "guarantee_api",
    "mrs_client",
    "spark_metrics",
    "transport",
    "imap_front",
)


def test_every_module_imports_first_on_its_own():
    done = subprocess.run(
        [sys.executable, "-c", CHECK, *PACKAGES],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr
    assert "FAILED" not in done.stdout, done.stdout
    checked = int(done.stdout.rsplit("checked ", 1)[1])
    assert checked > 90, done.stdout
