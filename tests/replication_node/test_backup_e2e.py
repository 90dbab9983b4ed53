"""Backups over real node processes, as an operator runs them: a full backup from a passive
copy under write load and an incremental after it, restored into a database in Clean
Shutdown holding every write acknowledged before each backup's end; the active's stamp shown
by its status at once and by the passive's once replayed; truncation that waits for the
backup when circular logging is off; and the refusals, each changing nothing."""

from __future__ import annotations

import asyncio
import contextlib
import json
import subprocess
import sys
import time

import pytest

from replication_node.storage.database import Database
from tests.cluster_harness import LocalCluster
from tests.replication_node.e2e import converged

pytestmark = pytest.mark.slow

DB = "/v1/databases/DB1"
HEADER_CLI = [sys.executable, "-m", "replication_node.cli.main", "db", "header"]


def cluster(tmp_path, **defaults) -> LocalCluster:
    return LocalCluster(
        tmp_path,
        nodes=[("mbx1", "redmond"), ("mbx2", "redmond")],
        databases=[
            {
                "name": "DB1",
                "copies": [
                    {"node": "mbx1", "activation_preference": 1},
                    {"node": "mbx2", "activation_preference": 2},
                ],
            }
        ],
        defaults={"failover_after": None, **defaults},
    )


class Writer:
    """Writes items to mbx1 one request at a time until stopped; remembers each
    acknowledged item with when its answer came and the generation of its LSN."""

    def __init__(self, c: LocalCluster) -> None:
        self.c = c
        self.acked: list[tuple[str, float, int]] = []
        self._stop = asyncio.Event()
        self.task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self.task = asyncio.create_task(self._run())

    async def _run(self) -> None:
        n = 0
        while not self._stop.is_set():
            ids = [f"w{n + k}" for k in range(5)]
            n += 5
            body = await self.c.ok(
                "POST",
                "mbx1",
                f"{DB}/mailboxes/alice/items",
                json={"items": [{"item_id": i, "body": "x" * 800} for i in ids]},
            )
            now = time.monotonic()
            self.acked += [(i, now, body["lsn"]["generation"]) for i in ids]

    async def stop(self) -> None:
        self._stop.set()
        assert self.task is not None
        await self.task

    def acked_before(self, moment: float) -> set[str]:
        return {i for i, at, _ in self.acked if at < moment}


async def backup(c: LocalCluster, *args: str):
    return await asyncio.to_thread(c.node_cli, "db", "backup", "DB1", *args)


async def renew_until_cancelled(c: LocalCluster, lease: dict) -> None:
    """Renew the backup `lease` on mbx1 as its backing-up node does (every third of its
    TTL, replication_node/backup/backup.py), until cancelled."""
    while True:
        await asyncio.sleep(lease["lease_seconds"] / 3)
        await c.ok("POST", "mbx1", f"{DB}/backups/{lease['backup_id']}/renew")


def restore(c: LocalCluster, *args: str):
    return c.node_cli("db", "restore", *args)


def restored_items(path) -> set[str]:
    db = Database.open(path)
    try:
        return {r.item_id for r in db.items("alice") if not r.deleted}
    finally:
        db.close()


async def test_backup_from_a_passive_under_load_then_incremental_then_restore(tmp_path):
    c = cluster(tmp_path, circular_logging=False)
    await c.start()
    try:
        await c.ok("PUT", "mbx1", f"{DB}/mailboxes/alice")
        await converged(c, "DB1", "mbx1", ["mbx2"])
        writer = Writer(c)
        writer.start()
        await c.wait_for("200 writes acknowledged", lambda: len(writer.acked) >= 200)

        began = time.monotonic()
        full = await backup(c, "--from", "mbx2", "--to", str(tmp_path / "full"), "--json")
        assert full.returncode == 0, full.stderr
        manifest = json.loads(full.stdout)
        assert manifest["kind"] == "full" and manifest["source_role"] == "passive"
        assert manifest["database_file"]["name"] == "DB1.sqlite"
        assert (tmp_path / "full" / "manifest.json").exists()
        # The active shows the backup at once (its stamp still in the LLR overlay).
        active = (await c.status("mbx1"))["DB1"]
        assert active["last_full_backup_generation"] == manifest["last_generation"]
        assert active["last_full_backup_time"] is not None
        before_full = writer.acked_before(began)
        in_full = {i for i, _, gen in writer.acked if gen <= manifest["last_generation"]}

        await c.wait_for(
            "200 more writes acknowledged", lambda: len(writer.acked) >= len(before_full) + 200
        )
        began_incremental = time.monotonic()
        inc = await backup(c, "--from", "mbx2", "--to", str(tmp_path / "inc1"), "--incremental")
        assert inc.returncode == 0, inc.stderr
        assert "incremental backup from mbx2 (passive)" in inc.stdout
        await writer.stop()
        inc_manifest = json.loads((tmp_path / "inc1" / "manifest.json").read_text())
        assert inc_manifest["after_generation"] == manifest["last_generation"]
        assert inc_manifest["database_file"] is None

        # The passive's header gets the stamps by replay, never by a write of its own.
        await converged(c, "DB1", "mbx1", ["mbx2"])
        passive = (await c.status("mbx2"))["DB1"]
        assert passive["last_full_backup_generation"] == manifest["last_generation"]
        assert passive["last_incremental_backup_generation"] == inc_manifest["last_generation"]

        # Restore the full backup alone, then the full and the incremental.
        only_full = restore(c, str(tmp_path / "full"), "--to", str(tmp_path / "r1"))
        assert only_full.returncode == 0, only_full.stderr
        items = restored_items(tmp_path / "r1" / "DB1.sqlite")
        assert before_full <= items and in_full <= items
        both = restore(
            c, str(tmp_path / "full"), str(tmp_path / "inc1"), "--to", str(tmp_path / "r2")
        )
        assert both.returncode == 0, both.stderr
        assert "Clean Shutdown" in both.stdout
        items = restored_items(tmp_path / "r2" / "DB1.sqlite")
        assert writer.acked_before(began_incremental) <= items
        header = subprocess.run(
            [*HEADER_CLI, "--json", str(tmp_path / "r2" / "DB1.sqlite")],
            capture_output=True,
            text=True,
            check=True,
        )
        shown = json.loads(header.stdout)
        assert shown["state"] == "Clean Shutdown"
        assert shown["waypoint"] == inc_manifest["last_generation"]
    finally:
        await c.close()


