"""Health, reflection, /metrics (checked by promtool on a real scrape), history files."""

from __future__ import annotations

import asyncio
import shutil
import ssl
import subprocess

import aiohttp
import grpc
import pyarrow.parquet as pq
import pytest
from google.protobuf import descriptor_pb2
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from dag_common._generated.dataguarantee.v1 import data_guarantee_pb2 as pb
from dag_common._generated.dataguarantee.v1 import data_guarantee_pb2_grpc as pb_grpc
from dag_common.clock import ManualClock
from dag_common.credentials import Credential, Credentials, Role, digest
from guarantee_api.server import LIVENESS, SERVICE_NAME, GuaranteeService, TlsFiles
from tests.guarantee_api.helpers import AUTH, TOKEN, ask, cluster_config, health_req, start_service
from tests.prometheus import promtool_check, samples, value

SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING


async def check_health(channel: grpc.aio.Channel, service: str = "") -> int:
    stub = health_pb2_grpc.HealthStub(channel)
    return (await stub.Check(health_pb2.HealthCheckRequest(service=service))).status


async def test_health_serving_only_after_the_first_poll_round(nodes, tmp_path):
    for node in nodes.nodes.values():
        node.gate = asyncio.Event()  # hold every node's answer
    run = await start_service(nodes, tmp_path, first_round=False)
    try:
        assert await check_health(run.channel) == NOT_SERVING  # no token needed
        assert await check_health(run.channel, SERVICE_NAME) == NOT_SERVING
        for node in nodes.nodes.values():
            node.gate.set()
        assert run.service.poller is not None
        await run.service.poller.wait_rounds(1)
        assert await check_health(run.channel) == SERVING
        assert await check_health(run.channel, SERVICE_NAME) == SERVING
    finally:
        await run.channel.close()
        await run.service.stop(grace=0)


async def test_not_serving_while_no_node_can_be_reached(running, nodes):
    assert await check_health(running.channel) == SERVING
    for node in nodes.nodes.values():
        node.http_error = 503
    await running.next_round()
    assert await check_health(running.channel) == NOT_SERVING
    assert await check_health(running.channel, SERVICE_NAME) == NOT_SERVING
    assert (await ask(running)).status != pb.SATISFIED, "still answered, never Satisfied"
    nodes.nodes["mbx3"].http_error = None
    await running.next_round()
    assert await check_health(running.channel) == SERVING


async def test_liveness_stays_serving_while_no_node_can_be_reached(running, nodes):
    """The chart's liveness probe asks LIVENESS: a replica that cannot see the cluster is
    not ready, but restarting it would not help."""
    for node in nodes.nodes.values():
        node.http_error = 503
    await running.next_round()
    assert await check_health(running.channel) == NOT_SERVING
    assert await check_health(running.channel, LIVENESS) == SERVING
    await running.service.health.enter_graceful_shutdown()
    assert await check_health(running.channel, LIVENESS) == NOT_SERVING


async def test_graceful_shutdown_reports_not_serving_first(running):
    assert await check_health(running.channel) == SERVING
    await running.service.health.enter_graceful_shutdown()
    assert await check_health(running.channel) == NOT_SERVING
    # in-flight and new calls are still answered until stop(grace)
    assert (await ask(running)).reason


async def test_reflection_lists_the_service(running):
    stub = reflection_pb2_grpc.ServerReflectionStub(running.channel)

    async def one(request):
        async for response in stub.ServerReflectionInfo(iter([request])):
            return response

    listed = await one(reflection_pb2.ServerReflectionRequest(list_services=""))
    names = {s.name for s in listed.list_services_response.service}
    assert {"dataguarantee.v1.DataGuarantee", "grpc.health.v1.Health"} <= names
    found = await one(reflection_pb2.ServerReflectionRequest(file_containing_symbol=SERVICE_NAME))
    assert found.file_descriptor_response.file_descriptor_proto


async def reflect(channel: grpc.aio.Channel, version: str, request):
    """One reflection request on `version`'s route ("v1" or "v1alpha"), with the v1alpha
    messages: the two versions' messages are the same on the wire."""
    info = channel.stream_stream(
        f"/grpc.reflection.{version}.ServerReflection/ServerReflectionInfo",
        request_serializer=reflection_pb2.ServerReflectionRequest.SerializeToString,
        response_deserializer=reflection_pb2.ServerReflectionResponse.FromString,
    )
    async for response in info(iter([request])):
        return response


