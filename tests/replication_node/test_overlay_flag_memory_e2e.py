"""A flag change, a move, a copy or a delete of a large item the active's database file
holds neither reads its body nor holds it in the LLR overlay (`storage/overlay.py`,
`in_file`, issue 52): the overlay holds the changed row without its body until the flush,
and the reads that send the body (`GET …/message`, the messages batch read, the items
listing) take it from the file a part at a time.  Before, the overlay read the item's row
with its body (twice the item for the moment) and held the changed row with it until the
flush.  The same bytes, the same digest, and the LLR flush writes the file the passive
replays.  Over real node processes; the peak read from `/proc/PID/status` (`VmHWM`), reset
before what it measures (`/proc/PID/clear_refs`)."""

from __future__ import annotations

import contextlib
import hashlib
import json
import sqlite3
from pathlib import Path

import pytest

from dag_common.memory import resident_memory
from tests.cluster_harness import LocalCluster, wait_until
from tests.replication_node.e2e import converged, two_nodes
from tests.replication_node.test_memory_e2e import LONG, MIB, PREFIX, message, mounted
from tests.replication_node.test_overlay_read_e2e import put_message, rows_in_file
from tests.replication_node.test_row_read_memory_e2e import in_blob, reset_peak

pytestmark = pytest.mark.slow

MESSAGE = 30 * MIB
LLR_DEPTH = 3
ROUNDS = 3  # each a flag set, a move, a flag cleared, a move back


def items_in_file(root: Path, node: str) -> dict[str, tuple[object, ...]]:
    """DB1's rows of mailbox big in `node`'s database file, by item id: what the LLR flush
    (or the replay) wrote of each."""
    (database,) = [p for p in root.rglob("DB1.sqlite") if node in str(p)]
    with contextlib.closing(sqlite3.connect(f"file:{database}?mode=ro", uri=True)) as db:
        rows = db.execute(
            "SELECT item_id, folder, subject, size, change_number, deleted, commit_time,"
            " body_hash, format, uid, modseq, flags, received FROM items WHERE mailbox='big'"
        ).fetchall()
    return {r[0]: r[1:] for r in rows}


async def flushed(c: LocalCluster, root: Path, items: set[str]) -> None:
    """Roll the active's log (a small write in each generation) until its LLR flush has
    written what the overlay holds of `items` into its database file."""
    for n in range(LLR_DEPTH + 1):
        await c.ok("POST", "mbx1", f"{PREFIX}/items", json={"item_id": f"pad{n}", "body": "x"})
        await converged(c, "DB1", "mbx1", ["mbx2"])

    async def written() -> bool:
        return items <= rows_in_file(root, "mbx1")

    await c.wait_for(f"{items} in the active's file", written)


async def quiet(pid: int, base: int) -> int:
    """Wait until the node has given back what its last burst left resident (its idle
    release, `storage/idle_memory.py`: freed memory still resident would take a whole read
    of the body unseen), to within half an item of `base`; then reset its peak: its rest."""

    def given_back() -> bool:
        return resident_memory(pid).resident < base + MESSAGE // 2

    await wait_until("the node's memory given back", given_back, timeout=60, every=0.2)
    return reset_peak(pid)


