"""The guarantee service over real replication node processes (no fake peers)."""

from __future__ import annotations

import grpc
import pytest

from guarantee_api._generated.dataguarantee.v1 import data_guarantee_pb2 as pb
from guarantee_api._generated.dataguarantee.v1 import data_guarantee_pb2_grpc as pb_grpc
from tests.cluster_harness import TOKEN, LocalCluster

pytestmark = pytest.mark.slow
META = (("authorization", f"Bearer {TOKEN}"),)


@pytest.fixture
async def setup(tmp_path):
    cluster = LocalCluster(
        tmp_path,
        nodes=[("mbx1", "redmond"), ("mbx2", "redmond"), ("mbx3", "dublin")],
        databases=[
            {
                "name": "DB1",
                "data_move_replication_constraint": "SecondDatacenter",
                "copies": [
                    {"node": "mbx1", "activation_preference": 1},
                    {"node": "mbx2", "activation_preference": 2},
                    {"node": "mbx3", "activation_preference": 3},
                ],
            },
        ],
    )
    await cluster.start()
    api = await cluster.start_guarantee_api()
    channel = grpc.aio.insecure_channel(cluster.config["guarantee_api"]["listen"])
    yield cluster, pb_grpc.DataGuaranteeStub(channel)
    await channel.close()
    api.terminate()
    api.wait(timeout=20)
    await cluster.close()


async def answer(stub, **kw):
    return await stub.CheckReplicationHealth(
        pb.CheckReplicationHealthRequest(database="DB1", caller_id="test", **kw), metadata=META
    )


async def test_health_follows_the_real_copies(setup):
    cluster, stub = setup
    await cluster.ok("PUT", "mbx1", "/v1/databases/DB1/mailboxes/alice")

    async def satisfied():
        return (await answer(stub)).status == pb.SATISFIED

    await cluster.wait_for("SecondDatacenter satisfied", satisfied)
    # the only copy in another site is suspended: SecondDatacenter cannot be met
    await cluster.ok("POST", "mbx3", "/v1/databases/DB1/copies/mbx3/suspend")

    async def not_satisfied():
        return (await answer(stub)).status == pb.NOT_SATISFIED

    await cluster.wait_for("SecondDatacenter not satisfied", not_satisfied)
    response = await answer(stub)
    mbx3 = next(c for c in response.copies if c.node == "mbx3")
    assert not mbx3.meets and mbx3.copy_status == "Suspended"
    assert any(k.name == "Healthy" and not k.passed for k in mbx3.checks)
    # SecondCopy is still met by mbx2 in the active's own site
    second = await answer(stub, constraint=pb.CONSTRAINT_SECOND_COPY)
    assert second.status == pb.SATISFIED


async def test_flush_by_lsn_waits_for_replay(setup):
    cluster, stub = setup
    await cluster.ok("PUT", "mbx1", "/v1/databases/DB1/mailboxes/alice")
    await cluster.ok("POST", "mbx3", "/v1/databases/DB1/copies/mbx3/suspend")
    ack = await cluster.ok(
        "POST", "mbx1", "/v1/databases/DB1/mailboxes/alice/items", json={"subject": "hello"}
    )
    lsn = pb.Lsn(generation=ack["lsn"]["generation"], offset=ack["lsn"]["offset"])

    async def flush():
        return await stub.CheckReplicationFlush(
            pb.CheckReplicationFlushRequest(database="DB1", caller_id="test", lsn=lsn),
            metadata=META,
        )

    first = await flush()
    assert first.status != pb.SATISFIED, "the generation holding the commit is still open"
    await cluster.ok("POST", "mbx1", "/v1/databases/DB1/roll-log")

    async def satisfied():
        return (await flush()).status == pb.SATISFIED

    # SecondDatacenter counts only mbx3 (suspended): the flush stays unsatisfied
    assert (await flush()).status != pb.SATISFIED
    await cluster.ok("POST", "mbx3", "/v1/databases/DB1/copies/mbx3/resume")
    await cluster.wait_for("flush satisfied once mbx3 replays", satisfied)


async def test_unknown_database_and_missing_token(setup):
    _, stub = setup
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await stub.CheckReplicationHealth(
            pb.CheckReplicationHealthRequest(database="NOPE", caller_id="t"), metadata=META
        )
    assert err.value.code() is grpc.StatusCode.NOT_FOUND
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await stub.CheckReplicationHealth(pb.CheckReplicationHealthRequest(database="DB1"))
    assert err.value.code() is grpc.StatusCode.UNAUTHENTICATED
