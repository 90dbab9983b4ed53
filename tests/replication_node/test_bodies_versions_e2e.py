"""Copies of one database across the change that moved large bodies into `bodies` (issue 52,
`storage/body_migration.py`): the log does not change, so a copy on the new code replays an
active on the code before, and the reverse, to the same content digest (a passive compares
its own with the active's at every roll, and fails on a difference).  Over real node
processes, one of them running the code before (`OLD`, taken from git into a directory of
its own): its file keeps large bodies in `items.body_blob`; restarted on the new code, its
file has them moved on open, and replicates on."""

from __future__ import annotations

import asyncio
import contextlib
import io
import sqlite3
import subprocess
import tarfile
from pathlib import Path

import pytest

from tests.cluster_harness import ROOT, LocalCluster
from tests.replication_node.e2e import converged
from tests.replication_node.test_memory_e2e import LONG, MIB, PREFIX, cluster, message, mounted

pytestmark = pytest.mark.slow

OLD = "d0df982"  # the last commit before `bodies`: large bodies in `items.body_blob`


@pytest.fixture
def old_code(tmp_path: Path) -> Path:
    """The code at `OLD`, in a directory of its own (skipped without git or the commit)."""
    try:
        archive = subprocess.run(["git", "archive", OLD], cwd=ROOT, capture_output=True)
    except FileNotFoundError:
        pytest.skip("no git here")
    if archive.returncode:
        pytest.skip(f"no commit {OLD} here: {archive.stderr.decode()}")
    tree = tmp_path / "old-code"
    with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
        tar.extractall(tree, filter="data")
    return tree


def on_old_code(c: LocalCluster, node: str, tree: Path) -> None:
    """`node` started from now on runs the code in `tree` (`python -m` finds its package in
    the directory it runs in first)."""
    c.prefix[node] = ["sh", "-c", 'cd "$0" && exec "$@"', str(tree)]


def where_bodies(root: Path, node: str) -> dict[str, str]:
    """Where the node's file keeps each live item's body: "apart" (`bodies`), "blob" (the
    old `body_blob`), "row" (`body`)."""
    (path,) = [p for p in root.rglob("DB1.sqlite") if node in str(p)]
    with contextlib.closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as db:
        tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        columns = {r[1] for r in db.execute("PRAGMA table_info(items)")}
        apart = "0"
        if "bodies" in tables:
            apart = "EXISTS(SELECT 1 FROM bodies WHERE of_mailbox=items.mailbox"
            apart += " AND of_item_id=items.item_id)"
        blob = "typeof(body_blob)='blob'" if "body_blob" in columns else "0"
        rows = db.execute(f"SELECT item_id, {apart}, {blob} FROM items WHERE deleted=0")
        return {r[0]: "apart" if r[1] else "blob" if r[2] else "row" for r in rows}


async def changes(c: LocalCluster, node: str, n: int) -> None:
    """On `node`: a large message, a large text item and a small one put, flags changed, a
    large item moved and copied, one deleted (items named after `n`)."""
    raw = message(3 * MIB, n)
    status, answer = await c.call(
        "PUT", node, f"{PREFIX}/items/m{n}/message", data=raw,
        headers={"Content-Type": "message/rfc822"}, timeout=LONG,
    )  # fmt: skip
    assert status == 201, answer
    items = [
        {"item_id": f"t{n}", "subject": "text", "body": "caf\xe9 " * (MIB // 2)},
        {"item_id": f"s{n}", "subject": "small", "body": "small"},
    ]
    await c.ok("POST", node, f"{PREFIX}/items", json={"items": items}, timeout=LONG)
    flags = {"folder": "Inbox", "item_ids": [f"m{n}", f"s{n}"], "add": ["\\Seen"]}
    await c.ok("POST", node, f"{PREFIX}/items/flags", json=flags)
    move = {"folder": "Inbox", "to": "Old", "item_ids": [f"t{n}"]}
    await c.ok("POST", node, f"{PREFIX}/items/move", json=move)
    copy = {"folder": "Inbox", "to": "Old", "item_ids": [f"m{n}"]}
    await c.ok("POST", node, f"{PREFIX}/items/copy", json=copy)
    await c.ok("DELETE", node, f"{PREFIX}/items/s{n}")


async def alike(c: LocalCluster, active: str, passive: str) -> None:
    """The passive replayed the active (Healthy: its digest equal to the active's at each
    roll), and both serve the same mailbox."""
    await converged(c, "DB1", active, [passive])
    digests = [await c.ok("GET", n, f"{PREFIX}/digest") for n in (active, passive)]
    assert digests[0]["digest"] == digests[1]["digest"]
    lists = [await c.ok("GET", n, f"{PREFIX}/items", timeout=LONG) for n in (active, passive)]
    assert lists[0]["items"] == lists[1]["items"]


async def test_a_copy_on_either_code_replays_the_other_to_the_same_digest(
    tmp_path: Path, old_code: Path
) -> None:
    c = cluster(tmp_path)
    on_old_code(c, "mbx1", old_code)
    on_old_code(c, "mbx2", old_code)
    await c.start()
    try:
        await mounted(c)
        await c.ok("PUT", "mbx1", PREFIX, json={"display_name": "Big", "folders": ["Inbox", "Old"]})
        await changes(c, "mbx1", 1)
        await alike(c, "mbx1", "mbx2")
        assert where_bodies(tmp_path, "mbx2")["m1"] == "blob"  # the code before's file

        # The passive on the new code: its file's bodies moved on open; it replays the old.
        c.terminate("mbx2")
        c.prefix.pop("mbx2")
        c.start_node("mbx2")
        await c.wait_healthy("mbx2")
        await changes(c, "mbx1", 2)
        await alike(c, "mbx1", "mbx2")
        on_new = where_bodies(tmp_path, "mbx2")
        assert {k: on_new[k] for k in ("m1", "t1", "m2", "t2")} == dict.fromkeys(
            ("m1", "t1", "m2", "t2"), "apart"
        )

        # The active on the new code, the passive on the code before: it replays the new.
        switch = await asyncio.to_thread(c.node_cli, "db", "switchover", "DB1", "--to", "mbx2")
        assert switch.returncode == 0, switch.stderr
        await changes(c, "mbx2", 3)
        await alike(c, "mbx2", "mbx1")
        assert where_bodies(tmp_path, "mbx1")["m3"] == "blob"
    finally:
        await c.close()
