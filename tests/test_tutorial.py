"""The tutorial as a new user runs it: `docs/tutorial/run.py` starts a cluster, runs every
command the page shows as written, and what each printed must be what the page shows
(`docs/tutorial/output/`), times, ports, ids, durations and byte counts aside."""

from __future__ import annotations

import difflib
import importlib.util
import re
import subprocess
import sys

import pytest

from tests.cluster_harness import ROOT

TUTORIAL = ROOT / "docs" / "tutorial"
SHOWN = TUTORIAL / "output"


def normalize(text: str) -> str:
    spec = importlib.util.spec_from_file_location("tutorial_run", TUTORIAL / "run.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.normalize(text)


def test_the_page_includes_every_output_and_nothing_else():
    page = (TUTORIAL / "index.md").read_text()
    included = set(re.findall(r'--8<-- "tutorial/output/([\w-]+\.txt)"', page))
    assert included == {p.name for p in SHOWN.glob("*.txt")}


def test_the_readmes_tour_shows_lines_the_tutorial_printed():
    readme = (ROOT / "README.md").read_text()
    tour = readme.split("## A five-minute tour", 1)[1].split("\n## ", 1)[0]
    printed = {line for p in SHOWN.glob("*.txt") for line in normalize(p.read_text()).splitlines()}
    blocks = [b for b in tour.split("```")[1::2] if b.lstrip().startswith("$ ")]
    assert len(blocks) >= 3
    for block in blocks:
        for line in normalize(block).splitlines():
            assert not line or line in printed, f"README's tour shows what no run printed: {line}"


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_the_tutorial_prints_what_its_page_shows(tmp_path):
    out = tmp_path / "output"
    ran = subprocess.run(
        [sys.executable, str(TUTORIAL / "run.py"), "--output", str(out),
         "--workdir", str(tmp_path / "cluster")],
        capture_output=True, text=True, timeout=220, check=False,
    )  # fmt: skip
    assert ran.returncode == 0, ran.stdout[-3000:] + ran.stderr[-3000:]
    assert {p.name for p in out.iterdir()} == {p.name for p in SHOWN.glob("*.txt")}
    for shown in sorted(SHOWN.glob("*.txt")):
        expected = normalize(shown.read_text())
        got = normalize((out / shown.name).read_text())
        diff = "\n".join(difflib.unified_diff(expected.splitlines(), got.splitlines(), lineterm=""))
        assert got == expected, (
            f"{shown.name} differs from the page (python docs/tutorial/run.py rewrites it):\n{diff}"
        )
