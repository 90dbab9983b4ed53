"""The items listing holds one item's text at a time (issue 52): over a real SQLite file and a
real aiohttp server and client on port 0, in one process, with Python's own allocations
traced (`tracemalloc` counts every str and bytes the listing makes, exactly; SQLite's value
of the row being read is outside it, and the same either way).

Before: each body's JSON slices were all made before the first was written (the body once
more, beside its text), and the page just written stayed referenced while the next was read
(its text beside the next one's): twice the item and more at once."""

from __future__ import annotations

import tracemalloc
import uuid
from pathlib import Path

import aiohttp
from aiohttp import web

from dag_common.model import Position
from dag_common.store_api import ItemsAnswer
from replication_node.http.items_stream import Listing, stream_items
from replication_node.log import operations as ops
from replication_node.log.events import Transaction
from replication_node.storage.database import Database
from tests.replication_node.strategies import T0

MIB = 1 << 20
ITEM = 8 * MIB
ITEMS = 4


def text(seed: int) -> str:
    line = f"line {seed} of a large item, plain ASCII\r\n"
    return (line * (ITEM // len(line) + 1))[:ITEM]


def database(path: Path) -> Database:
    db = Database.create(path, database_signature=uuid.uuid4(), log_signature=uuid.uuid4())
    for i in range(ITEMS):
        put = ops.PutItem("m", i + 2, f"i{i}", "Inbox", f"s{i}", text(i))
        first = (ops.CreateMailbox("m", 1),) if i == 0 else ()
        txn = Transaction(Position(i + 1, 512), T0, (*first, put))
        db.apply([txn], waypoint=i + 1, committed=i + 1, last_log_time=T0)
    return db


async def test_a_whole_listing_holds_one_items_text_at_a_time(tmp_path: Path) -> None:
    db = database(tmp_path / "db.sqlite")

    async def listing(request: web.Request) -> web.StreamResponse:
        def answer(page) -> ItemsAnswer:  # type: ignore[no-untyped-def]
            return ItemsAnswer(mailbox="m", items=[], last_change_number=page.through)

        return await stream_items(request, Listing(db, "m", 0, None, None, answer))

    app = web.Application()
    app.router.add_get("/items", listing)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        received = 0
        async with aiohttp.ClientSession() as session:
            tracemalloc.start()
            try:
                async with session.get(f"http://127.0.0.1:{port}/items") as resp:
                    assert resp.status == 200
                    async for chunk in resp.content.iter_chunked(64 * 1024):
                        received += len(chunk)
                _, peak = tracemalloc.get_traced_memory()
            finally:
                tracemalloc.stop()
        assert received > ITEMS * ITEM
        # One item's text, and a slice of it escaped and encoded (1 MiB, a few times over):
        # 1.44 times the item.  Before: 2.36.
        assert peak < 1.9 * ITEM, peak / ITEM
    finally:
        await runner.cleanup()
        db.close()
