"""Every grpc.aio server a test starts is stopped by the end of that test, or the test fails
(loaded by tests/conftest.py for every run).

Why: a grpc.aio server still running when its event loop closes can never be stopped. When
it is collected, `Server.__del__` schedules its shutdown on the closed loop (`RuntimeError:
Event loop is closed`, `AioServer.shutdown` never awaited) and grpc's teardown then joins its
poller thread (`_poll_wrapper`) for ever: the run hangs, after whatever failure left the
server running. Worse on Python 3.11 before 3.11.8: when that collection happens inside
pytest's own `ast.parse` (it reads the failing test's source), the traceback printed for
`__del__` parses too, and the parser's shared recursion counter goes wrong (CPython
gh-106905): the run ends in `INTERNALERROR … SystemError: AST constructor recursion depth
mismatch`, without its list of failures.

So `grpc.aio.server` is wrapped to remember (weakly) each server it makes, and around every
test a fixture set up before the test's own and torn down after them checks the servers made
during the test. One still running is a defect of that test (or of the code it runs): in an
async test it is stopped here, while the test's loop is still open, and the test errors
naming it; in a sync test its loop is already gone, so it is kept from collection, the test
errors, and the run ends at once after its summary rather than hang on it.
"""

from __future__ import annotations

import os
import sys
import weakref
from collections.abc import AsyncIterator, Iterator
from typing import Any

import grpc
import pytest
import pytest_asyncio

_made: weakref.WeakSet[grpc.aio.Server] = weakref.WeakSet()
_unstoppable: list[grpc.aio.Server] = []  # kept alive: collecting one would hang the run
_factory = grpc.aio.server


def _tracked_server(*args: Any, **kwargs: Any) -> grpc.aio.Server:
    server = _factory(*args, **kwargs)
    _made.add(server)
    return server


def _running(server: grpc.aio.Server) -> bool:
    # grpc.aio offers no public "is it serving"; its own __del__ asks the Cython server so.
    inner = getattr(server, "_server", None)
    return inner is not None and inner.is_running()


def _leaked(before: weakref.WeakSet[grpc.aio.Server]) -> list[grpc.aio.Server]:
    return [s for s in list(_made) if s not in before and _running(s)]


def _message(nodeid: str, leaked: list[grpc.aio.Server], what: str) -> str:
    return (
        f"{nodeid} left {len(leaked)} grpc.aio server(s) running ({what}): stop each server "
        "a test starts in a `finally:` or in its fixture's teardown"
    )


def pytest_configure(config: pytest.Config) -> None:
    grpc.aio.server = _tracked_server


def pytest_unconfigure(config: pytest.Config) -> None:
    if _unstoppable:
        # The summary is printed; what is left is interpreter teardown, which would join
        # grpc's poller thread for ever.  End the process instead, failed.
        print(
            f"\n{len(_unstoppable)} grpc.aio server(s) left running by sync tests "
            "(errors above): exiting now rather than hang in grpc's shutdown",
            file=sys.stderr,
            flush=True,
        )
        sys.stdout.flush()
        os._exit(1)


@pytest.fixture(autouse=True)
def grpc_servers_stopped(request: pytest.FixtureRequest) -> Iterator[None]:
    """Fail a test that leaves a grpc.aio server running (see the module docstring)."""
    if pytest_asyncio.is_async_test(request.node):
        request.getfixturevalue("_grpc_servers_stopped_in_loop")
        yield
        return
    before = weakref.WeakSet(_made)
    yield
    leaked = _leaked(before)
    if leaked:
        _unstoppable.extend(leaked)
        pytest.fail(_message(request.node.nodeid, leaked, "its loop is closed"), pytrace=False)


@pytest_asyncio.fixture
async def _grpc_servers_stopped_in_loop(request: pytest.FixtureRequest) -> AsyncIterator[None]:
    before = weakref.WeakSet(_made)
    yield
    leaked = _leaked(before)
    for server in leaked:
        await server.stop(None)
    if leaked:
        pytest.fail(_message(request.node.nodeid, leaked, "stopped now"), pytrace=False)
