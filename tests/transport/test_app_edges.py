"""The transport's API at its edges, on a real aiohttp server with the real middlewares (the
queue behind it a stub: nothing here reaches it): refused calls are counted by the role
they needed and their status, and bad input is named cut short."""

from __future__ import annotations

from types import SimpleNamespace

import aiohttp
import pytest

from dag_common.config import ClusterConfig, NodeConfig
from dag_common.credentials import Credential, Credentials, Role, digest
from tests.cluster_harness import serve_app
from tests.prometheus import promtool_check, value
from transport.app import build_app
from transport.metrics import TransportMetrics

MAIL, NODES = "mail-secret-0123456789ab", "nodes-secret-0123456789a"


@pytest.fixture
async def api():
    async def nothing() -> None:
        return None

    async def no_deliveries(message_id: str) -> list[object]:
        return []

    transport = SimpleNamespace(
        name="hub1",
        config=ClusterConfig(cluster="c", nodes=[NodeConfig(name="mbx1", site="s",
                                                            url="http://h:1", data_dir="d")]),
        credentials=lambda: Credentials([
            Credential("mail", frozenset({Role.STORE}), (digest(MAIL),)),
            Credential("nodes", frozenset({Role.REPLICATION}), (digest(NODES),)),
        ]),
        metrics=TransportMetrics(),
        refresh_gauges=nothing,
        store=SimpleNamespace(message=no_deliveries),
    )  # fmt: skip
    runner, url = await serve_app(build_app(transport))  # type: ignore[arg-type]
    async with aiohttp.ClientSession() as session:
        yield session, url
    await runner.cleanup()


def bearer(secret: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {secret}"}


async def test_refused_calls_are_counted_by_role_and_status(api):
    session, url = api
    for path, headers, status in (
        ("/v1/queue", {}, 401),
        ("/v1/queue", bearer("an-unknown-secret-000000"), 401),
        ("/v1/queue", bearer(MAIL), 403),
        ("/v1/messages/m1", bearer(NODES), 403),
        ("/v1/messages/m1", bearer(MAIL), 404),  # served: not a refusal
    ):
        async with session.get(url + path, headers=headers) as resp:
            assert resp.status == status, path
    async with session.get(url + "/metrics") as resp:
        text = await resp.text()
    promtool_check(text)
    assert value(text, "transport_calls_refused_total", role="monitor", code="401") == 2
    assert value(text, "transport_calls_refused_total", role="monitor", code="403") == 1
    assert value(text, "transport_calls_refused_total", role="store", code="403") == 1


async def test_an_unknown_message_id_is_named_cut_short(api):
    session, url = api
    async with session.get(url + "/v1/messages/" + "m" * 8000, headers=bearer(MAIL)) as resp:
        assert resp.status == 404
        said = (await resp.json())["error"]
    assert said.startswith("no message 'mmmm") and "…(8000 bytes)" in said and len(said) < 200
