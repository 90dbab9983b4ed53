"""Batches end to end: real node processes, the real guarantee API, the real `mrs batch` and
`mrs serve` commands.  A bad CSV is refused whole (exit 2, each bad line named, nothing
queued); a worker killed (-9) with 20 moves running: the other worker finishes them after
their leases end, every mailbox whole, none moved twice; a worker paused (SIGSTOP) past its
leases writes nothing more once resumed; the target's active killed during a batch; the
guarantee service down for a while: the moves are held, none fails, all complete once it is
back."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys

import pytest

from mrs_client.move_store.embedded import EmbeddedMoveStore
from tests.cluster_harness import ROOT, THREE_NODES, LocalCluster, wait_until
from tests.mrs_client.e2e import active_of, live, shorten_guarantee_waits
from tests.mrs_client.test_move_e2e import FAST, databases, mrs
from tests.mrs_client.test_move_failover_e2e import databases as failover_databases

pytestmark = pytest.mark.slow

BOXES = [f"user{i:02d}" for i in range(20)]


@pytest.fixture
async def env(tmp_path):
    cluster = LocalCluster(
        tmp_path, nodes=THREE_NODES, databases=databases(), defaults={"failover_after": None}
    )
    shorten_guarantee_waits(cluster)
    await cluster.start()
    cluster.api = await cluster.start_guarantee_api()
    yield cluster
    cluster.api.terminate()
    cluster.api.wait(timeout=20)
    await cluster.close()


async def seed(cluster, names, items=30) -> dict[str, dict]:
    """Each mailbox in DB1 with `items` items; their live items by mailbox."""
    for name in names:
        base = f"/v1/databases/DB1/mailboxes/{name}"
        await cluster.ok("PUT", "mbx1", base, json={"display_name": name})
        await cluster.ok(
            "POST",
            "mbx1",
            f"{base}/items",
            json={
                "items": [
                    {"item_id": f"m{i}", "subject": f"s{i}", "body": f"{name} {i} " * 200}
                    for i in range(items)
                ]
            },
        )
    return {n: live(await cluster.items("mbx1", "DB1", n)) for n in names}


def serve(cluster, name: str, *extra: str) -> subprocess.Popen:
    log = open(cluster.root / f"{name}.log", "ab")  # noqa: SIM115 - the child owns it
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "mrs_client.cli",
            "serve",
            "--config",
            str(cluster.config_path),
            *FAST,
            "--poll",
            "200ms",
            "--max-moves",
            "20",
            "--max-per-target-database",
            "20",
            "--max-per-target-node",
            "20",
            "--max-per-source-database",
            "20",
            *extra,
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        env=cluster.env(),
        cwd=ROOT,
    )


async def queue_batch(cluster, names, *extra: str) -> None:
    """`mrs batch create wave1 --mailboxes NAMES --to DB2 EXTRA`, which must succeed."""
    made = await asyncio.to_thread(
        mrs, cluster, "batch", "create", "wave1", "--mailboxes", *names, "--to", "DB2", *extra
    )
    assert made.returncode == 0, made.stdout + made.stderr


def all_in(moves: EmbeddedMoveStore, state: str) -> bool:
    """Every move request of the store is in `state`."""
    return all(r.state == state for r in moves.call(moves._list, None, None))


def b_holds(moves: EmbeddedMoveStore, a_pid: int, count: int) -> bool:
    """`count` move leases are held, none by the worker of pid `a_pid`.  (Every one: a
    move whose lease ran out and that nobody took yet is free, and the paused worker,
    resumed, may claim it again with a new lease and finish it, which is safe but not what
    this test is about.)"""
    held = moves.call(moves._holders)
    return len(held) == count and all(f":{a_pid}:" not in h.worker for h in held.values())


def store(cluster) -> EmbeddedMoveStore:
    return EmbeddedMoveStore(cluster.root / "cluster.db")


async def assert_moved(cluster, sources: dict[str, dict]) -> None:
    """Every mailbox whole on the target, once, the source soft-deleted."""
    for name, items in sources.items():
        assert live(await cluster.items("mbx2", "DB2", name)) == items, name
        box = await cluster.ok("GET", "mbx1", f"/v1/databases/DB1/mailboxes/{name}")
        assert box["soft_deleted"], name


async def test_a_bad_csv_is_refused_whole_with_each_bad_line_named(env):
    cluster = env
    await seed(cluster, ["alice", "bob"], items=3)
    csv = cluster.root / "wave.csv"
    csv.write_text(
        "mailbox,target_database,priority\n"
        "alice,DB2,High\n"
        "nobody,DB2,\n"
        "bob,DB9,\n"
        "alice,DB2,\n"
        "bob,DB2,Soonest\n"
    )
    result = await asyncio.to_thread(mrs, cluster, "batch", "create", "wave1", "--csv", str(csv))
    assert result.returncode == 2, result.stdout + result.stderr
    said = result.stderr
    assert "line 6: unknown priority 'Soonest'" in said, said
    assert "Traceback" not in said
    csv.write_text("mailbox,target_database\nalice,DB2\nnobody,DB2\nbob,DB9\nalice,DB2\n")
    result = await asyncio.to_thread(mrs, cluster, "batch", "create", "wave1", "--csv", str(csv))
    assert result.returncode == 2, result.stdout + result.stderr
    for expected in (
        "line 3: unknown mailbox 'nobody'",
        "line 4: unknown database 'DB9'",
        "line 5: 'alice' is named twice (also line 2)",
    ):
        assert expected in result.stderr, result.stderr
    batches = await asyncio.to_thread(mrs, cluster, "batch", "list", "--json")
    moves = await asyncio.to_thread(mrs, cluster, "list", "--json")
    assert json.loads(batches.stdout) == [] and json.loads(moves.stdout) == []


async def test_a_worker_killed_with_twenty_moves_running_the_other_finishes_them(env):
    cluster = env
    sources = await seed(cluster, BOXES)
    csv = cluster.root / "wave.csv"
    csv.write_text("mailbox,target_database\n" + "".join(f"{n},DB2\n" for n in BOXES))
    made = await asyncio.to_thread(mrs, cluster, "batch", "create", "wave1", "--csv", str(csv))
    assert made.returncode == 0, made.stdout + made.stderr
    assert "20 move(s) queued" in made.stdout
    moves = store(cluster)
    a = serve(cluster, "worker-a")
    try:
        # A takes all twenty (its limits allow it) and is killed while they run.
        await wait_until(
            "worker A runs 20 moves",
            lambda: len(moves.call(moves._holders)) == 20,
            timeout=120,
        )
        os.kill(a.pid, signal.SIGKILL)
        a.wait()
        left = [r for r in moves.call(moves._list, None, None) if r.state != "Completed"]
        assert left, "the moves ended before the kill: nothing to take over"
        b = serve(cluster, "worker-b")
        try:
            await wait_until(
                "worker B completes the batch",
                lambda: all_in(moves, "Completed"),
                timeout=240,
            )
        finally:
            b.send_signal(signal.SIGTERM)
            assert b.wait(timeout=60) == 0
    finally:
        if a.poll() is None:
            a.kill()
    await assert_moved(cluster, sources)
    records = moves.call(moves._list, None, None)
    taken_over = {r.id for r in left}
    assert all(r.worker and r.worker.startswith("mrs-serve") for r in records)
    b_log = (cluster.root / "worker-b.log").read_text()
    assert all(f"move {i}: Completed" in b_log for i in taken_over), b_log[-3000:]
    report = await asyncio.to_thread(mrs, cluster, "batch", "report", "wave1", "--json")
    summary = json.loads(report.stdout)
    assert summary["by_state"]["Completed"] == 20 and summary["megabytes"] > 0
    await moves.aclose()


async def test_the_guarantee_service_down_holds_the_moves_and_none_fails(env):
    cluster = env
    names = BOXES[:4]
    sources = await seed(cluster, names)
    await queue_batch(cluster, names)
    cluster.api.terminate()
    cluster.api.wait(timeout=20)
    moves = store(cluster)
    w = serve(cluster, "worker")
    try:
        await wait_until(
            "the moves are held, stalled",
            lambda: all_in(moves, "Stalled"),
            timeout=120,
        )
        shown = await asyncio.to_thread(mrs, cluster, "batch", "show", "wave1")
        assert shown.stdout.count("StalledDueToTarget_MdbReplication") == 4, shown.stdout
        cluster.api = await cluster.start_guarantee_api()
        await wait_until(
            "the batch completes once the service is back",
            lambda: all_in(moves, "Completed"),
            timeout=240,
        )
    finally:
        w.send_signal(signal.SIGTERM)
        w.wait(timeout=60)
    records = moves.call(moves._list, None, None)
    assert all(r.retries == 0 and r.failure is None for r in records)
    assert all(r.time_stalled > 0 for r in records)
    await assert_moved(cluster, sources)
    await moves.aclose()


async def test_a_worker_paused_past_its_leases_stops_its_moves_and_another_finishes_them(env):
    """SIGSTOP of a worker with four moves running (a batch capped to keep them running):
    its leases end, another worker takes the moves over; resumed, the paused worker stops
    each move before any node call (its own count says the lease is over) and writes no
    record; the other completes them all, every mailbox whole."""
    cluster = env
    names = BOXES[:4]
    sources = await seed(cluster, names)
    await queue_batch(cluster, names, "--max-mb-per-s", "0.02")
    moves = store(cluster)
    a = serve(cluster, "worker-a")
    b = None
    try:
        await wait_until(
            "worker A copies the four mailboxes",
            lambda: (
                all(r.items_copied > 0 for r in moves.call(moves._list, None, None))
                and len(moves.call(moves._holders)) == 4
            ),
            timeout=120,
        )
        a.send_signal(signal.SIGSTOP)
        paused = {r.id: r.updated for r in moves.call(moves._list, None, None)}
        changed = await asyncio.to_thread(
            mrs, cluster, "batch", "set", "wave1", "--max-mb-per-s", "none"
        )
        assert changed.returncode == 0, changed.stderr
        b = serve(cluster, "worker-b")
        await wait_until(
            "worker B holds the moves",
            lambda: b_holds(moves, a.pid, len(names)),
            timeout=120,
        )
        a.send_signal(signal.SIGCONT)
        await wait_until(
            "worker B completes the batch",
            lambda: all_in(moves, "Completed"),
            timeout=240,
        )
        a.send_signal(signal.SIGTERM)
        assert a.wait(timeout=60) == 0
    finally:
        for p in (a, b):
            if p is not None and p.poll() is None:
                p.send_signal(signal.SIGCONT)
                p.kill()
    await assert_moved(cluster, sources)
    a_log = (cluster.root / "worker-a.log").read_text()
    assert "lease" in a_log and "Completed" not in a_log.splitlines()[-1], a_log[-3000:]
    records = moves.call(moves._list, None, None)
    assert all(r.updated > paused[r.id] for r in records)
    await moves.aclose()


@pytest.fixture
async def three_copies(tmp_path):
    """DB2 (the target) with three copies and automatic failover after 2 s."""
    cluster = LocalCluster(
        tmp_path,
        nodes=THREE_NODES,
        databases=failover_databases(),
        defaults={"failover_after": "2s", "auto_database_mount_dial": "BestAvailability"},
    )
    shorten_guarantee_waits(cluster)
    await cluster.start()
    cluster.api = await cluster.start_guarantee_api()
    for node in ("mbx3", "mbx1"):
        await cluster.wait_status(node, "DB2", "Healthy")
    yield cluster
    cluster.api.terminate()
    cluster.api.wait(timeout=20)
    await cluster.close()


async def test_the_target_active_killed_during_a_batch_every_move_completes_whole(three_copies):
    """kill -9 of the target database's active while a worker runs six moves into it: the
    copy that is activated lacks what the dead one's open log held; each move notices the new
    epoch, reconciles by content and completes, every mailbox whole on the new active."""
    cluster = three_copies
    names = BOXES[:6]
    sources = await seed(cluster, names)
    await queue_batch(cluster, names, "--max-mb-per-s", "0.05")
    moves = store(cluster)
    w = serve(cluster, "worker")
    try:
        await wait_until(
            "the six moves write into DB2",
            lambda: all(r.items_copied > 0 for r in moves.call(moves._list, None, None)),
            timeout=120,
        )
        cluster.kill("mbx2")  # DB2's active
        new_active = await active_of(cluster, "DB2")
        assert new_active != "mbx2"
        await asyncio.to_thread(mrs, cluster, "batch", "set", "wave1", "--max-mb-per-s", "none")
        await wait_until(
            "the batch completes after the failover",
            lambda: all_in(moves, "Completed"),
            timeout=300,
        )
    finally:
        w.send_signal(signal.SIGTERM)
        w.wait(timeout=60)
    for name, items in sources.items():
        assert live(await cluster.items(new_active, "DB2", name)) == items, name
    records = moves.call(moves._list, None, None)
    assert any(r.reconciles for r in records), "no move saw the failover"
    await moves.aclose()