@pytest.mark.parametrize("version", ["v1", "v1alpha"])
async def test_reflection_v1_and_v1alpha_list_and_describe_every_service(running, version):
    """grpcurl and `buf curl --reflect-protocol grpc-v1` ask v1; v1alpha was all there was."""
    listed = await reflect(
        running.channel, version, reflection_pb2.ServerReflectionRequest(list_services="")
    )
    names = {s.name for s in listed.list_services_response.service}
    assert names == {
        "dataguarantee.v1.DataGuarantee", "grpc.health.v1.Health",
        "grpc.reflection.v1.ServerReflection", "grpc.reflection.v1alpha.ServerReflection",
    }  # fmt: skip
    for name in sorted(names):  # as a client does, to describe what it listed
        found = await reflect(
            running.channel, version,
            reflection_pb2.ServerReflectionRequest(file_containing_symbol=name),
        )  # fmt: skip
        assert found.WhichOneof("message_response") == "file_descriptor_response", name
        files = [
            descriptor_pb2.FileDescriptorProto.FromString(raw)
            for raw in found.file_descriptor_response.file_descriptor_proto
        ]
        package, _, service = name.rpartition(".")
        (described,) = [f for f in files if f.package == package]
        (method, *_) = next(s for s in described.service if s.name == service).method
        assert method.input_type.startswith(f".{package}."), (name, method)


async def test_health_list_answers_every_service(running):
    stub = health_pb2_grpc.HealthStub(running.channel)
    listed = await stub.List(health_pb2.HealthListRequest())  # no token needed
    assert {name: s.status for name, s in listed.statuses.items()} == {
        "": SERVING,
        SERVICE_NAME: SERVING,
        LIVENESS: SERVING,
    }
    await running.service.health.enter_graceful_shutdown()
    listed = await stub.List(health_pb2.HealthListRequest())
    assert {s.status for s in listed.statuses.values()} == {NOT_SERVING}


async def scrape(running) -> str:
    url = f"http://127.0.0.1:{running.service.http_port}/metrics"
    async with aiohttp.ClientSession() as session, session.get(url) as resp:
        assert resp.status == 200
        return await resp.text()


async def test_metrics_pass_promtool_on_a_real_scrape(running, nodes):
    await ask(running)
    await nodes["mbx3"].stop()
    await running.next_round()
    text = await scrape(running)
    promtool_check(text)
    assert value(
        text, "dataguarantee_requests_total",
        method="CheckReplicationHealth", code="OK", status="Satisfied",
    ) == 1  # fmt: skip
    assert 'dataguarantee_copy_queue_length{database="DB1",node="mbx2"} 0.0' in text
    assert 'dataguarantee_copy_healthy{database="DB1",node="mbx3"} 0.0' in text
    assert 'dataguarantee_poll_errors_total{node="mbx3"} 1.0' in text
    assert "dataguarantee_request_duration_seconds_bucket" in text


async def test_errors_are_counted_by_code_and_answers_by_status(running):
    """One label each: the gRPC code of every call, the status of an answer."""
    with pytest.raises(grpc.aio.AioRpcError):
        await running.stub.CheckReplicationHealth(health_req(database="DB9"), metadata=AUTH)
    await ask(running)
    found = samples(await scrape(running))
    counted = {
        (dict(labels)["code"], dict(labels)["status"]): n
        for (name, labels), n in found.items()
        if name == "dataguarantee_requests_total"
    }
    assert counted == {("NOT_FOUND", ""): 1, ("OK", "Satisfied"): 1}


async def test_refused_calls_are_counted_by_their_code(nodes, tmp_path):
    monitor = "a-monitor-secret-0123456789"
    clients = Credentials(
        [
            Credential("movers", frozenset({Role.MOVER}), (digest(TOKEN),)),
            Credential("dashboards", frozenset({Role.MONITOR}), (digest(monitor),)),
        ]
    )
    run = await start_service(nodes, tmp_path, clients=clients)
    try:
        for metadata, code in (
            ((), grpc.StatusCode.UNAUTHENTICATED),
            ((("authorization", f"Bearer {monitor}"),), grpc.StatusCode.PERMISSION_DENIED),
        ):
            with pytest.raises(grpc.aio.AioRpcError) as err:
                await run.stub.CheckReplicationHealth(health_req(), metadata=metadata)
            assert err.value.code() == code
        text = await scrape(run)
        health = {"method": "CheckReplicationHealth", "status": ""}
        assert value(text, "dataguarantee_requests_total", code="UNAUTHENTICATED", **health) == 1
        assert value(text, "dataguarantee_requests_total", code="PERMISSION_DENIED", **health) == 1
    finally:
        await run.channel.close()
        await run.service.stop(grace=0)


