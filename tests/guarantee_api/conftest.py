"""Fixtures of the guarantee API tests: fake nodes, a running service, a gRPC client."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.guarantee_api.fake_nodes import FakeNodes
from tests.guarantee_api.helpers import TOKEN, Running, healthy_cluster, start_service


@pytest.fixture
async def nodes() -> AsyncIterator[FakeNodes]:
    fake = FakeNodes(["mbx1", "mbx2", "mbx3"], TOKEN)
    fake.set(healthy_cluster())
    await fake.start()
    yield fake
    await fake.close()


@pytest.fixture
async def running(nodes: FakeNodes, tmp_path: Path) -> AsyncIterator[Running]:
    run = await start_service(nodes, tmp_path)
    yield run
    await run.channel.close()
    await run.service.stop(grace=0)