def log_generations(c: LocalCluster, node: str) -> list[int]:
    logs = c.root / node / "DB1" / "logs"
    return sorted(int(p.name[1:9], 16) for p in logs.glob("E????????.log"))


async def test_truncation_waits_for_the_backup_without_circular_logging(tmp_path):
    c = cluster(tmp_path, circular_logging=False)
    await c.start()
    try:
        await c.ok("PUT", "mbx1", f"{DB}/mailboxes/alice")
        await converged(c, "DB1", "mbx1", ["mbx2"])  # Healthy: else refused as Seeding first
        refused = await backup(c, "--from", "mbx2", "--to", str(tmp_path / "i"), "--incremental")
        assert refused.returncode == 1
        assert "no full backup" in refused.stderr
        assert not (tmp_path / "i").exists()
        for n in range(6):
            await c.ok(
                "POST", "mbx1", f"{DB}/mailboxes/alice/items", json={"items": [{"body": str(n)}]}
            )
            await c.ok("POST", "mbx1", f"{DB}/roll-log")
        generated = await converged(c, "DB1", "mbx1", ["mbx2"])
        # Replayed everywhere, yet every generation is kept: none is backed up.
        assert log_generations(c, "mbx1")[0] == 1
        assert log_generations(c, "mbx2")[0] == 1

        done = await backup(c, "--from", "mbx2", "--to", str(tmp_path / "full"), "--json")
        assert done.returncode == 0, done.stderr
        last = json.loads(done.stdout)["last_generation"]
        assert last > generated

        async def write_and_roll() -> None:
            await c.ok(
                "POST", "mbx1", f"{DB}/mailboxes/alice/items", json={"items": [{"body": "x"}]}
            )
            await c.ok("POST", "mbx1", f"{DB}/roll-log")

        for _ in range(3):  # the checkpoint moves past the backup as the active writes on
            await write_and_roll()
        await converged(c, "DB1", "mbx1", ["mbx2"])
        # The truncator runs every few seconds from the copies' progress as last heard, so a
        # pass may delete part of the way first (CI saw 1-6 go, then 7-9): wait for the whole.
        await c.wait_for(
            "the active's truncation through the backup",
            lambda: log_generations(c, "mbx1")[0] > last,
            timeout=60,
        )
        assert log_generations(c, "mbx1")[0] == last + 1  # through the backup, not beyond
        # The copy truncates what the active did, after its next replay.
        await write_and_roll()
        await converged(c, "DB1", "mbx1", ["mbx2"])
        await c.wait_for(
            "the copy's truncation", lambda: log_generations(c, "mbx2")[0] > 1, timeout=30
        )
        assert log_generations(c, "mbx2")[0] <= last + 1
    finally:
        await c.close()


