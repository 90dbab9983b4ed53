"""tools/install_debs.sh, what `make test` runs first: it waits for another apt or dpkg to
let go of its lock, and a package that cannot be had stops it with one clear line (the
tests that need the package would otherwise fail one by one, or hang)."""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "tools" / "install_debs.sh"
LISTS_LOCK = Path("/var/lib/apt/lists/lock")
ABSENT = "dag-test-absent-command"

pytestmark = pytest.mark.skipif(
    shutil.which("apt-get") is None or os.geteuid() != 0, reason="needs apt-get, as root"
)


def install(*pairs: str, **env: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        ["sh", str(SCRIPT), *pairs], env={**os.environ, **env},
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip


@pytest.fixture
def lists_locked() -> Iterator[object]:
    """apt's lists lock, held here as another apt-get update holds it (an fcntl lock)."""
    with LISTS_LOCK.open("a") as f:
        fcntl.lockf(f, fcntl.LOCK_EX)
        yield f


def test_nothing_to_do_when_every_command_is_there() -> None:
    done = install("sh:dash", "apt-get:apt")
    assert done.communicate(timeout=30) == ("", "") and done.returncode == 0


def test_a_package_that_cannot_be_had_stops_make() -> None:
    done = subprocess.run(
        ["make", "-s", "system-deps", f"SYSTEM_PACKAGES={ABSENT}:dag-test-no-such-package",
         "IMAGE_PACKAGES=sh:dash"],
        cwd=ROOT, capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    out, err = done.stdout, done.stderr
    assert done.returncode != 0, out + err
    assert (
        "error: cannot install the Debian packages dag-test-no-such-package: "
        "apt-get install failed" in err
    ), err


def test_waits_for_the_lock_then_goes_on(lists_locked) -> None:
    # coreutils is installed, so the install is a no-op; it gives no such command, which is
    # the error this ends with once it got past the lock.
    done = install(f"{ABSENT}:coreutils")
    assert done.stdout is not None
    assert done.stdout.readline() == "installing Debian packages: coreutils\n"
    assert done.stdout.readline().startswith("waiting for another apt or dpkg to finish")
    fcntl.lockf(lists_locked, fcntl.LOCK_UN)
    _, err = done.communicate(timeout=600)
    assert done.returncode == 1
    assert f"coreutils is installed but gives no command {ABSENT}" in err, err


def test_a_lock_held_too_long_fails_clearly(lists_locked) -> None:
    done = install(f"{ABSENT}:coreutils", APT_LOCK_WAIT="0")
    _, err = done.communicate(timeout=60)
    assert done.returncode == 1
    assert "another apt or dpkg held its lock for 0s" in err, err
