"""A node stops when told even while a request of its cannot end: the peer it is
answering stopped reading (a passive being seeded, then SIGSTOP'd, say).  Found in the
resilience suite (sigstop-active): a node waited on such a request past its supervisor's
patience.  It now waits `SHUTDOWN_GRACE` for the requests in flight, names in its log the
ones still running with the line each waits on, and cancels them."""

from __future__ import annotations

import asyncio
from urllib.parse import urlsplit

import pytest

from replication_node.http.in_flight import SHUTDOWN_GRACE
from tests.cluster_harness import TOKEN, LocalCluster, wait_until

pytestmark = pytest.mark.slow

DB = "/v1/databases/DB1"


async def test_a_node_stops_while_a_peer_has_stopped_reading_its_seed(tmp_path):
    c = LocalCluster(
        tmp_path,
        nodes=[("mbx1", "redmond")],
        databases=[{"name": "DB1", "copies": [{"node": "mbx1", "activation_preference": 1}]}],
        defaults={"failover_after": None, "log_file_size": "1MiB"},
    )
    await c.start()
    writer = None
    try:
        await c.ok("PUT", "mbx1", f"{DB}/mailboxes/alice")
        # A database far larger than what the kernel buffers on a loopback connection
        # (a few MiB each way): the seed's writes must block on the reader.
        body = "x" * 600_000
        for _ in range(64):
            await c.ok(
                "POST", "mbx1", f"{DB}/mailboxes/alice/items", json={"items": [{"body": body}]}
            )
        # The seed is the database file: wait for LLR to write the items into it (it holds
        # back while large bodies are staged, `active/llr_pacing.py`).
        (database,) = tmp_path.rglob("DB1.sqlite")
        await wait_until("the items in the database file", lambda: database.stat().st_size > 3e7)
        url = urlsplit(c.url("mbx1"))
        reader, writer = await asyncio.open_connection(url.hostname, url.port)
        writer.write(
            f"GET {DB}/seed HTTP/1.1\r\nHost: {url.netloc}\r\n"
            f"Authorization: Bearer {TOKEN}\r\n\r\n".encode()
        )
        await writer.drain()
        status = await reader.readline()
        assert b" 200 " in status, status
        # Never read again: the node's writes of the seed fill the buffers and wait.
        c.terminate("mbx1")  # AssertionError if it does not stop within 30 s
        log = c.log("mbx1")
        assert f"still running {SHUTDOWN_GRACE:g}s into shutdown is cancelled" in log, log[-3000:]
        assert "logshare.py" in log and "in _seed" in log, log[-3000:]
    finally:
        if writer is not None:
            writer.close()
        await c.close()