async def test_flag_changes_moves_and_copies_of_a_large_item_leave_its_body_in_the_file(
    tmp_path: Path,
) -> None:
    c = two_nodes(tmp_path, log_file_size="1MiB", llr_depth=LLR_DEPTH, max_item_size="36MiB")
    await c.start()
    try:
        await mounted(c)
        await c.ok("PUT", "mbx1", PREFIX, json={"display_name": "Big", "folders": ["Inbox", "Old"]})
        pid = c.procs["mbx1"].pid
        base = resident_memory(pid).resident
        raw = message(MESSAGE, 53)
        await put_message(c, "big", raw)
        await flushed(c, tmp_path, {"big"})
        assert in_blob(tmp_path, "mbx1") == {"big": "blob"}, "the active's file holds it"

        rest = await quiet(pid, base)
        here, there = "Inbox", "Old"
        for _ in range(ROUNDS):
            for change in ("add", "remove"):
                flags = {"folder": here, "item_ids": ["big"], change: ["\\Flagged"]}
                await c.ok("POST", "mbx1", f"{PREFIX}/items/flags", json=flags)
                move = {"folder": here, "to": there, "item_ids": ["big"]}
                await c.ok("POST", "mbx1", f"{PREFIX}/items/move", json=move)
                here, there = there, here
        copy = {"folder": here, "to": there, "item_ids": ["big"]}
        await c.ok("POST", "mbx1", f"{PREFIX}/items/copy", json=copy)
        peak = resident_memory(pid).peak - rest
        # Before: 2 times the item (its row read with its body at each change), and the
        # changed row held with it until the flush.
        assert peak < 0.5 * MESSAGE, (rest, peak)
        copied = await c.ok("GET", "mbx1", f"{PREFIX}/folders/{there}/uids")
        ((_, clone, *_),) = copied["messages"]
        assert clone != "big" and clone not in rows_in_file(tmp_path, "mbx1"), "in the overlay"

        # The reads that send the body take it from the file: the item's own row, and the
        # copy's from its source's (the copy is not in the file yet).
        digest = hashlib.sha256(raw).hexdigest()
        for item in ("big", clone):
            rest = await quiet(pid, base)
            got = await c.ok("GET", "mbx1", f"{PREFIX}/items/{item}/message", timeout=LONG)
            peak = resident_memory(pid).peak - rest
            assert got == raw, item
            del got
            assert peak < 0.5 * MESSAGE, (item, rest, peak)
            batch = await c.ok(
                "POST", "mbx1", f"{PREFIX}/items/messages", json={"item_ids": [item]},
                timeout=LONG,
            )  # fmt: skip
            assert batch == b"+%s %d\n%s.\n" % (item.encode(), MESSAGE, raw), item
            del batch
        rest = await quiet(pid, base)
        async with c.session.get(  # type: ignore[union-attr]
            c.url("mbx1") + f"{PREFIX}/items", params={"since_change": "0"}, timeout=LONG
        ) as resp:
            assert resp.status == 200
            listing = await resp.read()
        peak = resident_memory(pid).peak - rest
        listed = {i["item_id"]: i for i in json.loads(listing)["items"]}
        del listing
        for item in ("big", clone):
            assert hashlib.sha256(listed[item]["body"].encode()).hexdigest() == digest, item
        assert listed["big"]["folder"] == "Inbox" and listed[clone]["folder"] == "Old"
        del listed
        assert peak < 0.5 * MESSAGE, (rest, peak)

        # The same digest on both copies; once flushed, the active's file is the passive's.
        await converged(c, "DB1", "mbx1", ["mbx2"])
        digests = [await c.ok("GET", node, f"{PREFIX}/digest") for node in ("mbx1", "mbx2")]
        assert len({(d["item_count"], d["digest"]) for d in digests}) == 1, digests
        await flushed(c, tmp_path, {clone})
        active, passive = (items_in_file(tmp_path, node) for node in ("mbx1", "mbx2"))
        assert [active[i] for i in ("big", clone)] == [passive[i] for i in ("big", clone)]
        assert in_blob(tmp_path, "mbx1") == in_blob(tmp_path, "mbx2") == {
            "big": "blob", clone: "blob",
        }  # fmt: skip
        for item in ("big", clone):
            got = await c.ok("GET", "mbx1", f"{PREFIX}/items/{item}/message", timeout=LONG)
            assert got == raw, item
            del got

        # A delete mark: its check and its tombstone read the row's head alone.
        rest = await quiet(pid, base)
        await c.ok("DELETE", "mbx1", f"{PREFIX}/items/{clone}")
        peak = resident_memory(pid).peak - rest
        assert peak < 0.5 * MESSAGE, (rest, peak)
        await converged(c, "DB1", "mbx1", ["mbx2"])
        digests = [await c.ok("GET", node, f"{PREFIX}/digest") for node in ("mbx1", "mbx2")]
        assert len({(d["item_count"], d["digest"]) for d in digests}) == 1, digests
        status, _ = await c.call("GET", "mbx1", f"{PREFIX}/items/{clone}/message")
        assert status == 404
    finally:
        await c.close()
