"""Items of many megabytes over real node processes, with the seeds' 1 MiB log generations:
written, replicated, read back whole; an active killed in the middle of one; a lossy
failover with half of one shipped."""

from __future__ import annotations

import asyncio
import hashlib
from pathlib import Path

import aiohttp
import pytest

from replication_node.log import logfile
from replication_node.log.logdir import list_closed_generations
from tests.cluster_harness import LocalCluster
from tests.replication_node.e2e import converged, three_nodes, write
from tests.replication_node.helpers import text_body

pytestmark = pytest.mark.slow

MiB = 1024 * 1024


@pytest.fixture
async def cluster(tmp_path):
    # The seeds' 1 MiB generations (the harness's default is 64 KiB, for speed elsewhere).
    c = three_nodes(tmp_path, defaults={"failover_after": None, "log_file_size": "1MiB"})
    await c.start()
    yield c
    await c.close()


def logs_of(cluster: LocalCluster, node: str, db: str) -> Path:
    (found,) = [p for p in cluster.root.glob(f"{node}/**/{db}/logs") if p.is_dir()]
    return found


def open_generation(logs: Path) -> int:
    """The open log's generation (0 in the instant of a roll, between its two renames)."""
    try:
        return logfile.read_header(logs / logfile.OPEN_LOG_NAME).generation
    except FileNotFoundError:
        return 0


def item_post(cluster: LocalCluster, node: str, item_id: str, text: str):
    return cluster.call(
        "POST",
        node,
        "/v1/databases/DB1/mailboxes/alice/items",
        json={"item_id": item_id, "subject": item_id, "body": text},
        timeout=aiohttp.ClientTimeout(total=600),
    )


async def body_hash(cluster: LocalCluster, node: str, item_id: str) -> str | None:
    items = await cluster.items(node, "DB1", "alice")
    item = items.get(item_id)
    return hashlib.sha256(item["body"].encode()).hexdigest() if item else None


async def test_items_of_2_6_and_12_mib_replicate_whole_beside_small_writes(cluster):
    await cluster.ok("PUT", "mbx1", "/v1/databases/DB1/mailboxes/alice")
    texts = {f"big{mb}": text_body(mb * MiB, seed=mb) for mb in (2, 6, 12)}
    before = (await cluster.status("mbx1"))["DB1"]["last_log_generated"]
    answers = await asyncio.gather(
        *(item_post(cluster, "mbx1", k, v) for k, v in texts.items()),
        write(cluster, "mbx1", "DB1", "alice", 0, 200),
    )
    for status, answer in answers[:3]:
        assert status == 201, answer
    generated = await converged(cluster, "DB1", "mbx1", ["mbx2", "mbx3"])
    assert generated - before >= 20, "20 MiB of bodies span at least 20 generations"
    want = {k: hashlib.sha256(v.encode()).hexdigest() for k, v in texts.items()}
    for node in ("mbx1", "mbx2", "mbx3"):
        for item_id, digest in want.items():
            assert await body_hash(cluster, node, item_id) == digest, (node, item_id)
        assert len(await cluster.items(node, "DB1", "alice")) == 203
    digests = {
        node: await cluster.ok("GET", node, "/v1/databases/DB1/mailboxes/alice/digest")
        for node in ("mbx1", "mbx2", "mbx3")
    }
    assert digests["mbx1"] == digests["mbx2"] == digests["mbx3"]


async def _kill_while_staging(
    cluster: LocalCluster, node: str, text: str, *, shipped_to: str | None = None
) -> asyncio.Task:
    """Start writing `text` as item `huge` on `node` and kill -9 the node in the middle of
    staging its body: once it has filled a few generations, or, with `shipped_to`, once
    that copy holds two of them.  Watched on disk every 2 ms: a body is staged at disk
    speed."""
    logs = logs_of(cluster, node, "DB1")
    start = open_generation(logs)
    copy_logs = logs_of(cluster, shipped_to, "DB1") if shipped_to else None

    def far_enough() -> bool:
        if copy_logs is None:
            return open_generation(logs) >= start + 4
        return max(list_closed_generations(copy_logs), default=0) >= start + 1

    post = asyncio.create_task(item_post(cluster, node, "huge", text))
    deadline = asyncio.get_running_loop().time() + 120
    while not far_enough():
        assert not post.done(), f"the write ended first: {post.result()}"
        assert asyncio.get_running_loop().time() < deadline, "the body was never staged"
        await asyncio.sleep(0.002)
    cluster.kill(node)
    return post


async def never_answered(post: asyncio.Task) -> None:
    """The write's connection went with the node: it was never acknowledged."""
    try:
        status, answer = await post
    except aiohttp.ClientError:
        return
    pytest.fail(f"the write was answered {status}: {answer}")


async def test_an_active_killed_in_the_middle_of_a_30_mib_commit_shows_nothing_of_it(cluster):
    await cluster.ok("PUT", "mbx1", "/v1/databases/DB1/mailboxes/alice")
    await write(cluster, "mbx1", "DB1", "alice", 0, 20)
    post = await _kill_while_staging(cluster, "mbx1", text_body(30 * MiB, seed=30))
    await never_answered(post)
    await cluster.start("mbx1")
    await cluster.wait_status("mbx1", "DB1", "Mounted")
    assert "never committed" in cluster.log("mbx1")
    await write(cluster, "mbx1", "DB1", "alice", 20, 20)
    await converged(cluster, "DB1", "mbx1", ["mbx2", "mbx3"])
    for node in ("mbx1", "mbx2", "mbx3"):
        items = await cluster.items(node, "DB1", "alice")
        assert "huge" not in items and len(items) == 40, node


