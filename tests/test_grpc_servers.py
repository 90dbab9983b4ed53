"""A test that leaves a grpc.aio server running fails, naming it, and the run still ends
with its summary (tests/grpc_servers.py): without that plugin the same run hangs for good in
grpc's shutdown once the server is collected."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

LEAKS = """
import asyncio

import grpc


async def _started() -> grpc.aio.Server:
    server = grpc.aio.server()
    server.add_insecure_port("127.0.0.1:0")
    await server.start()
    return server


async def test_async_leak():
    server = await _started()  # the failure's traceback keeps it past the test's loop
    assert server is None, "fails before it stops its server"


async def test_async_stops_its_server():
    server = await _started()
    await server.stop(None)


def test_sync_leak():
    global KEPT
    KEPT = asyncio.run(_started())


def test_after_them():
    import gc

    gc.collect()
"""


def _inner_env() -> dict[str, str]:
    """The environment of the inner pytest: ours without PYTEST_ADDOPTS, whose options (a
    --junitxml, -n, --durations) belong to the outer run and would be applied to it too."""
    env = {k: v for k, v in os.environ.items() if k != "PYTEST_ADDOPTS"}
    return {**env, "PYTHONPATH": str(ROOT)}


def test_a_leaked_server_fails_its_test_and_the_run_ends(tmp_path: Path) -> None:
    (tmp_path / "test_leaks.py").write_text(LEAKS)
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p",
         "tests.grpc_servers", "-o", "asyncio_mode=auto", "-o",
         "asyncio_default_fixture_loop_scope=function", "test_leaks.py"],
        cwd=tmp_path, env=_inner_env(),
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    out = done.stdout + done.stderr
    assert done.returncode == 1, out
    assert "1 failed, 3 passed, 2 errors" in out, out
    for test, what in (
        ("test_async_leak", "stopped now"),
        ("test_sync_leak", "its loop is closed"),
    ):
        assert f"test_leaks.py::{test} left 1 grpc.aio server(s) running ({what})" in out, out
    assert "exiting now rather than hang" in out
