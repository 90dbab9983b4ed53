"""The guarantee service over real replication node processes (no fake peers)."""

from __future__ import annotations

import grpc
import pytest

from dag_common._generated.dataguarantee.v1 import data_guarantee_pb2 as pb
from dag_common._generated.dataguarantee.v1 import data_guarantee_pb2_grpc as pb_grpc
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
        # The operator activates: automatic failover, quick once a lost active's lease
        # ends, would race it for another copy.
        defaults={"failover_after": None},
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


async def test_a_flush_of_a_write_lost_in_a_failover_is_never_satisfied(setup):
    cluster, stub = setup
    db = "/v1/databases/DB1"
    await cluster.ok("PUT", "mbx1", f"{db}/mailboxes/alice")

    def lsn_of(ack):
        return pb.Lsn(**{k: ack["lsn"][k] for k in ("generation", "offset", "epoch")})

    async def flush(lsn):
        return await stub.CheckReplicationFlush(
            pb.CheckReplicationFlushRequest(database="DB1", caller_id="test", lsn=lsn),
            metadata=META,
        )

    # A write that shipped before the failover: its generation was closed and replayed.
    shipped = lsn_of(
        await cluster.ok("POST", "mbx1", f"{db}/mailboxes/alice/items", json={"subject": "kept"})
    )
    assert shipped.epoch >= 1, "a write's answer names its stream incarnation"
    await cluster.ok("POST", "mbx1", f"{db}/roll-log")

    async def satisfied(lsn):
        return (await flush(lsn)).status == pb.SATISFIED

    await cluster.wait_for("the shipped write satisfied", lambda: satisfied(shipped))
    # ... and replayed by mbx2, the copy that will take over: SecondDatacenter counts mbx3
    # alone, and a mbx2 suspended before it copied that generation (no Attempt Copy Last
    # Logs from a dead node) would start the new epoch below it, losing the shipped write.
    await cluster.wait_for(
        "mbx2 to replay the shipped write", lambda: _replayed(cluster, "mbx2", shipped.generation)
    )
    # A write acknowledged in the open log, and the active's node killed before it shipped.
    # (In block mode mbx2 would hold it and keep it: it is suspended while it is written.)
    await cluster.ok("POST", "mbx2", f"{db}/copies/mbx2/suspend")
    doomed = lsn_of(
        await cluster.ok("POST", "mbx1", f"{db}/mailboxes/alice/items", json={"subject": "gone"})
    )
    cluster.kill("mbx1")
    await cluster.ok("POST", "mbx2", f"{db}/copies/mbx2/resume")
    await cluster.wait_for(
        "mbx2 to see its active gone",
        lambda: _status_is(cluster, "mbx2", "DisconnectedAndHealthy"),
    )
    activated = await cluster.ok(
        "POST",
        "mbx2",
        f"{db}/activate",
        json={"node": "mbx2", "mount_dial_override": "BestAvailability"},
    )
    assert activated["epoch"] == doomed.epoch + 1
    await cluster.wait_status("mbx2", "DB1", "Mounted")
    # The new stream moves well past the lost write's generation, and is replayed.
    for n in range(4):
        await cluster.ok("POST", "mbx2", f"{db}/mailboxes/alice/items", json={"subject": f"n{n}"})
        await cluster.ok("POST", "mbx2", f"{db}/roll-log")
    fresh = lsn_of(
        await cluster.ok("POST", "mbx2", f"{db}/mailboxes/alice/items", json={"subject": "new"})
    )
    await cluster.ok("POST", "mbx2", f"{db}/roll-log")
    assert fresh.epoch == activated["epoch"] and fresh.generation > doomed.generation + 2
    await cluster.wait_for("a write of the new epoch satisfied", lambda: satisfied(fresh))

    answer = await flush(doomed)
    assert answer.status == pb.NOT_SATISFIED and answer.lost, answer.reason
    assert "was lost" in answer.reason and f"epoch {activated['epoch']}" in answer.reason
    assert answer.epoch == activated["epoch"]
    # Answered by generation alone (no epoch), the lost write looks replayed: the unsafe
    # behaviour of the old contract, which is why the LSN names its stream.
    blind = pb.Lsn(generation=doomed.generation, offset=doomed.offset)
    assert (await flush(blind)).status == pb.SATISFIED
    # The write that shipped before the failover survived it.
    assert (await flush(shipped)).status == pb.SATISFIED
    kept = await cluster.items("mbx2", "DB1", "alice")
    assert {i["subject"] for i in kept.values()} >= {"kept", "new"}
    assert "gone" not in {i["subject"] for i in kept.values()}


async def _replayed(cluster, node, generation):
    return (await cluster.status(node))["DB1"]["last_log_replayed"] >= generation


async def _status_is(cluster, node, status):
    return (await cluster.status(node))["DB1"]["status"] == status
