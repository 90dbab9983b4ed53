"""`make help` (and `make` alone) lists every target with what it does: at least each one
the README names, so that a newcomer finds them without reading the Makefile."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def make(*args: str) -> str:
    done = subprocess.run(
        ["make", "-s", *args], cwd=ROOT, capture_output=True, text=True, timeout=60, check=True
    )
    return done.stdout


def listed() -> dict[str, str]:
    """Target -> description, as `make help` prints them."""
    lines = [line.split(None, 2) for line in make("help").splitlines()]
    return {words[1]: words[2] if len(words) > 2 else "" for words in lines if words[0] == "make"}


def test_help_describes_every_target_the_readme_names():
    targets = listed()
    readme = (ROOT / "README.md").read_text()
    named = set(re.findall(r"`make ([a-z][a-z-]*)", readme))
    assert {"demo", "test", "help"} <= named
    assert named <= targets.keys(), named - targets.keys()
    assert all(targets[t] for t in named), {t: targets[t] for t in named}
    # The README's list of targets says what `make help` says of each.
    shown = dict(re.findall(r"^make ([a-z][a-z-]*) +# (.*)$", readme, re.MULTILINE))
    assert {"help", "test", "image", "docs"} <= shown.keys()
    assert {t: targets.get(t) for t in shown} == shown


def test_make_alone_lists_the_targets_and_does_nothing_else():
    assert make() == make("help")
