"""The log share over real HTTP: read-only, token-guarded, no path out of the log directory;
the client refuses truncated and damaged transfers."""

from __future__ import annotations

import asyncio

import aiohttp
import pytest
from aiohttp import web

from dag_common.auth import bearer
from replication_node.active.copy import CopyPaths
from replication_node.errors import GenerationGone, LogShareError
from replication_node.log.logfile import verify_closed
from replication_node.passive.seeder import SeedProgress, seed_bytes, seed_copy, seed_over
from replication_node.shipping.logshare_client import HttpLogSource
from replication_node.storage.database import Database
from tests.cluster_harness import serve_app
from tests.replication_node.share import TOKEN


@pytest.fixture
async def share(share):
    """conftest's share, with 20 items written and its log rolled."""
    await share.write(0, 20)
    await share.roll()
    return share


async def get(share, path, token=TOKEN, method="GET"):
    async with share.session.request(
        method, share.url + path, headers=bearer(token) if token else {}
    ) as resp:
        return resp.status, await resp.read()


async def test_info_fetch_and_notifications(share):
    source = share.source()
    info = await source.info()
    assert info.last_generation == share.active.last_log_generated == 1
    assert info.first_generation == 1 and info.open_generation == 2
    data = await source.fetch(1)
    assert data == share.closed_file(1).read_bytes()
    assert verify_closed(data, 1).closed

    stream = source.notifications(1)
    connected = await asyncio.wait_for(anext(stream), 10)  # a line at once, on connecting
    assert connected.last_generation == 1

    async def next_notification_past(after):
        async for note in stream:
            if note.last_generation > after:
                return note

    await share.write(20, 5)
    await share.roll()
    note = await asyncio.wait_for(next_notification_past(1), 10)
    assert note.last_generation == 2
    await stream.aclose()


@pytest.mark.parametrize("token", [None, "wrong-token"])
async def test_every_route_needs_the_token(share, token):
    for path in (
        "/v1/databases/DB1/logs",
        "/v1/databases/DB1/logs/E00000001.log",
        "/v1/databases/DB1/seed",
    ):
        status, _ = await get(share, path, token=token)
        assert status == 401, path


@pytest.mark.parametrize(
    "name",
    [
        "E00.log",
        "E0000000G.log",
        "e00000001.log",
        "E00000000.log",
        "DB1.sqlite",
        "..%2FDB1.sqlite",
        "%2E%2E%2F%2E%2E%2Fcluster.db",
        "E00000001.log.tmp",
    ],
)
async def test_only_closed_generation_names_are_served(share, name):
    status, body = await get(share, f"/v1/databases/DB1/logs/{name}")
    assert status in (400, 404), name
    assert b"SQLite format" not in body and b"DGLOG" not in body


async def test_unknown_database_and_missing_generation_are_404(share):
    assert (await get(share, "/v1/databases/NOPE/logs"))[0] == 404
    assert (await get(share, "/v1/databases/DB1/logs/E00000009.log"))[0] == 404
    with pytest.raises(GenerationGone, match="no longer on the active"):
        await share.source().fetch(9)


async def test_an_active_that_is_dismounted_for_now_is_not_a_generation_gone(share):
    # A dismounted active (a failure being re-mounted, an operator's dismount) shares
    # nothing for now: the copy must wait and ask again, not ask for a reseed.
    await share.write(0, 5)
    await share.roll()
    await share.active.dismount()
    with pytest.raises(LogShareError) as caught:
        await share.source().fetch(1)
    assert not isinstance(caught.value, GenerationGone)
    assert "no active copy" in str(caught.value)


@pytest.mark.parametrize("method", ["POST", "PUT", "DELETE"])
async def test_the_share_is_read_only(share, method):
    status, _ = await get(share, "/v1/databases/DB1/logs/E00000001.log", method=method)
    assert status == 405
    assert share.closed_file(1).exists()


async def test_seed_is_a_consistent_database_at_the_waypoint(share, tmp_path):
    paths = CopyPaths(tmp_path / "p" / "DB1", "DB1")
    info = await seed_copy(share.source(), paths)
    db = Database.open(paths.database)
    assert db.header.waypoint == info.waypoint == share.active.copy.header.waypoint
    assert str(db.header.log_signature) == info.log_signature
    db.close()


async def _serve_raw(handler):
    server = await asyncio.start_server(handler, "127.0.0.1", 0)
    return server, server.sockets[0].getsockname()[1]


async def test_a_truncated_transfer_is_refused(tmp_path):
    async def cut_short(reader, writer):
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 5000\r\n\r\n" + b"x" * 100)
        await writer.drain()
        writer.close()

    server, port = await _serve_raw(cut_short)
    async with server, aiohttp.ClientSession() as session:
        source = HttpLogSource(f"http://127.0.0.1:{port}", "DB1", session=session, token=TOKEN)
        with pytest.raises(LogShareError, match=r"cut|truncated"):
            await source.fetch(1)


async def test_a_damaged_seed_changes_nothing(share, tmp_path):
    paths = CopyPaths(tmp_path / "p" / "DB1", "DB1")
    await seed_copy(share.source(), paths)
    before = paths.database.read_bytes()

    async def damaged(request):
        resp = web.StreamResponse(
            headers={
                "X-Database-Signature": "x",
                "X-Log-Signature": "y",
                "X-Waypoint": "0",
                "X-Content-CRC32C": "12345",
            }
        )
        await resp.prepare(request)
        await resp.write(b"SQLite format 3\0" + b"\0" * 1000)
        return resp

    app = web.Application()
    app.router.add_get("/v1/databases/DB1/seed", damaged)
    runner, url = await serve_app(app)
    try:
        source = HttpLogSource(url, "DB1", session=share.session, token=TOKEN)
        with pytest.raises(LogShareError, match="checksum"):
            await seed_copy(source, paths)
    finally:
        await runner.cleanup()
    assert paths.database.read_bytes() == before
    assert [p.name for p in paths.root.iterdir() if p.name.endswith(".seed")] == []


async def test_a_seed_announces_its_length_and_the_logs_it_needs_and_counts_them(share, tmp_path):
    """The seed's progress (db reseed --wait, status): the database file's bytes as they
    arrive, then the closed generations above its waypoint, each counted once inspected."""
    for first in range(20, 80, 20):  # LLR keeps the newest generations out of the file
        await share.write(first, 20)
        await share.roll()
    paths = CopyPaths(tmp_path / "p" / "DB1", "DB1")
    progress = SeedProgress()
    info = await seed_copy(share.source(), paths, progress)
    file_size = paths.database.stat().st_size
    assert progress.file_done == progress.file_total == file_size
    last = share.active.last_log_generated
    assert info.waypoint < last, "the seed needs logs above its waypoint"
    sizes = tuple(share.closed_file(g).stat().st_size for g in range(info.waypoint + 1, last + 1))
    assert progress.log_sizes == info.log_sizes == sizes
    total = file_size + sum(sizes)
    assert seed_bytes(progress, info.waypoint) == (file_size, total)
    assert not seed_over(progress, info.waypoint)
    assert seed_bytes(progress, info.waypoint + 1) == (file_size + sizes[0], total)
    assert seed_bytes(progress, last) == (total, total) and seed_over(progress, last)
