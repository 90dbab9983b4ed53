"""The mover's guarantee client against real gRPC servers on port 0: the real service's LSN
flush, a seed-only service (commit time only, as Exchange 2010 SP1 offers; it cannot run
here, so a small servicer plays it), and a service that is down."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import grpc
import pytest
from google.protobuf.duration_pb2 import Duration

from dag_common._generated.dataguarantee.v1 import data_guarantee_pb2 as pb
from dag_common._generated.dataguarantee.v1 import data_guarantee_pb2_grpc as pb_grpc
from dag_common.model import Lsn
from mrs_client.errors import MoveFailed
from mrs_client.gates import Gates
from mrs_client.guarantee_client import GrpcGuaranteeClient, answer_from
from mrs_client.policy import GuaranteeStatus

WHEN = datetime(2026, 11, 22, 12, 0, tzinfo=UTC)


class SeedOnlyService(pb_grpc.DataGuaranteeServicer):
    """Knows CheckReplicationFlush by commit time only; a request without one is invalid."""

    def __init__(self) -> None:
        self.requests: list[str] = []

    async def CheckReplicationFlush(self, request, context):
        target = request.WhichOneof("target")
        self.requests.append(target or "none")
        if target != "commit_time":
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "commit_time is required")
        assert request.commit_time.ToDatetime(tzinfo=UTC) == WHEN
        return pb.GuaranteeResponse(status=pb.SATISFIED, reason="replayed past commit time")

    async def CheckReplicationHealth(self, request, context):
        await context.abort(grpc.StatusCode.NOT_FOUND, f"no database {request.database}")


@pytest.fixture
async def seed_only():
    server = grpc.aio.server()
    service = SeedOnlyService()
    pb_grpc.add_DataGuaranteeServicer_to_server(service, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    yield service, f"127.0.0.1:{port}"
    await server.stop(None)


async def test_falls_back_to_commit_time_when_the_service_has_no_lsn(seed_only):
    service, target = seed_only
    client = GrpcGuaranteeClient(target)
    answer = await client.check_flush("DB2", "mrs", Lsn(generation=7), WHEN)
    assert answer.status is GuaranteeStatus.SATISFIED
    assert not client.flush_by_lsn
    await client.check_flush("DB2", "mrs", Lsn(generation=8), WHEN)
    assert service.requests == ["lsn", "commit_time", "commit_time"]
    await client.close()


async def test_a_refused_request_fails_the_move_and_is_never_satisfied(seed_only):
    _, target = seed_only
    client = GrpcGuaranteeClient(target)
    with pytest.raises(MoveFailed, match="NOT_FOUND"):
        await client.check_health("DB9", "mrs")
    await client.close()


async def test_a_service_that_is_down_answers_retry_never_satisfied():
    client = GrpcGuaranteeClient("127.0.0.1:1", timeout=2)
    for answer in (
        await client.check_health("DB2", "mrs"),
        await client.check_flush("DB2", "mrs", Lsn(generation=3), WHEN),
    ):
        assert answer.status is GuaranteeStatus.RETRY and "cannot be reached" in answer.reason
    assert client.flush_by_lsn, "an outage says nothing about what the service offers"
    await client.close()


class EpochService(pb_grpc.DataGuaranteeServicer):
    """Answers a flush by LSN: lost when the LSN's epoch is older than the database's."""

    def __init__(self, epoch: int) -> None:
        self.epoch = epoch
        self.lsns: list[tuple[int, int]] = []

    async def CheckReplicationFlush(self, request, context):
        self.lsns.append((request.lsn.generation, request.lsn.epoch))
        if request.lsn.epoch < self.epoch:
            # a careless service that says Satisfied while it says lost: never progress
            return pb.GuaranteeResponse(
                status=pb.SATISFIED, epoch=self.epoch, lost=True, reason="forked below it"
            )
        return pb.GuaranteeResponse(status=pb.SATISFIED, epoch=self.epoch, reason="replayed")


async def test_the_lsn_names_its_epoch_and_a_lost_flush_is_never_satisfied():
    server = grpc.aio.server()
    service = EpochService(epoch=5)
    pb_grpc.add_DataGuaranteeServicer_to_server(service, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    client = GrpcGuaranteeClient(f"127.0.0.1:{port}")
    try:
        lost = await client.check_flush("DB2", "mrs", Lsn(generation=7, epoch=4), WHEN)
        assert lost.lost and lost.status is GuaranteeStatus.NOT_SATISFIED and lost.epoch == 5
        ok = await client.check_flush("DB2", "mrs", Lsn(generation=9, epoch=5), WHEN)
        assert ok.status is GuaranteeStatus.SATISFIED and ok.epoch == 5 and not ok.lost
        assert service.lsns == [(7, 4), (9, 5)]
    finally:
        await client.close()
        await server.stop(None)


def test_the_waiting_line_says_when_the_service_expects_the_condition_to_clear():
    check = pb.CheckResult(
        name="AverageCopyQueue", passed=False, detail="average copy queue 81.67 logs"
    )
    response = pb.GuaranteeResponse(
        status=pb.NOT_SATISFIED,
        reason="CheckReplicationHealth SecondCopy NotSatisfied for DB2: …",
        copies=[pb.CopyVerdict(node="mbx2", meets=False, checks=[check])],
        expected_in=Duration(seconds=150),
    )
    answer = answer_from(response)
    assert answer.expected_in == timedelta(seconds=150)
    assert Gates.waiting_line("healthy copies", "DB2", answer) == (
        "waiting for healthy copies of DB2: mbx2: average copy queue 81.67 logs, "
        "expected to clear in about 2 min 30 s"
    )
    response.ClearField("expected_in")  # not predictable: nothing said
    assert Gates.waiting_line("healthy copies", "DB2", answer_from(response)) == (
        "waiting for healthy copies of DB2: mbx2: average copy queue 81.67 logs"
    )
