"""Baselines the replication benchmarks compare against, run in the same process:

(a) a plain aiohttp pull of closed files over loopback that checksums (CRC32C) and fsyncs
    each one into a directory, one at a time;
(b) SQLite batched upserts of rows shaped like the mailbox items (executemany, one
    transaction per batch, synchronous=FULL).
"""

from __future__ import annotations

import os
import sqlite3
import time
import uuid
from pathlib import Path

import aiohttp
import crc32c
from aiohttp import web


async def pull_baseline(files: list[Path], dest: Path) -> tuple[float, float]:
    """MB/s and files/s of an aiohttp GET + CRC32C + write + fsync per file over loopback."""

    async def serve(request: web.Request) -> web.StreamResponse:
        return web.FileResponse(files[int(request.match_info["i"])])

    app = web.Application()
    app.router.add_get("/f/{i}", serve)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    dest.mkdir(parents=True, exist_ok=True)
    total = 0
    start = time.perf_counter()
    async with aiohttp.ClientSession() as session:
        for i, _ in enumerate(files):
            async with session.get(f"http://127.0.0.1:{port}/f/{i}") as resp:
                data = await resp.read()
            crc32c.crc32c(data)
            path = dest / f"{i}.bin"
            with open(path, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            total += len(data)
    elapsed = time.perf_counter() - start
    await runner.cleanup()
    return total / elapsed / 1e6, len(files) / elapsed


def upsert_baseline(
    path: Path, rows: int, batch: int = 500, body: int = 1000, *, random_ids: bool = False
) -> float:
    """Rows/s of SQLite executemany upserts of item-shaped rows (synchronous=FULL, WAL).
    Item ids `i0`, `i1`, … by default (nearly in index order); `random_ids`: 32 hex digits
    at random (uuid4, as the active gave them before issue 33), which spread the inserts
    over the whole primary key index (reported beside the default, never instead of it)."""
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=FULL")
    conn.execute(
        "CREATE TABLE items(mailbox TEXT, item_id TEXT, folder TEXT, subject TEXT, body TEXT,"
        " size INTEGER, change_number INTEGER, deleted INTEGER, commit_time TEXT,"
        " PRIMARY KEY (mailbox, item_id))"
    )
    conn.execute("CREATE INDEX items_by_change ON items(mailbox, change_number)")
    text = "x" * body
    ids = [uuid.uuid4().hex if random_ids else f"i{i}" for i in range(rows)]
    start = time.perf_counter()
    for first in range(0, rows, batch):
        conn.execute("BEGIN")
        conn.executemany(
            "INSERT OR REPLACE INTO items VALUES (?, ?, ?, ?, ?, ?, ?, 0, ?)",
            [
                ("bench", ids[i], "Inbox", "s", text, body, i + 1, "2026-01-01T00:00:00")
                for i in range(first, min(rows, first + batch))
            ],
        )
        conn.execute("COMMIT")
    elapsed = time.perf_counter() - start
    conn.close()
    return rows / elapsed
