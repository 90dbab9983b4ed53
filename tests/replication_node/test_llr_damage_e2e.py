"""A generation of the active's LLR window damaged on its own disk after its commits were
acknowledged (a bit flipped in a generation holding parts of a 30 MiB staged body) is
mended (`active/log_mend.py`, issue 52): taken whole from a copy, checked as a passive's
inspection checks one and against the active's own records, written in place; the LLR flush
goes on past it, the body reads byte for byte, the status note clears, and no acknowledged
write is lost, with writers running meanwhile.  Where no copy gives it sound: the active
says so, refuses the body's reads (never serves damaged bytes), and switches over to a
healthy copy if one can take over, or mends it once a copy comes back; the old active, its
damaged generation still on its disk, then stops as a passive (FailedAndSuspended, naming
it) until a reseed from the new active.  Over real node processes."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import aiohttp
import pytest

from replication_node.log import logfile
from tests.cluster_harness import LocalCluster
from tests.replication_node.e2e import converged, two_nodes
from tests.replication_node.test_memory_e2e import LONG, MIB, PREFIX, message, metric, mounted
from tests.replication_node.test_overlay_read_e2e import part_generations, put_message, rows_in_file

pytestmark = pytest.mark.slow

MESSAGE = 30 * MIB
DEPTH = 40  # generations; the 30 MiB body spans about 31 of 1 MiB


def cluster(root: Path) -> LocalCluster:
    """DB1 on mbx1 and mbx2, 1 MiB logs and an LLR window of `DEPTH` of them: the large body
    stays in the active's overlay, held in its log, until `DEPTH` more generations close."""
    return two_nodes(root, log_file_size="1MiB", llr_depth=DEPTH, max_item_size="36MiB")


def logs_of(root: Path, node: str) -> Path:
    """DB1's log directory on `node`."""
    return root / node / "DB1" / "logs"


