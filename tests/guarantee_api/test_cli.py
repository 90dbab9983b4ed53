"""`guarantee-api serve`: exit 2 on a bad config, graceful exit 0 on SIGTERM."""

from __future__ import annotations

import asyncio
import os
import signal
import sys

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from dag_common._generated.dataguarantee.v1 import data_guarantee_pb2 as pb
from dag_common._generated.dataguarantee.v1 import data_guarantee_pb2_grpc as pb_grpc
from dag_common.clock import ManualClock
from guarantee_api.cli import main
from guarantee_api.serve_cli import _serve
from guarantee_api.server import GuaranteeService
from tests.cluster_harness import wait_until
from tests.guarantee_api.helpers import AUTH, TOKEN, cluster_config, health_req, write_config


def test_bad_config_names_the_field_and_exits_2(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("DG_AUTH_TOKEN", TOKEN)
    config = write_config(tmp_path / "c.yaml", {"mbx1": "http://127.0.0.1:1"}, poll_interval="soon")
    assert main(["serve", "--config", str(config)]) == 2
    err = capsys.readouterr().err
    assert "guarantee_api.poll_interval" in err and "not a duration" in err


def test_missing_config_and_bad_arguments_exit_2(tmp_path, capsys):
    assert main(["serve", "--config", str(tmp_path / "absent.yaml")]) == 2
    assert "cannot read config" in capsys.readouterr().err
    assert main(["serve"]) == 2
    assert main(["bogus"]) == 2


def test_missing_token_exits_2(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("DG_AUTH_TOKEN", raising=False)
    config = write_config(tmp_path / "c.yaml", {"mbx1": "http://127.0.0.1:1"})
    assert main(["serve", "--config", str(config)]) == 2
    assert "no cluster token" in capsys.readouterr().err


async def test_serve_answers_then_shuts_down_gracefully_on_sigterm(nodes, tmp_path):
    config = write_config(tmp_path / "c.yaml", nodes.urls, history_dir=str(tmp_path / "h"))
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "guarantee_api.cli", "serve", "--config", str(config),
        "--grace", "1",
        env={**os.environ, "DG_AUTH_TOKEN": TOKEN},
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        line = (await asyncio.wait_for(proc.stdout.readline(), 30)).decode()
        assert "serving gRPC on port" in line, line
        port = int(line.split("port ")[1].split(",")[0])
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            health = health_pb2_grpc.HealthStub(channel)
            request = health_pb2.HealthCheckRequest()
            watch = health.Watch(request)
            async for update in watch:  # wait for SERVING: the first poll round is done
                if update.status == health_pb2.HealthCheckResponse.SERVING:
                    break
            answer = await pb_grpc.DataGuaranteeStub(channel).CheckReplicationHealth(
                health_req(), metadata=AUTH
            )
            assert answer.status == pb.SATISFIED, answer.reason
        proc.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(proc.wait(), 30) == 0
        assert list((tmp_path / "h").rglob("*.parquet"))  # the last history flush happened
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()


async def test_serve_stops_its_server_however_it_ends(nodes, tmp_path):
    """Cancelled rather than signalled (asyncio.run cancels it on an error or Ctrl-C), serve
    still stops the gRPC server: one left running when the loop closes hangs the process in
    grpc's shutdown (tests/grpc_servers.py fails this test if it is left running)."""
    service = GuaranteeService(
        cluster_config(nodes.urls, tmp_path), node_token=TOKEN, client_token=TOKEN,
        clock=ManualClock(),
    )  # fmt: skip
    serving = asyncio.create_task(_serve(service, 0, None))
    await wait_until("the service started", lambda: service.poller is not None)
    serving.cancel()
    with pytest.raises(asyncio.CancelledError):
        await serving
    async with grpc.aio.insecure_channel(f"127.0.0.1:{service.grpc_port}") as channel:
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await health_pb2_grpc.HealthStub(channel).Check(
                health_pb2.HealthCheckRequest(), timeout=5
            )
    assert refused.value.code() == grpc.StatusCode.UNAVAILABLE
