"""Clocks that disagree, over real node processes run under libfaketime (Debian's
`faketime`, which `make test` installs): a lagged copy whose clock runs hours ahead still
holds each log for its lag; an active whose clock went back an hour never hands out a commit
time older than the logs its copies already replayed."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from datetime import datetime

import grpc
import pytest

from dag_common._generated.dataguarantee.v1 import data_guarantee_pb2 as pb
from dag_common._generated.dataguarantee.v1 import data_guarantee_pb2_grpc as pb_grpc
from tests.cluster_harness import FAKETIME_LIB, TOKEN, LocalCluster, faketime_env

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not FAKETIME_LIB.exists(), reason="Debian's faketime is not installed"),
]


def test_a_process_the_harness_skews_reads_the_skewed_wall_clock_and_still_sleeps():
    """`faketime_env`: the wall clock two hours ahead, the monotonic clock the machine's, and
    `time.sleep` sleeping (libfaketime alone fails it with EINVAL: a node that slept at
    start-up exited with "error: Invalid argument"; tests/faketime_site mends it).  A sleep
    of 0 s goes through the same call, and fails the same way without the mend."""
    code = "import time; w, m = time.time(), time.monotonic(); time.sleep(0); print(w, m)"
    out = subprocess.run(
        [sys.executable, "-c", code],
        env={**os.environ, **faketime_env("+2h")},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    wall, mono = map(float, out.stdout.split())
    assert 7000 < wall - time.time() < 7400
    assert 0 <= time.monotonic() - mono < 60


def cluster_of(tmp_path, *, lag: str = "0s") -> LocalCluster:
    return LocalCluster(
        tmp_path,
        nodes=[("mbx1", "redmond"), ("mbx2", "dublin")],
        databases=[
            {
                "name": "DB1",
                "copies": [
                    {"node": "mbx1", "activation_preference": 1},
                    {"node": "mbx2", "activation_preference": 2, "replay_lag_time": lag},
                ],
            }
        ],
        defaults={"failover_after": None},
    )


async def test_a_lagged_copy_whose_clock_runs_two_hours_ahead_still_holds_its_logs(tmp_path):
    cluster = cluster_of(tmp_path, lag="1h")
    cluster.start_node("mbx2", env=faketime_env("+2h"))
    await cluster.start("mbx1")
    await cluster.wait_healthy("mbx2")
    try:
        db = "/v1/databases/DB1"
        await cluster.ok("PUT", "mbx1", f"{db}/mailboxes/alice")
        await cluster.wait_status("mbx2", "DB1", "Healthy")  # seeded: what follows is shipped
        seeded = (await cluster.status("mbx2"))["DB1"]["last_log_replayed"]
        for n in range(5):
            await cluster.ok(
                "POST", "mbx1", f"{db}/mailboxes/alice/items", json={"subject": f"s{n}"}
            )
            await cluster.ok("POST", "mbx1", f"{db}/roll-log")
        generated = (await cluster.status("mbx1"))["DB1"]["last_log_inspected"]

        async def inspected() -> bool:
            return (await cluster.status("mbx2"))["DB1"]["last_log_inspected"] >= generated

        await cluster.wait_for("the lagged copy to inspect every log", inspected)
        # Replay is due an hour after the copy got each log, by its own clock: not now.  (By
        # the active's close time plus the lag, it was due an hour ago on this clock.)
        deadline = time.monotonic() + 2.0
        while time.monotonic() < deadline:
            copy = (await cluster.status("mbx2"))["DB1"]
            assert copy["last_log_replayed"] == seeded, "replayed before its lag"
            assert copy["replay_queue_length"] == generated - seeded
    finally:
        await cluster.close()


async def test_an_active_whose_clock_went_back_never_stamps_a_commit_before_its_logs(tmp_path):
    cluster = cluster_of(tmp_path)
    await cluster.start()
    api = await cluster.start_guarantee_api()
    channel = grpc.aio.insecure_channel(cluster.config["guarantee_api"]["listen"])
    stub = pb_grpc.DataGuaranteeStub(channel)
    try:
        db = "/v1/databases/DB1"
        await cluster.ok("PUT", "mbx1", f"{db}/mailboxes/alice")
        await cluster.ok("POST", "mbx1", f"{db}/mailboxes/alice/items", json={"subject": "a"})
        await cluster.ok("POST", "mbx1", f"{db}/roll-log")
        # The node stops (a clean dismount closes its open log) and comes back an hour behind.
        cluster.terminate("mbx1")
        cluster.start_node("mbx1", env=faketime_env("-1h"))
        await cluster.wait_healthy("mbx1")
        await cluster.wait_status("mbx1", "DB1", "Mounted")
        closed = (await cluster.status("mbx1"))["DB1"]["last_log_generated"]

        async def replayed() -> bool:
            copy = (await cluster.status("mbx2"))["DB1"]
            return copy["last_log_replayed"] >= closed

        await cluster.wait_for("the copy to replay every closed log", replayed)
        last_replayed = datetime.fromisoformat(
            (await cluster.status("mbx2"))["DB1"]["last_replayed_log_time"]
        )
        ack = await cluster.ok(
            "POST", "mbx1", f"{db}/mailboxes/alice/items", json={"subject": "after the jump"}
        )
        commit_time = datetime.fromisoformat(ack["commit_time"])
        assert commit_time >= last_replayed, "a commit stamped before a log already replayed"
        request = pb.CheckReplicationFlushRequest(database="DB1", caller_id="t")
        request.commit_time.FromDatetime(commit_time)
        meta = (("authorization", f"Bearer {TOKEN}"),)
        answer = await stub.CheckReplicationFlush(request, metadata=meta)
        assert answer.status != pb.SATISFIED, "the write is still in the open log"
    finally:
        await channel.close()
        api.terminate()
        api.wait(timeout=20)
        await cluster.close()