async def test_healthz(running):
    url = f"http://127.0.0.1:{running.service.http_port}/healthz"
    async with aiohttp.ClientSession() as session, session.get(url) as resp:
        assert resp.status == 200


async def test_history_is_written_as_partitioned_parquet(nodes, tmp_path):
    run = await start_service(nodes, tmp_path, history_flush_interval="1s")
    try:
        history = run.service.config.guarantee_api.history_dir
        assert not list(history.rglob("*.parquet"))  # one round buffered, not yet written
        await nodes["mbx3"].stop()
        await run.next_round()
        files = list(history.rglob("*.parquet"))
        assert len(files) == 1
        assert (
            files[0].parent.name == "hour=00" and files[0].parent.parent.name == "date=2026-01-01"
        )
        assert not list(history.rglob(".*"))  # no temp file left behind
        rows = pq.read_table(files[0]).to_pylist()
        assert len(rows) == 2 * 4  # two polls x (3 copies of DB1 + 1 of DB2)
        last = {(r["database"], r["copy"]): r for r in rows[4:]}
        assert last[("DB1", "mbx2")]["status"] == "Healthy"
        assert last[("DB1", "mbx2")]["copy_queue_length"] == 0
        assert last[("DB1", "mbx3")]["reachable"] is False
        assert last[("DB1", "mbx3")]["status"] is None
        assert last[("DB1", "mbx1")]["role"] == "Active"
    finally:
        await run.channel.close()
        await run.service.stop(grace=0)


async def test_the_first_history_file_comes_within_a_minute_whatever_the_poll_interval(
    nodes, tmp_path
):
    """As the docs and DataGuaranteeHistoryNotWritten say: a count of 60 polls was five
    minutes at the example config's 5 s polls, and the alert went pending at every start."""
    run = await start_service(nodes, tmp_path, poll_interval="5s")
    try:
        history = run.service.config.guarantee_api.history_dir
        for _ in range(11):  # 55 s after the first round
            await run.next_round()
        assert not list(history.rglob("*.parquet"))
        await run.next_round()  # a minute
        (written,) = history.rglob("*.parquet")
        assert pq.read_table(written).num_rows == 13 * 4  # every round's copies
        assert value(await scrape(run), "dataguarantee_history_samples_total") == 13 * 4
    finally:
        await run.channel.close()
        await run.service.stop(grace=0)


async def test_shutdown_flushes_buffered_history(nodes, tmp_path):
    run = await start_service(nodes, tmp_path, history_flush_interval="10m")
    await run.channel.close()
    await run.service.stop(grace=0)
    files = list(run.service.config.guarantee_api.history_dir.rglob("*.parquet"))
    assert len(files) == 1 and pq.read_table(files[0]).num_rows == 4


async def test_tls_serves_over_a_secure_channel(nodes, tmp_path):
    openssl = shutil.which("openssl")
    assert openssl, "openssl is needed to make a test certificate"
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        [openssl, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
         "-subj", "/CN=localhost", "-addext", "subjectAltName=IP:127.0.0.1",
         "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True,
    )  # fmt: skip
    config = cluster_config(nodes.urls, tmp_path)
    service = GuaranteeService(
        config, node_token=TOKEN, client_token=TOKEN, clock=ManualClock(), tls=TlsFiles(cert, key)
    )
    await service.start()
    try:
        assert service.poller is not None
        await service.poller.wait_rounds(1)
        creds = grpc.ssl_channel_credentials(root_certificates=cert.read_bytes())
        async with grpc.aio.secure_channel(f"127.0.0.1:{service.grpc_port}", creds) as channel:
            stub = pb_grpc.DataGuaranteeStub(channel)
            answer = await stub.CheckReplicationHealth(health_req(), metadata=AUTH)
            assert answer.status == pb.SATISFIED
        async with grpc.aio.insecure_channel(f"127.0.0.1:{service.grpc_port}") as plain:
            with pytest.raises(grpc.aio.AioRpcError):
                await pb_grpc.DataGuaranteeStub(plain).CheckReplicationHealth(
                    health_req(), metadata=AUTH, timeout=5
                )
        # The HTTP side (metrics, health, status page) is served over TLS as well.
        verified = ssl.create_default_context(cafile=str(cert))
        async with aiohttp.ClientSession() as session:
            async with session.get(
                f"https://127.0.0.1:{service.http_port}/healthz", ssl=verified
            ) as resp:
                assert resp.status == 200
            with pytest.raises(aiohttp.ClientError):
                async with session.get(f"http://127.0.0.1:{service.http_port}/healthz") as resp:
                    await resp.read()
    finally:
        await service.stop(grace=0)
