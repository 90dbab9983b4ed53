"""A message written as its bytes (`NodeStoreClient.put_message`, `dag_common/message_body.py`)
against fake nodes on real aiohttp servers (port 0): bytes or a file, sent a slice at a time
with its Content-Length, whole again to the node a switchover names, and the node's
`X-Message-CRC32C` checked against what was sent."""

from __future__ import annotations

import hashlib
from pathlib import Path

import aiohttp
import crc32c
import pytest
from aiohttp import web

from dag_common.config import parse_config
from dag_common.errors import NodeCallError
from dag_common.memory import MMAP_THRESHOLD
from dag_common.message_body import PIECE, SLICE, MessageBody, digest_headers
from dag_common.node_client import NodeStoreClient
from tests.cluster_harness import cluster_config, serve_app

MESSAGE = b"Subject: big\r\nMessage-ID: <big@example>\r\n\r\n" + bytes(range(256)) * 4099


def status_of(node: str, role: str, status: str) -> dict:
    copy = {"database": "DB1", "node": node, "site": "s", "activation_preference": 1}
    return {"node": node, "site": "s", "copies": [{**copy, "role": role, "status": status}]}


class FakeNode:
    """DB1's copy on one node: the active, or a passive naming `active_url`; `lie` answers a
    digest of other bytes."""

    def __init__(self, name: str, cluster: dict) -> None:
        self.name = name
        self.cluster = cluster
        self.got: list[tuple[bytes, dict[str, str]]] = []
        self.url = ""

    async def status(self, request: web.Request) -> web.Response:
        active = self.cluster["active"] == self.name
        role, status = ("Active", "Mounted") if active else ("Passive", "Healthy")
        return web.json_response(status_of(self.name, role, status))

    async def put(self, request: web.Request) -> web.Response:
        raw = await request.read()
        self.got.append((raw, dict(request.headers)))
        if self.cluster["active"] != self.name:
            url = self.cluster["urls"][self.cluster["active"]]
            return web.json_response(
                {"error": "passive", "active_node": self.cluster["active"], "active_url": url},
                status=409,
            )
        stored = raw + b"x" if self.cluster.get("lie") else raw
        headers = digest_headers(hashlib.sha256(stored).hexdigest(), crc32c.crc32c(stored))
        if self.cluster.get("sha_only"):  # a node from before the CRC32C
            del headers["X-Message-CRC32C"]
        answer = {"change_number": 3, "epoch": 1, "lsn": {"generation": 2, "offset": 0, "epoch": 1}}
        return web.json_response(answer, status=201, headers=headers)


@pytest.fixture
async def nodes(tmp_path):
    cluster: dict = {"active": "a", "urls": {}}
    found, runners = {}, []
    for name in ("a", "b"):
        node = FakeNode(name, cluster)
        app = web.Application(client_max_size=64 << 20)
        app.router.add_get("/v1/status", node.status)
        app.router.add_put("/v1/databases/DB1/mailboxes/{m}/items/{i}/message", node.put)
        runner, node.url = await serve_app(app)
        cluster["urls"][name] = node.url
        found[name] = node
        runners.append(runner)
    copies = [{"node": n, "activation_preference": p} for p, n in enumerate("ab", 1)]
    config = parse_config(
        cluster_config(
            [(n, "s", found[n].url) for n in "ab"], [{"name": "DB1", "copies": copies}],
            cluster="t",
        ),
        base_dir=tmp_path,
    )  # fmt: skip
    async with aiohttp.ClientSession() as session:
        yield cluster, found, NodeStoreClient(config, token="t", session=session)
    for runner in runners:
        await runner.cleanup()


def source(kind: str, tmp_path: Path) -> bytes | Path:
    if kind == "bytes":
        return MESSAGE
    path = tmp_path / "body.eml"
    path.write_bytes(MESSAGE)
    return path


@pytest.mark.parametrize("kind", ["bytes", "file"])
async def test_a_message_is_sent_whole_with_its_length_not_chunked(nodes, kind, tmp_path):
    _, found, client = nodes
    written = await client.put_message("DB1", "carol", "i1", source(kind, tmp_path))
    assert written.change_number == 3
    ((raw, headers),) = found["a"].got
    assert raw == MESSAGE
    assert headers["Content-Length"] == str(len(MESSAGE))
    assert "Transfer-Encoding" not in headers
    assert headers["Content-Type"] == "message/rfc822"


@pytest.mark.parametrize("kind", ["bytes", "file"])
async def test_the_node_a_passive_names_gets_the_whole_message_again(nodes, kind, tmp_path):
    cluster, found, client = nodes
    await client.put_message("DB1", "carol", "i1", source(kind, tmp_path))  # a is known
    cluster["active"] = "b"
    await client.put_message("DB1", "carol", "i2", source(kind, tmp_path))
    assert [raw == MESSAGE for raw, _ in found["a"].got] == [True, True]  # then 409
    assert [raw == MESSAGE for raw, _ in found["b"].got] == [True]


@pytest.mark.parametrize("kind", ["bytes", "file"])
async def test_an_answer_for_other_bytes_than_those_sent_is_a_failed_call(nodes, kind, tmp_path):
    cluster, _, client = nodes
    cluster["lie"] = True
    with pytest.raises(NodeCallError, match=r"not \w+ as sent") as caught:
        await client.put_message("DB1", "carol", "i1", source(kind, tmp_path))
    assert caught.value.status is None  # sent again later, as any call that got no answer


async def test_a_node_that_names_no_crc32c_is_not_checked(nodes, tmp_path):
    """A node from before `X-Message-CRC32C` (its SHA-256 alone) is not checked, as one
    that names no digest never was: the write stands (it is not sent again for ever)."""
    cluster, found, client = nodes
    cluster["lie"] = cluster["sha_only"] = True
    written = await client.put_message("DB1", "carol", "i1", source("bytes", tmp_path))
    assert written.change_number == 3 and len(found["a"].got) == 1


@pytest.mark.parametrize("kind", ["bytes", "file"])
async def test_a_body_is_read_and_sent_a_slice_at_a_time(kind, tmp_path):
    """Bytes held are sent as views of SLICE bytes; a file is read a slice a trip to its
    thread, in pieces under the allocator's mmap threshold (from the heap, not a mapping
    each)."""
    body = MessageBody(source(kind, tmp_path))
    most = SLICE if kind == "bytes" else PIECE
    for _ in range(2):  # each attempt afresh, whole
        parts = [bytes(p) async for p in body.payload()]
        assert max(map(len, parts)) == most and b"".join(parts) == MESSAGE
        assert PIECE < MMAP_THRESHOLD
        assert body.check(f"{crc32c.crc32c(MESSAGE):08x}") is None
        assert body.check(f"{crc32c.crc32c(MESSAGE[1:]):08x}") is not None


async def test_a_file_shorter_than_it_was_is_an_error_not_a_short_message(tmp_path):
    path = source("file", tmp_path)
    body = MessageBody(path)
    path.write_bytes(MESSAGE[:100])
    with pytest.raises(OSError, match="ended after 100 of"):
        _ = [p async for p in body.payload()]
