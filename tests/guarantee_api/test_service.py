"""The service end to end: a real grpc.aio server on port 0 over fake nodes on loopback."""

from __future__ import annotations

from datetime import timedelta

import grpc
import pytest
from google.protobuf.timestamp_pb2 import Timestamp
from grpc_health.v1 import health_pb2, health_pb2_grpc

from dag_common._generated.dataguarantee.v1 import data_guarantee_pb2 as pb
from dag_common.cluster_store import open_cluster_store
from dag_common.credentials import Credential, Credentials, Role, digest
from dag_common.model import CopyRole, CopyStatus
from tests.guarantee_api.helpers import (
    AUTH,
    T0,
    ask,
    health_req,
    healthy_cluster,
    node_status,
    report,
    start_service,
)


async def test_healthy_cluster_is_satisfied_with_a_verdict_per_copy(running):
    answer = await ask(running)
    assert answer.status == pb.SATISFIED, answer.reason
    assert answer.constraint == pb.CONSTRAINT_SECOND_COPY  # DB1's configured constraint
    assert [(c.node, c.site, c.role) for c in answer.copies] == [
        ("mbx1", "redmond", pb.COPY_ROLE_ACTIVE),
        ("mbx2", "redmond", pb.COPY_ROLE_PASSIVE),
        ("mbx3", "dublin", pb.COPY_ROLE_PASSIVE),
    ]
    mbx2 = answer.copies[1]
    assert mbx2.copy_status == "Healthy" and mbx2.meets and mbx2.last_log_replayed == 100
    assert {c.name for c in mbx2.checks} == {
        "Reachable", "Healthy", "ReplayQueue", "CopyQueue", "AverageCopyQueue"
    }  # fmt: skip


async def test_not_satisfied_names_each_copy_and_waits_a_minute(running, nodes):
    statuses = healthy_cluster(cq=14)
    statuses["mbx3"] = node_status("mbx3", report("mbx3", status=CopyStatus.SUSPENDED))
    nodes.set(statuses)
    await running.next_round()
    answer = await ask(running)
    assert answer.status == pb.NOT_SATISFIED
    assert "mbx2: CopyQueue not met: copy queue 14 logs, limit < 10" in answer.reason
    assert "mbx3: Healthy not met: status Suspended" in answer.reason
    assert answer.retry_after.ToTimedelta() == timedelta(minutes=1)
    failed = {c.name: c.detail for c in answer.copies[1].checks if not c.passed}
    assert "CopyQueue" in failed


async def test_unreachable_node_counts_as_not_healthy(running, nodes):
    await nodes["mbx3"].stop()
    await running.next_round()
    answer = await ask(running, constraint=pb.CONSTRAINT_ALL_COPIES)
    assert answer.status == pb.NOT_SATISFIED
    assert answer.constraint == pb.CONSTRAINT_ALL_COPIES
    mbx3 = answer.copies[2]
    assert mbx3.node == "mbx3" and not mbx3.meets
    assert "node mbx3 unreachable" in mbx3.checks[0].detail
    # the other copies still satisfy a weaker constraint
    assert (await ask(running, constraint=pb.CONSTRAINT_SECOND_COPY)).status == pb.SATISFIED


async def test_malformed_node_status_counts_as_unreachable(running, nodes):
    nodes["mbx2"].raw_body = b'{"node": "mbx2", "copies": "nope"}'
    nodes["mbx3"].http_error = 500
    await running.next_round()
    answer = await ask(running)
    assert answer.status == pb.NOT_SATISFIED
    assert "malformed status" in answer.copies[1].checks[0].detail
    assert "HTTP 500" in answer.copies[2].checks[0].detail
    assert answer.retry_after.ToTimedelta() == timedelta(minutes=2)  # no healthy copy


async def test_retry_until_status_is_known(nodes, tmp_path):
    for node in nodes.nodes.values():
        node.http_error = 503
    run = await start_service(nodes, tmp_path)
    try:
        answer = await ask(run)
        assert answer.status == pb.RETRY
        assert answer.retry_after.ToTimedelta() == timedelta(seconds=10)
        assert "no copy status" in answer.reason
        for node in nodes.nodes.values():
            node.http_error = None
        await run.next_round()
        assert (await ask(run)).status == pb.SATISFIED
    finally:
        await run.channel.close()
        await run.service.stop(grace=0)


