"""Fixtures of the guarantee API tests: fake nodes, a running service, a gRPC client."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest

from dag_common.clock import ManualClock
from guarantee_api._generated.dataguarantee.v1 import data_guarantee_pb2_grpc as pb_grpc
from guarantee_api.server import GuaranteeService
from tests.guarantee_api.fake_nodes import FakeNodes
from tests.guarantee_api.helpers import cluster_config, healthy_cluster

TOKEN = "test-token-0123456789abcdef"
AUTH = (("authorization", f"Bearer {TOKEN}"),)


@pytest.fixture
async def nodes() -> AsyncIterator[FakeNodes]:
    fake = FakeNodes(["mbx1", "mbx2", "mbx3"], TOKEN)
    fake.set(healthy_cluster())
    await fake.start()
    yield fake
    await fake.close()


@dataclass
class Running:
    """A started service, its clock, a stub and a way to run the next poll round."""

    service: GuaranteeService
    clock: ManualClock
    channel: grpc.aio.Channel
    stub: pb_grpc.DataGuaranteeStub

    async def next_round(self) -> None:
        assert self.service.poller is not None
        done = self.service.view.rounds_completed
        await self.clock.advance(self.service.config.guarantee_api.poll_interval.total_seconds())
        await self.service.poller.wait_rounds(done + 1)


async def start_service(
    nodes: FakeNodes, tmp_path: Path, *, first_round: bool = True, **api: object
) -> Running:
    config = cluster_config(nodes.urls, tmp_path, **api)
    clock = ManualClock()
    service = GuaranteeService(config, node_token=TOKEN, client_token=TOKEN, clock=clock)
    await service.start()
    if first_round:
        assert service.poller is not None
        await service.poller.wait_rounds(1)
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{service.grpc_port}")
    return Running(service, clock, channel, pb_grpc.DataGuaranteeStub(channel))


@pytest.fixture
async def running(nodes: FakeNodes, tmp_path: Path) -> AsyncIterator[Running]:
    run = await start_service(nodes, tmp_path)
    yield run
    await run.channel.close()
    await run.service.stop(grace=0)
