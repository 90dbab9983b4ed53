"""A stop asked for ends in a clean shutdown, even after a large item's paced LLR write and
an operator's `db header` on the live file, and under writes.  Found by `make demo`: its
header dump of the live DB1 came after LLR had written large bodies into the file, and the
node's stop then failed (`FileNotFoundError: …/DB1.sqlite-wal` while dismounting) and left
the file in Dirty Shutdown.  The paced write-behind had opened and closed the database file
by its path, and closing any descriptor of a file drops every POSIX lock the process holds on
it, SQLite's too: the `db header` process, finding no lock, took itself for the file's last
user and checkpointed and deleted the WAL under the node."""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
import sys
from pathlib import Path

import aiohttp
import pytest

from tests.cluster_harness import ROOT, LocalCluster, wait_until
from tests.replication_node.helpers import text_body

pytestmark = pytest.mark.slow

MiB = 1024 * 1024
ITEMS = "/v1/databases/DB1/mailboxes/alice/items"


def header_dump(database: Path) -> str:
    """`replication-node db header FILE`, as an operator runs it: its output."""
    done = subprocess.run(
        [sys.executable, "-m", "replication_node.cli.main", "db", "header", str(database)],
        capture_output=True, text=True, cwd=ROOT, timeout=120, check=True,
    )  # fmt: skip
    return done.stdout


async def test_a_stop_under_writes_after_a_header_dump_of_the_live_file_is_clean(tmp_path):
    c = LocalCluster(
        tmp_path,
        nodes=[("mbx1", "redmond")],
        databases=[{"name": "DB1", "copies": [{"node": "mbx1", "activation_preference": 1}]}],
        defaults={"failover_after": None, "log_file_size": "1MiB"},
    )
    await c.start()
    acked: list[str] = []
    try:
        await c.wait_status("mbx1", "DB1", "Mounted")
        await c.ok("PUT", "mbx1", "/v1/databases/DB1/mailboxes/alice")
        (database,) = tmp_path.rglob("DB1.sqlite")
        wal = database.with_name("DB1.sqlite-wal")
        for n in range(2):  # LLR writes each into the file paced (over PACED_BYTES)
            body = {"item_id": f"big{n}", "body": text_body(2 * MiB, seed=n)}
            await c.ok("POST", "mbx1", ITEMS, json=body)
            acked.append(f"big{n}")
        for _ in range(3):  # past the LLR depth (2): the large items go into the file
            await c.ok("POST", "mbx1", "/v1/databases/DB1/roll-log")
        await wait_until(
            "the large items in the database file", lambda: database.stat().st_size > 4e6
        )
        # An operator looks at the live file's header, as the demo does.
        await asyncio.to_thread(header_dump, database)
        assert wal.exists(), "the node's WAL deleted under it by another process's close"

        async def writes() -> None:
            for i in range(10_000):
                try:
                    await c.ok("POST", "mbx1", ITEMS, json={"items": [
                        {"item_id": f"small{i}", "body": text_body(3000, seed=i)},
                        {"item_id": f"big-{i}", "body": text_body(MiB + 1000, seed=i)},
                    ]})  # fmt: skip
                except (AssertionError, aiohttp.ClientError):
                    return  # the node stopping refuses it, or is gone
                acked.extend([f"small{i}", f"big-{i}"])

        writer = asyncio.create_task(writes())
        await wait_until("writes under way", lambda: len(acked) > 6)
        await asyncio.to_thread(c.terminate, "mbx1")  # SIGTERM
        with contextlib.suppress(asyncio.CancelledError):
            await writer
        log = c.log("mbx1")
        assert " ERROR " not in log, log[-4000:]
        header = await asyncio.to_thread(header_dump, database)
        assert "State:               Clean Shutdown" in header, header
        await c.start("mbx1")
        await c.wait_status("mbx1", "DB1", "Mounted")
        held = await c.items("mbx1", "DB1", "alice")
        assert [a for a in acked if a not in held] == [], "acknowledged writes lost"
    finally:
        await c.close()
