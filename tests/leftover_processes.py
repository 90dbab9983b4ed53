"""Every node and guarantee-api process the cluster harness starts for a test is ended by
the end of that test, or it is killed then and the test fails, naming it (loaded by
tests/conftest.py for every run).

Why: a fixture whose setup fails after its cluster started (the guarantee API refused its
port, a node not healthy in time) never reaches its teardown, so its nodes outlived the test:
a CI run found two such nodes serving 45 minutes later.  Each holds its port and its data
directory's lock, in its worker's slice of the ports, for the rest of the run.  The fixture
here is set up before the test's own and torn down after them: whatever their teardowns
did not stop is stopped here."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.cluster_harness import STARTED


@pytest.fixture(autouse=True)
def harness_processes_ended(request: pytest.FixtureRequest) -> Iterator[None]:
    """Kill, and fail the test for, the harness's processes it leaves running."""
    before = len(STARTED)
    yield
    started, left = STARTED[before:], []
    del STARTED[before:]
    for proc in started:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
            left.append(" ".join(str(a) for a in proc.args[-5:]))
    if left:
        pytest.fail(
            f"{request.node.nodeid} left {len(left)} process(es) running, killed now: "
            + "; ".join(left),
            pytrace=False,
        )
