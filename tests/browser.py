"""Headless Chromium for the tests that look at a page as a person does (Debian's
`chromium`, in the Makefile's SYSTEM_PACKAGES): one way to start it, whatever is asked of
it (`--screenshot=FILE`, `--dump-dom`).  Missing, it fails the test with what to install,
as promtool and etcd do: a browser test that skips proves nothing."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

FLAGS = (
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
    "--disable-component-update", "--no-first-run", "--no-proxy-server", "--hide-scrollbars",
)  # fmt: skip


def chromium(url: str, *args: str, profile: Path, timeout: float = 120) -> str:
    """Open `url` in headless Chromium with `args` and a fresh `profile`; its stdout (the
    DOM, with `--dump-dom`)."""
    binary = shutil.which("chromium") or shutil.which("chromium-browser")
    assert binary, "chromium is missing: install Debian's 'chromium' (make system-deps does)"
    done = subprocess.run(
        [binary, *FLAGS, f"--user-data-dir={profile}", *args, url],
        capture_output=True, text=True, errors="replace", timeout=timeout, check=False,
    )  # fmt: skip
    assert done.returncode == 0, f"chromium exited {done.returncode}: {done.stderr[-2000:]}"
    return done.stdout