def flip(path: Path) -> bytes:
    """Flip a byte in the middle of `path` in place (a bit flip on the disk); its bytes before."""
    data = path.read_bytes()
    damaged = bytearray(data)
    damaged[len(damaged) // 2] ^= 0xFF
    with open(path, "r+b") as f:
        f.write(damaged)
    return data


@contextlib.asynccontextmanager
async def writers(c: LocalCluster, node: str, acked: list[str], n: int = 3) -> AsyncIterator[None]:
    """`n` writers putting small items on `node` as fast as it answers while the block runs;
    the ids it acknowledged in `acked` (a refusal, 409 or 503, is not acknowledged)."""
    stop = asyncio.Event()

    async def one(k: int) -> None:
        i = 0
        while not stop.is_set():
            item, i = f"w{k}-{i}", i + 1
            doc = {"item_id": item, "subject": item, "body": f"{item}:" + "x" * 3000}
            try:
                status, answer = await c.call("POST", node, f"{PREFIX}/items", json=doc)
            except aiohttp.ClientError:
                continue
            if status < 300:
                acked.append(item)
            else:
                assert status in (404, 409, 503), (status, answer)

    tasks = [asyncio.create_task(one(k)) for k in range(n)]
    try:
        yield
    finally:
        stop.set()
        await asyncio.gather(*tasks)


async def roll(c: LocalCluster, times: int) -> None:
    """Close the active's log `times` times: the LLR window moves past the large body."""
    for _ in range(times):
        await c.ok("POST", "mbx1", "/v1/databases/DB1/roll-log")


async def item_ids(c: LocalCluster, node: str) -> set[str]:
    listing = await c.ok("GET", node, f"{PREFIX}/items?bodies=false", timeout=LONG)
    return {item["item_id"] for item in listing["items"]}


async def damaged_in_the_window(c: LocalCluster, root: Path) -> tuple[bytes, Path, bytes]:
    """A 30 MiB message written and replicated, then a byte flipped in a generation of the
    active's holding a part of it, within its LLR window: the message, the file, its bytes."""
    raw = message(MESSAGE, 7)
    await mounted(c)
    await c.ok("PUT", "mbx1", PREFIX, json={"display_name": "Big"})
    await put_message(c, "big", raw)
    await converged(c, "DB1", "mbx1", ["mbx2"])
    assert "big" not in rows_in_file(root, "mbx1"), "held in the LLR overlay"
    generations = part_generations(logs_of(root, "mbx1"))
    assert len(generations) >= 3, generations
    damaged = generations[len(generations) // 2]
    return raw, damaged, flip(damaged)


def flushed(c: LocalCluster, root: Path) -> Callable[[], Awaitable[bool]]:
    """Whether mbx1 has flushed the body into its file and its status has no note left."""

    async def check() -> bool:
        copy = (await c.status("mbx1"))["DB1"]
        return "big" in rows_in_file(root, "mbx1") and copy["note"] is None

    return check


async def test_a_damaged_generation_of_the_llr_window_is_taken_whole_from_a_copy(
    tmp_path: Path,
) -> None:
    c = cluster(tmp_path)
    await c.start()
    try:
        raw, damaged, whole = await damaged_in_the_window(c, tmp_path)
        gen = logfile.read_header(damaged).generation
        acked: list[str] = []
        async with writers(c, "mbx1", acked):
            # The window moves past the body: the LLR flush reads it back from the log and
            # meets the damage (before the mend: failed at every roll, the window stuck).
            await roll(c, DEPTH + 5)
            await c.wait_for(
                "the body flushed into mbx1's file, no note", flushed(c, tmp_path), timeout=120
            )
        assert damaged.read_bytes() == whole  # the copy's bytes are the active's, whole
        got = await c.ok("GET", "mbx1", f"{PREFIX}/items/big/message", timeout=LONG)
        assert hashlib.sha256(got).digest() == hashlib.sha256(raw).digest()
        assert got == raw
        del got
        said = c.log("mbx1")
        assert f"generation {gen} of the log is damaged" in said
        assert f"generation {gen} of the active's log was damaged on its disk" in said
        assert "Traceback" not in said, said[-3000:]
        copy = (await c.status("mbx1"))["DB1"]
        assert copy["status"] == "Mounted", copy
        assert await metric(c, "replication_llr_generations_mended_total") == 1

        # No acknowledged write lost, on the active and on its copy.
        assert acked, "the writers wrote"
        await converged(c, "DB1", "mbx1", ["mbx2"])
        for node in ("mbx1", "mbx2"):
            missing = {*acked, "big"} - await item_ids(c, node)
            assert not missing, (node, sorted(missing)[:10])
    finally:
        await c.close()


async def test_with_no_copy_to_give_it_the_active_says_so_and_mends_once_one_comes_back(
    tmp_path: Path,
) -> None:
    c = cluster(tmp_path)
    await c.start()
    try:
        raw, damaged, whole = await damaged_in_the_window(c, tmp_path)
        gen = logfile.read_header(damaged).generation
        c.terminate("mbx2")  # the only copy gone: none can give it, none can take over
        acked: list[str] = []
        async with writers(c, "mbx1", acked, n=2):
            await roll(c, DEPTH + 5)

            async def said() -> bool:
                note = (await c.status("mbx1"))["DB1"]["note"] or ""
                return "no copy could take over either" in note

            await c.wait_for("mbx1 says no copy gave it nor took over", said, timeout=120)
        copy = (await c.status("mbx1"))["DB1"]
        assert copy["status"] == "Mounted", copy
        assert f"generation {gen} of the log is damaged" in copy["note"], copy
        assert "mbx2" in copy["note"], copy  # what each copy answered
        # Never the damaged bytes: refused, naming the generation.
        status, answer = await c.call("GET", "mbx1", f"{PREFIX}/items/big/message")
        assert status == 503, answer
        assert f"generation {gen} of the log is damaged" in answer["error"]
        assert "big" not in rows_in_file(tmp_path, "mbx1")
        # Nor dismounted by an operator: that would leave its LLR unwritten, said and refused.
        status, answer = await c.call("POST", "mbx1", "/v1/databases/DB1/dismount")
        assert status == 409 and "cannot be dismounted cleanly" in answer["error"], answer
        assert (await c.status("mbx1"))["DB1"]["status"] == "Mounted"

        # The copy back: asked again, it gives the generation; the flush goes on.
        c.start_node("mbx2")
        await c.wait_healthy("mbx2")
        await c.wait_for(
            "mbx1 mended from mbx2, the body flushed", flushed(c, tmp_path), timeout=120
        )
        assert damaged.read_bytes() == whole
        assert await c.ok("GET", "mbx1", f"{PREFIX}/items/big/message", timeout=LONG) == raw
        assert not {*acked, "big"} - await item_ids(c, "mbx1")
    finally:
        await c.close()


async def test_damaged_on_every_copy_the_active_switches_over_to_a_healthy_one(
    tmp_path: Path,
) -> None:
    c = cluster(tmp_path)
    await c.start()
    try:
        raw, damaged, _ = await damaged_in_the_window(c, tmp_path)
        gen = logfile.read_header(damaged).generation
        # The copy's own file of that generation damaged too (if it still keeps it): no
        # copy gives it sound.  The copy replayed it already: its database has the body.
        theirs = logs_of(tmp_path, "mbx2") / damaged.name
        if theirs.exists():
            flip(theirs)
        acked: list[str] = []
        async with writers(c, "mbx1", acked, n=2):
            await roll(c, DEPTH + 5)

            async def switched() -> bool:
                return (await c.status("mbx2"))["DB1"]["status"] == "Mounted"

            await c.wait_for("DB1 switched over to mbx2", switched, timeout=180)
        said = c.log("mbx1")
        assert f"generation {gen} of the log is damaged" in said
        assert "switching over to a healthy copy" in said
        assert (await c.status("mbx1")).get("DB1", {}).get("status") != "Mounted"
        got = await c.ok("GET", "mbx2", f"{PREFIX}/items/big/message", timeout=LONG)
        assert got == raw
        del got
        missing = {*acked, "big"} - await item_ids(c, "mbx2")
        assert not missing, sorted(missing)[:10]

        # The old active, its damaged generation still on its disk and no copy holding that
        # generation sound, cannot replay the body staged there: as a passive it stops,
        # FailedAndSuspended, naming the damaged generation (never replaying past it), and
        # the operator's reseed from the new active makes it Healthy with every item.
        async def suspended() -> bool:
            copy = (await c.status("mbx1"))["DB1"]
            error = copy["error"] or ""
            return copy["status"] == "FailedAndSuspended" and f"generation {gen}:" in error

        await c.wait_for(f"mbx1 FailedAndSuspended naming generation {gen}", suspended)
        after = [f"after-{i}" for i in range(5)]
        for item in after:
            doc = {"item_id": item, "subject": item, "body": item}
            await c.ok("POST", "mbx2", f"{PREFIX}/items", json=doc)
        await c.ok("POST", "mbx1", "/v1/databases/DB1/copies/mbx1/reseed", json={}, timeout=LONG)
        await converged(c, "DB1", "mbx2", ["mbx1"])
        assert {*acked, "big", *after} <= rows_in_file(tmp_path, "mbx1")
    finally:
        await c.close()
