"""Pushed progress over real processes: three `replication-node serve` and `guarantee-api
serve` polling only every 30 s, so that every answer below that moves faster than that
comes from the nodes' status streams (GET /v1/status/watch), not from a poll."""

from __future__ import annotations

import os
import signal

import grpc
import pytest
from google.protobuf.duration_pb2 import Duration

from dag_common._generated.dataguarantee.v1 import data_guarantee_pb2 as pb
from dag_common._generated.dataguarantee.v1 import data_guarantee_pb2_grpc as pb_grpc
from tests.cluster_harness import TOKEN, LocalCluster
from tests.prometheus import samples

pytestmark = pytest.mark.slow
META = (("authorization", f"Bearer {TOKEN}"),)
DB = "/v1/databases/DB1"


def seconds(value: float) -> Duration:
    d = Duration()
    d.FromNanoseconds(int(value * 1e9))
    return d


@pytest.fixture
async def setup(tmp_path):
    cluster = LocalCluster(
        tmp_path,
        nodes=[("mbx1", "redmond"), ("mbx2", "redmond"), ("mbx3", "dublin")],
        databases=[
            {
                "name": "DB1",
                "data_move_replication_constraint": "AllCopies",
                "copies": [
                    {"node": "mbx1", "activation_preference": 1},
                    {"node": "mbx2", "activation_preference": 2},
                    {"node": "mbx3", "activation_preference": 3},
                ],
            },
        ],
        defaults={"failover_after": None},
    )
    cluster.config["guarantee_api"].update(
        {"poll_interval": "30s", "watch_heartbeat": "200ms", "watch_silence": "1s"}
    )
    cluster.write_config()
    await cluster.start()
    api = await cluster.start_guarantee_api()
    channel = grpc.aio.insecure_channel(cluster.config["guarantee_api"]["listen"])
    yield cluster, pb_grpc.DataGuaranteeStub(channel)
    await channel.close()
    api.terminate()
    api.wait(timeout=20)
    await cluster.close()


async def health(stub, wait: float = 0.0) -> pb.GuaranteeResponse:
    request = pb.CheckReplicationHealthRequest(database="DB1", caller_id="test")
    if wait:
        request.wait.CopyFrom(seconds(wait))
    return await stub.CheckReplicationHealth(request, metadata=META, timeout=wait + 10)


async def test_a_flush_after_a_roll_is_answered_from_pushed_progress(setup):
    cluster, stub = setup
    # Healthy at once: the copies came up after the service's first poll, and their
    # streams said so (the next poll is 30 s away).
    assert (await health(stub, wait=20)).status == pb.SATISFIED
    await cluster.ok("PUT", "mbx1", f"{DB}/mailboxes/alice")
    rolled = await cluster.ok("POST", "mbx1", f"{DB}/roll-log")
    request = pb.CheckReplicationFlushRequest(
        database="DB1",
        caller_id="test",
        lsn=pb.Lsn(generation=rolled["closed_generation"], epoch=rolled["epoch"]),
        wait=seconds(20),
    )
    answer = await stub.CheckReplicationFlush(request, metadata=META, timeout=30)
    assert answer.status == pb.SATISFIED, answer.reason
    assert answer.waited.ToTimedelta().total_seconds() < 20
    passives = [c for c in answer.copies if c.role == pb.COPY_ROLE_PASSIVE]
    assert len(passives) == 2, answer
    assert all(c.last_log_replayed >= rolled["closed_generation"] for c in passives), answer
    metrics = samples(await _service_metrics(cluster))
    events = sum(
        v for (name, _), v in metrics.items() if name == "dataguarantee_stream_events_total"
    )
    assert events > 0
    assert sum(v for (name, _), v in metrics.items() if name == "dataguarantee_node_stream_up") == 3


async def test_a_dead_or_frozen_node_counts_out_within_the_stream_silence(setup):
    cluster, stub = setup
    assert (await health(stub, wait=20)).status == pb.SATISFIED
    # Frozen: its stream goes silent; past watch_silence (1 s) the node is stale, long
    # before a 30 s poll could tell.
    os.kill(cluster.procs["mbx3"].pid, signal.SIGSTOP)
    try:

        async def mbx3_counted_out() -> bool:
            answer = await health(stub)
            return answer.status != pb.SATISFIED and "silent" in str(answer.copies)

        await cluster.wait_for("mbx3 stale by its silent stream", mbx3_counted_out, timeout=20)
    finally:
        os.kill(cluster.procs["mbx3"].pid, signal.SIGCONT)
    # Woken, its stream is opened again and the answer waits for it.
    answer = await health(stub, wait=20)
    assert answer.status == pb.SATISFIED, answer.reason
    # Killed: its stream breaks at once.
    cluster.kill("mbx2")

    async def mbx2_counted_out() -> bool:
        answer = await health(stub)
        mbx2 = next(c for c in answer.copies if c.node == "mbx2")
        return answer.status != pb.SATISFIED and not mbx2.meets

    await cluster.wait_for("mbx2 unreachable by its broken stream", mbx2_counted_out, timeout=20)


async def _service_metrics(cluster: LocalCluster) -> str:
    http = cluster.config["guarantee_api"]["http_listen"]
    assert cluster.session is not None
    async with cluster.session.get(f"http://{http}/metrics") as resp:
        return await resp.text()
