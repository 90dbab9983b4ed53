"""A caller that went away before its answer is not a storage failure.  Found after a
SIGSTOP/SIGCONT of a node: the watchers that had given up on it (the guarantee service, a
`status --watch`) had their requests queued in the kernel, and the node, once resumed, took
each one's closed connection for a failing disk: `ERROR … GET /v1/status/watch failed on
storage: Cannot write to closing transport`, 18 times."""

from __future__ import annotations

import asyncio
import re
import signal
from urllib.parse import urlsplit

import pytest

from tests.cluster_harness import TOKEN, LocalCluster, wait_until

pytestmark = pytest.mark.slow

GONE = "the caller went away before its answer"


async def test_a_watcher_gone_while_the_node_was_stopped_is_no_error(tmp_path):
    c = LocalCluster(
        tmp_path,
        nodes=[("mbx1", "redmond")],
        databases=[{"name": "DB1", "copies": [{"node": "mbx1", "activation_preference": 1}]}],
        defaults={"failover_after": None},
    )
    await c.start()
    try:
        await c.wait_status("mbx1", "DB1", "Mounted")
        url = urlsplit(c.url("mbx1"))
        node = c.procs["mbx1"]
        node.send_signal(signal.SIGSTOP)
        try:
            # The kernel takes the connections of a stopped process; the watchers give up
            # and close theirs before it reads a byte of them.
            for _ in range(3):
                _, writer = await asyncio.open_connection(url.hostname, url.port)
                writer.write(
                    f"GET /v1/status/watch HTTP/1.1\r\nHost: {url.netloc}\r\n"
                    f"Authorization: Bearer {TOKEN}\r\n\r\n".encode()
                )
                await writer.drain()
                writer.close()
                await writer.wait_closed()
        finally:
            node.send_signal(signal.SIGCONT)
        await wait_until(
            "the node to have answered the three watchers it found gone",
            lambda: c.log("mbx1").count(GONE) + c.log("mbx1").count("failed on storage") >= 3,
        )
        log = c.log("mbx1")
        assert " ERROR " not in log, log[-3000:]
        assert log.count(f"GET /v1/status/watch: {GONE}") == 3, log[-3000:]
        status, metrics = await c.call("GET", "mbx1", "/metrics")
        assert status == 200
        unexpected = rb'^replication_unexpected_errors_total\{node="mbx1"\} 0\.0$'
        assert re.search(unexpected, metrics, re.M), metrics
    finally:
        await c.close()