async def test_switchover_moves_the_active_site(running, nodes):
    # DB1 switched over to mbx3 in dublin: only redmond copies are "another datacenter" now
    nodes.set(
        {
            "mbx1": node_status("mbx1", report("mbx1")),
            "mbx2": node_status("mbx2", report("mbx2", status=CopyStatus.SUSPENDED)),
            "mbx3": node_status("mbx3", report("mbx3", role=CopyRole.ACTIVE)),
        }
    )
    await running.next_round()
    answer = await ask(running, constraint=pb.CONSTRAINT_SECOND_DATACENTER)
    assert answer.status == pb.SATISFIED, answer.reason
    assert "mbx1" in answer.reason
    nodes["mbx1"].status = node_status("mbx1", report("mbx1", cq=50))
    await running.next_round()
    answer = await ask(running, constraint=pb.CONSTRAINT_SECOND_DATACENTER)
    assert answer.status == pb.NOT_SATISFIED
    assert "outside site dublin" in answer.reason


async def test_average_copy_queue_is_per_caller(running, nodes):
    nodes.set(healthy_cluster(cq=30))
    nodes["mbx3"].status = node_status("mbx3", report("mbx3", status=CopyStatus.FAILED))
    await running.next_round()
    assert (await ask(running, caller="a")).status == pb.NOT_SATISFIED
    nodes.set(healthy_cluster(cq=0))
    nodes["mbx3"].status = node_status("mbx3", report("mbx3", status=CopyStatus.FAILED))
    await running.next_round()
    answer = await ask(running, caller="a")  # average over a's two queries: (30 + 0) / 2
    assert answer.status == pb.NOT_SATISFIED
    assert answer.copies[1].average_copy_queue_length == 15.0
    assert "average copy queue 15.00" in answer.reason
    assert (await ask(running, caller="b")).status == pb.SATISFIED  # b never saw the queue


async def test_a_callers_average_forgets_an_outage_once_it_leaves_the_window(running, nodes):
    """The issue's stalled move: a copy 98 logs behind for 2.5 min, asked every 30 s, then
    caught up.  The caller's average counts only its queries of the last 3 minutes: the
    answers say when it will clear, and the first question after the outage's last query
    left the window is Satisfied (a count of 60 queries kept it for 30 minutes)."""

    async def question_at(queue: int) -> pb.GuaranteeResponse:
        nodes.set(healthy_cluster(cq=queue))
        nodes["mbx3"].status = node_status("mbx3", report("mbx3", status=CopyStatus.FAILED))
        await running.next_round()
        answer = await ask(running, caller="mover")
        await running.clock.advance(29)  # the mover asks every 30 s (1 s was the round's)
        return answer

    for _ in range(5):  # t = 0 .. 120 s: 98 logs behind
        assert (await question_at(98)).status == pb.NOT_SATISFIED
    caught_up = await question_at(0)  # t = 150 s: the copy has caught up
    assert caught_up.status == pb.NOT_SATISFIED
    assert "average copy queue 81.67 logs" in caught_up.reason
    assert "leave the 180s window" in caught_up.reason, caught_up.reason
    # the last 98 (t = 120 s) leaves at t = 300 s: 150 s from now
    assert caught_up.expected_in.ToTimedelta() == timedelta(seconds=150)
    answers = [await question_at(0) for _ in range(6)]  # t = 180 .. 330 s
    assert [a.status for a in answers] == [pb.NOT_SATISFIED] * 5 + [pb.SATISFIED]
    assert not answers[-1].HasField("expected_in")


async def test_draining_copy_gets_a_predicted_wait(nodes, tmp_path):
    nodes.set(healthy_cluster(cq=40))
    run = await start_service(nodes, tmp_path)
    try:
        growing = await ask(run, caller="a", constraint=pb.CONSTRAINT_ALL_COPIES)
        assert growing.retry_after.ToTimedelta() == timedelta(minutes=1)  # no rate yet
        nodes.set(healthy_cluster(cq=30))
        await run.next_round()  # 10 logs drained in 1 s; 21 logs over the limit
        answer = await ask(run, caller="b", constraint=pb.CONSTRAINT_ALL_COPIES)
        assert answer.status == pb.NOT_SATISFIED
        assert answer.retry_after.ToTimedelta() == timedelta(seconds=2.1)
        assert "predicted" in answer.reason and "10.00 logs/s" in answer.reason
        assert answer.expected_in.ToTimedelta() == timedelta(seconds=2.1)
    finally:
        await run.channel.close()
        await run.service.stop(grace=0)


async def flush(running, **kw):
    return await running.stub.CheckReplicationFlush(
        pb.CheckReplicationFlushRequest(database="DB1", caller_id="mover-1", **kw), metadata=AUTH
    )