async def test_a_lossy_failover_with_half_a_body_shipped_never_shows_it(cluster):
    await cluster.ok("PUT", "mbx1", "/v1/databases/DB1/mailboxes/alice")
    await write(cluster, "mbx1", "DB1", "alice", 0, 20)
    await converged(cluster, "DB1", "mbx1", ["mbx2", "mbx3"])
    shipped = (await cluster.status("mbx2"))["DB1"]["last_log_inspected"] + 2
    # mbx3 stays behind the fork: a copy ahead of the one activated holds the old active's
    # generations past it and needs a reseed (its epoch keeps it out of every guarantee).
    await cluster.ok("POST", "mbx3", "/v1/databases/DB1/copies/mbx3/suspend")
    # Small writes beside it, to another mailbox: the body then goes a slice at a time and
    # each commit settles the generations it filled, so the copy gets them while it is
    # staged (alone, its generations would be settled, and shipped, sixteen at a time).
    await cluster.ok("PUT", "mbx1", "/v1/databases/DB1/mailboxes/bob")

    async def beside() -> None:
        for i in range(100_000):
            await write(cluster, "mbx1", "DB1", "bob", i, 1)

    small = asyncio.create_task(beside())
    text = text_body(30 * MiB, seed=12)
    post = await _kill_while_staging(cluster, "mbx1", text, shipped_to="mbx2")
    await never_answered(post)
    small.cancel()
    await asyncio.gather(small, return_exceptions=True)
    await cluster.wait_status("mbx2", "DB1", "DisconnectedAndHealthy")
    assert (await cluster.status("mbx2"))["DB1"]["last_log_inspected"] >= shipped
    await cluster.ok(
        "POST",
        "mbx2",
        "/v1/databases/DB1/activate",
        json={"node": "mbx2", "mount_dial_override": "BestAvailability"},
    )
    await cluster.wait_status("mbx2", "DB1", "Mounted")
    items = await cluster.items("mbx2", "DB1", "alice")
    assert "huge" not in items and len(items) == 20
    assert "never committed" in cluster.log("mbx2")
    await write(cluster, "mbx2", "DB1", "alice", 20, 10)
    await cluster.ok("POST", "mbx3", "/v1/databases/DB1/copies/mbx3/resume")
    await converged(cluster, "DB1", "mbx2", ["mbx3"])
    assert len(await cluster.items("mbx3", "DB1", "alice")) == 30


def memory(cluster: LocalCluster, node: str) -> tuple[int, int]:
    """(resident, peak resident) bytes of the node's process."""
    fields = dict(
        line.split(":", 1)
        for line in Path(f"/proc/{cluster.procs[node].pid}/status").read_text().splitlines()
    )
    return int(fields["VmRSS"].split()[0]) * 1024, int(fields["VmHWM"].split()[0]) * 1024


async def test_a_36_mib_item_raises_no_nodes_peak_memory_by_4_times_its_size(cluster):
    """Written on mbx1, shipped to and replayed on mbx2 and mbx3: the peak resident memory
    of each node rises by less than 4x the item over what it held before."""
    await cluster.ok("PUT", "mbx1", "/v1/databases/DB1/mailboxes/alice")
    await write(cluster, "mbx1", "DB1", "alice", 0, 50)
    await converged(cluster, "DB1", "mbx1", ["mbx2", "mbx3"])
    nodes = ("mbx1", "mbx2", "mbx3")
    before = {node: memory(cluster, node)[0] for node in nodes}
    size = 36 * MiB
    # at the limit: the default max_item_size, 36 MiB of subject ("huge") and body
    status, answer = await item_post(cluster, "mbx1", "huge", text_body(size - 4, seed=36))
    assert status == 201, answer
    await converged(cluster, "DB1", "mbx1", ["mbx2", "mbx3"])
    raised = {node: memory(cluster, node)[1] - before[node] for node in nodes}
    assert all(r < 4 * size for r in raised.values()), {n: r / MiB for n, r in raised.items()}
    # moved: read back as a mover reads a mailbox, a page of items at a time
    for node in ("mbx1", "mbx2"):
        before_read = memory(cluster, node)[0]
        page = await cluster.ok(
            "GET", node, "/v1/databases/DB1/mailboxes/alice/items?since_change=0&limit=100"
        )
        assert any(i["item_id"] == "huge" for i in page["items"])
        raised_by_read = memory(cluster, node)[1] - before_read
        assert raised_by_read < 4 * size, (node, raised_by_read / MiB)


async def test_a_passive_killed_in_the_middle_of_replaying_a_spanning_item_replays_it_whole(
    cluster,
):
    await cluster.ok("PUT", "mbx1", "/v1/databases/DB1/mailboxes/alice")
    start = await converged(cluster, "DB1", "mbx1", ["mbx2", "mbx3"])
    await cluster.ok("POST", "mbx2", "/v1/databases/DB1/copies/mbx2/suspend")
    text = text_body(30 * MiB, seed=31)
    status, answer = await item_post(cluster, "mbx1", "huge", text)
    assert status == 201, answer
    end = answer["lsn"]["generation"]
    assert end - start >= 30
    await cluster.ok("POST", "mbx2", "/v1/databases/DB1/copies/mbx2/resume")
    seen: list[int] = []

    async def mid_body() -> bool:
        seen.append((await cluster.status("mbx2"))["DB1"]["last_log_replayed"])
        return seen[-1] >= start + 5

    await cluster.wait_for("mbx2 replaying the body's parts", mid_body)
    cluster.kill("mbx2")
    assert seen[-1] < end, "killed before the commit was replayed"
    await cluster.start("mbx2")
    await converged(cluster, "DB1", "mbx1", ["mbx2", "mbx3"])
    want = hashlib.sha256(text.encode()).hexdigest()
    assert await body_hash(cluster, "mbx2", "huge") == want
