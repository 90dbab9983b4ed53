"""The benchmark scripts still import against the code they measure: a refactor that moves
a name breaks `bench/` at once here, not at the next session's measurement (issue 33's
layers moved `PassiveSettings` and left bench/large_items.py failing for a day).  Each
script is loaded as a module, not run: its `main` stays behind `if __name__ ...`."""

from __future__ import annotations

import importlib.util
import subprocess
import sys

import pytest

from tests.cluster_harness import ROOT

SCRIPTS = sorted(p.name for p in (ROOT / "bench").glob("*.py"))


@pytest.mark.parametrize("script", SCRIPTS)
def test_a_bench_script_imports(script):
    spec = importlib.util.spec_from_file_location(f"bench_{script[:-3]}", ROOT / "bench" / script)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    try:
        spec.loader.exec_module(module)
    finally:
        del sys.modules[spec.name]


def test_a_bench_script_answers_help():
    """One of them run as a stranger would: --help, exit 0."""
    done = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "shipping.py"), "--help"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr
    assert "usage" in done.stdout