async def test_flush_by_lsn_and_by_commit_time(running, nodes):
    assert (await flush(running, lsn=pb.Lsn(generation=100, offset=512))).status == pb.SATISFIED
    answer = await flush(running, lsn=pb.Lsn(generation=101, offset=0))
    assert answer.status == pb.NOT_SATISFIED
    assert "needs generation 101" in answer.reason
    before = Timestamp()
    before.FromDatetime(T0 - timedelta(seconds=6))
    assert (await flush(running, commit_time=before)).status == pb.SATISFIED
    within_skew = Timestamp()
    within_skew.FromDatetime(T0 - timedelta(seconds=4))
    assert (await flush(running, commit_time=within_skew)).status == pb.NOT_SATISFIED
    nodes.set(healthy_cluster(replayed=101))
    nodes["mbx3"].status = node_status("mbx3", report("mbx3", replayed=101))
    await running.next_round()
    assert (await flush(running, lsn=pb.Lsn(generation=101))).status == pb.SATISFIED


async def test_flush_by_an_lsn_with_its_epoch_is_judged_on_the_cluster_stores_history(
    running, nodes
):
    store = open_cluster_store(running.service.config)
    try:
        # epoch 1 on mbx1; a lossy failover to mbx2 whose stream began at generation 90
        await store.set_active("DB1", "mbx1", expected_epoch=0, start_generation=1)
        await store.set_active("DB1", "mbx2", expected_epoch=1, start_generation=90)
    finally:
        store.close()
    await running.next_round()
    lost = await flush(running, lsn=pb.Lsn(generation=95, offset=0, epoch=1))
    assert lost.status == pb.NOT_SATISFIED and lost.lost and lost.epoch == 2
    assert "was lost" in lost.reason
    kept = await flush(running, lsn=pb.Lsn(generation=89, offset=0, epoch=1))
    assert kept.status == pb.NOT_SATISFIED and not kept.lost, "the copies report no epoch yet"
    assert "epoch unknown" in kept.reason
    epoch2 = [report("mbx1", role=CopyRole.ACTIVE), report("mbx2"), report("mbx3")]
    for r in epoch2:
        nodes[r.node].status = node_status(r.node, r.model_copy(update={"epoch": 2}))
    await running.next_round()
    kept = await flush(running, lsn=pb.Lsn(generation=89, offset=0, epoch=1))
    assert kept.status == pb.SATISFIED and kept.epoch == 2
    assert {c.node: c.epoch for c in kept.copies} == {"mbx1": 2, "mbx2": 2, "mbx3": 2}
    unknown = await flush(running, lsn=pb.Lsn(generation=95, offset=0, epoch=3))
    assert unknown.status == pb.RETRY


async def test_database_without_passive_copy_is_satisfied(running):
    answer = await ask(running, database="DB2", constraint=pb.CONSTRAINT_ALL_COPIES)
    assert answer.status == pb.SATISFIED and "no passive copy" in answer.reason


BAD_REQUESTS = [
    ("no database", health_req(database=""), grpc.StatusCode.INVALID_ARGUMENT, "database"),
    ("unknown database", health_req(database="DB9"), grpc.StatusCode.NOT_FOUND, "DB9"),
    ("no caller", health_req(caller=""), grpc.StatusCode.INVALID_ARGUMENT, "caller_id"),
    ("long caller", health_req(caller="x" * 300), grpc.StatusCode.INVALID_ARGUMENT, "caller_id"),
    ("bad constraint", health_req(constraint=42), grpc.StatusCode.INVALID_ARGUMENT, "constraint"),
]


@pytest.mark.parametrize(("name", "request_", "code", "word"), BAD_REQUESTS,
                         ids=[b[0] for b in BAD_REQUESTS])  # fmt: skip
async def test_bad_health_requests(running, name, request_, code, word):
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await running.stub.CheckReplicationHealth(request_, metadata=AUTH)
    assert err.value.code() == code
    assert word in (err.value.details() or "")


BAD_FLUSHES = [
    ("no target", {}, grpc.StatusCode.INVALID_ARGUMENT, "commit_time or lsn"),
    ("generation 0", {"lsn": pb.Lsn(generation=0)}, grpc.StatusCode.INVALID_ARGUMENT, "lsn"),
    ("zero timestamp", {"commit_time": Timestamp()}, grpc.StatusCode.INVALID_ARGUMENT,
     "commit_time"),
    ("bad nanos", {"commit_time": Timestamp(seconds=1, nanos=-5)},
     grpc.StatusCode.INVALID_ARGUMENT, "commit_time"),
    ("commit time 9999-12-31", {"commit_time": Timestamp(seconds=253402214400)},
     grpc.StatusCode.INVALID_ARGUMENT, "commit_time"),
    ("generation 2^63", {"lsn": pb.Lsn(generation=2**63)}, grpc.StatusCode.INVALID_ARGUMENT,
     "lsn.generation"),
    ("generation 2^64-1", {"lsn": pb.Lsn(generation=2**64 - 1)},
     grpc.StatusCode.INVALID_ARGUMENT, "lsn.generation"),
    ("offset 2^63", {"lsn": pb.Lsn(generation=1, offset=2**63)},
     grpc.StatusCode.INVALID_ARGUMENT, "lsn.offset"),
    ("epoch 2^63", {"lsn": pb.Lsn(generation=1, epoch=2**63)},
     grpc.StatusCode.INVALID_ARGUMENT, "lsn.epoch"),
]  # fmt: skip