async def test_refusals_change_nothing_and_a_dead_backup_lease_ends(tmp_path):
    c = cluster(tmp_path, lease_ttl="3s")  # circular logging on: the default
    await c.start()
    try:
        await c.ok("PUT", "mbx1", f"{DB}/mailboxes/alice")
        await converged(c, "DB1", "mbx1", ["mbx2"])

        inc = await backup(c, "--from", "mbx2", "--to", str(tmp_path / "i"), "--incremental")
        assert inc.returncode == 2 and "circular_logging" in inc.stderr, inc.stderr

        busy = tmp_path / "busy"
        busy.mkdir()
        (busy / "keep.txt").write_text("mine")
        not_empty = await backup(c, "--from", "mbx2", "--to", str(busy))
        assert not_empty.returncode == 2 and "not empty" in not_empty.stderr
        assert [p.name for p in busy.iterdir()] == ["keep.txt"]

        # A backup running (begun by hand on the active, and renewed as a node taking it
        # renews it: a CLI's start alone can outlast the 3 s lease under load): a second
        # refused.
        lease = await c.ok("POST", "mbx1", f"{DB}/backups", json={"node": "mbx2", "kind": "full"})
        renewing = asyncio.create_task(renew_until_cancelled(c, lease))
        try:
            second = await backup(c, "--from", "mbx1", "--to", str(tmp_path / "second"))
            assert second.returncode == 1 and "running" in second.stderr, second.stderr
            assert not (tmp_path / "second").exists()
            assert "mbx2" in (await c.status("mbx1"))["DB1"]["backup_in_progress"]
        finally:
            renewing.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await renewing  # a renewal refused (the lease lost) fails the test here
        # Its side stops renewing (a dead backup): the lease ends by itself, and its late
        # end is refused, so it stamps nothing.

        async def lease_over() -> bool:
            return (await c.status("mbx1"))["DB1"]["backup_in_progress"] is None

        await c.wait_for("the dead backup's lease to end", lease_over, timeout=30)
        status, body = await c.call(
            "POST",
            "mbx1",
            f"{DB}/backups/{lease['backup_id']}/end",
            json={"generation": 1, "ended_at": "2026-11-23T00:00:00+00:00"},
        )
        assert status == 404, body
        assert (await c.status("mbx1"))["DB1"]["last_full_backup_generation"] == 0

        await asyncio.to_thread(c.node_cli, "db", "suspend", "DB1", "--node", "mbx2")
        suspended = await backup(c, "--from", "mbx2", "--to", str(tmp_path / "s"))
        assert suspended.returncode == 1 and "Suspended" in suspended.stderr, suspended.stderr
        assert not (tmp_path / "s").exists()
        await asyncio.to_thread(c.node_cli, "db", "resume", "DB1", "--node", "mbx2")
        await converged(c, "DB1", "mbx1", ["mbx2"])

        await asyncio.to_thread(c.node_cli, "db", "dismount", "DB1")
        dismounted = await backup(c, "--from", "mbx2", "--to", str(tmp_path / "d"))
        assert dismounted.returncode == 1, dismounted.stderr
        assert not (tmp_path / "d").exists()
        # (refused by the copy, DisconnectedAndHealthy once its active is gone, or by the
        # active, which begins no backup while it is not mounted)
        status, body = await c.call(
            "POST", "mbx1", f"{DB}/backups", json={"node": "mbx2", "kind": "full"}
        )
        assert status == 503 and "dismounted" in body["error"], body
        await asyncio.to_thread(c.node_cli, "db", "mount", "DB1")

        # From the active itself, Mounted: taken.
        ok = await backup(c, "--from", "mbx1", "--to", str(tmp_path / "a"), "--json")
        assert ok.returncode == 0, ok.stderr
        assert json.loads(ok.stdout)["source_role"] == "active"
        restored = restore(c, str(tmp_path / "a"), "--to", str(tmp_path / "ra"))
        assert restored.returncode == 0, restored.stderr
    finally:
        await c.close()


async def test_a_backup_killed_midway_leaves_no_manifest_and_no_stamp(tmp_path):
    c = cluster(tmp_path, lease_ttl="3s", circular_logging=False, log_file_size="1MiB")
    await c.start()
    try:
        await c.ok("PUT", "mbx1", f"{DB}/mailboxes/alice")
        for first in range(0, 15_000, 50):  # a file of ~60 MB: its snapshot takes a while
            await c.ok(
                "POST",
                "mbx1",
                f"{DB}/mailboxes/alice/items",
                json={
                    "items": [{"item_id": f"i{first + k}", "body": "b" * 4000} for k in range(50)]
                },
            )
        await converged(c, "DB1", "mbx1", ["mbx2"])
        dest = tmp_path / "killed"
        running = asyncio.create_task(backup(c, "--from", "mbx2", "--to", str(dest)))
        await c.wait_for("the snapshot under way", (dest / "DB1.sqlite").exists, timeout=60)
        c.kill("mbx2")  # kill -9 of the node taking the backup
        killed = await running
        assert killed.returncode == 1, killed.stdout
        assert not (dest / "manifest.json").exists()
        refused = restore(c, str(dest), "--to", str(tmp_path / "r"))
        assert refused.returncode == 2 and "incomplete backup" in refused.stderr

        async def lease_over() -> bool:
            return (await c.status("mbx1"))["DB1"]["backup_in_progress"] is None

        await c.wait_for("the killed backup's lease to end", lease_over, timeout=30)
        assert (await c.status("mbx1"))["DB1"]["last_full_backup_generation"] == 0

        c.start_node("mbx2")
        await c.wait_healthy("mbx2")
        await converged(c, "DB1", "mbx1", ["mbx2"])
        again = await backup(c, "--from", "mbx2", "--to", str(tmp_path / "again"))
        assert again.returncode == 0, again.stderr
    finally:
        await c.close()