@pytest.mark.parametrize(("name", "fields", "code", "word"), BAD_FLUSHES,
                         ids=[b[0] for b in BAD_FLUSHES])  # fmt: skip
async def test_bad_flush_requests(running, name, fields, code, word):
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await flush(running, **fields)
    assert err.value.code() == code
    assert word in (err.value.details() or "")


@pytest.mark.parametrize(
    ("database", "code"),
    [("D" * 10_240, grpc.StatusCode.INVALID_ARGUMENT), ("D" * 64, grpc.StatusCode.NOT_FOUND)],
    ids=["10 KB: not a name", "64 characters: a name, not configured"],
)
async def test_a_long_database_name_is_refused_in_a_short_message(running, database, code):
    """Quoted whole, 10 KB overflowed gRPC's 8 KB trailers: the caller was told
    RESOURCE_EXHAUSTED instead of what was wrong."""
    for call, req in (
        (running.stub.CheckReplicationHealth, health_req(database=database)),
        (
            running.stub.CheckReplicationFlush,
            pb.CheckReplicationFlushRequest(
                database=database, caller_id="m", lsn=pb.Lsn(generation=1)
            ),
        ),
    ):
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await call(req, metadata=AUTH)
        assert err.value.code() == code
        details = err.value.details() or ""
        assert details.startswith("database 'DDDD") and len(details) < 250, details
        if len(database) > 64:
            assert "…(10240 bytes)" in details


async def test_unknown_database_on_flush_is_not_found(running):
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await running.stub.CheckReplicationFlush(
            pb.CheckReplicationFlushRequest(
                database="nope", caller_id="m", lsn=pb.Lsn(generation=1)
            ),
            metadata=AUTH,
        )
    assert err.value.code() == grpc.StatusCode.NOT_FOUND


@pytest.mark.parametrize("metadata", [(), (("authorization", "Bearer wrong-token-xxxxxxxx"),)])
async def test_calls_without_the_token_are_unauthenticated(running, metadata):
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await running.stub.CheckReplicationHealth(health_req(), metadata=metadata)
    assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED


async def test_each_guarantee_call_lets_exactly_the_mover_role_through(nodes, tmp_path):
    """The movers ask the guarantee: every DataGuarantee call with a credential of each
    role; only `mover` is answered, the others PERMISSION_DENIED naming the role and the
    credential; an unknown secret UNAUTHENTICATED; the health check needs none."""
    secret = {role: f"a-{role}-credential-secret" for role in Role}
    clients = Credentials([
        Credential(f"only-{role}", frozenset({role}), (digest(s),)) for role, s in secret.items()
    ])  # fmt: skip
    flush = pb.CheckReplicationFlushRequest(database="DB1", caller_id="m", lsn=pb.Lsn(generation=1))
    run = await start_service(nodes, tmp_path, clients=clients)
    calls = {
        "Health": lambda md: run.stub.CheckReplicationHealth(health_req(), metadata=md),
        "Flush": lambda md: run.stub.CheckReplicationFlush(flush, metadata=md),
    }
    try:
        for name, call in calls.items():
            for role, s in secret.items():
                metadata = (("authorization", f"Bearer {s}"),)
                if role is Role.MOVER:
                    answer = await call(metadata)
                    assert answer.status in (pb.RETRY, pb.SATISFIED, pb.NOT_SATISFIED), name
                    continue
                with pytest.raises(grpc.aio.AioRpcError) as err:
                    await call(metadata)
                assert err.value.code() == grpc.StatusCode.PERMISSION_DENIED, (name, role)
                assert "needs the mover role" in err.value.details()
                assert f"'only-{role}'" in err.value.details()
            with pytest.raises(grpc.aio.AioRpcError) as err:
                await call((("authorization", "Bearer not-a-known-secret-at-all"),))
            assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED
        health = health_pb2_grpc.HealthStub(run.channel)
        assert (await health.Check(health_pb2.HealthCheckRequest())).status
    finally:
        await run.channel.close()
        await run.service.stop(grace=0)
