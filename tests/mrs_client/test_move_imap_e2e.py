"""End to end, over real node processes and the real guarantee API (issue 50, step 6): a move
carries what an IMAP client caches.  The source holds folders (one with a child), flags,
messages expunged (UIDs with gaps), a message moved between folders, a folder renamed and
one removed; during the move, between the initial and the incremental sync, a flag is
changed on a message the target holds, the renamed folder is renamed again (its child with
it), a message is written into the child, and the newest message of Inbox is expunged.  On
the target afterwards, every folder has the source's name, UIDVALIDITY and UIDNEXT, and
every message the source's UID and flags; the flag change travelled as a flag write, not
as the message again."""

from __future__ import annotations

import asyncio
from urllib.parse import quote

import pytest

from tests.cluster_harness import THREE_NODES, LocalCluster
from tests.mrs_client.e2e import active_of, mover_in_process, outcome, shorten_guarantee_waits
from tests.mrs_client.test_move_e2e import databases

pytestmark = pytest.mark.slow

SOURCE = "/v1/databases/DB1/mailboxes/alice"
SEEN, FLAGGED, DELETED, ANSWERED = "\\Seen", "\\Flagged", "\\Deleted", "\\Answered"


@pytest.fixture
async def cluster(tmp_path):
    c = LocalCluster(
        tmp_path,
        nodes=THREE_NODES,
        databases=databases(),
        defaults={"failover_after": None},
    )
    shorten_guarantee_waits(c)
    await c.start()
    api = await c.start_guarantee_api()
    yield c
    api.terminate()
    api.wait(timeout=20)
    await c.close()


def folder(box: str, name: str) -> str:
    return f"{box}/folders/{quote(name, safe='/')}"


async def put(c: LocalCluster, name: str, ids: list[str], flags: list[str] = ()) -> None:
    items = [
        {"item_id": i, "folder": name, "subject": f"about {i}", "body": f"body of {i}\n" * 20,
         "flags": list(flags), "received": "2026-03-01T10:00:00+00:00"}
        for i in ids
    ]  # fmt: skip
    await c.ok("POST", "mbx1", f"{SOURCE}/items", json={"items": items})


async def expunge(c: LocalCluster, name: str, item_ids: list[str]) -> None:
    flags = {"folder": name, "item_ids": item_ids, "add": [DELETED]}
    await c.ok("POST", "mbx1", f"{SOURCE}/items/flags", json=flags)
    await c.ok("POST", "mbx1", f"{SOURCE}/items/expunge", json={"folder": name})


async def imap_state(c: LocalCluster, node: str, db: str) -> dict[str, dict]:
    """Each folder's UIDVALIDITY, UIDNEXT and messages (uid, item id, flags), by name."""
    box = f"/v1/databases/{db}/mailboxes/alice"
    row = await c.ok("GET", node, box)
    state = {}
    for f in row["folder_status"]:
        listed = await c.ok("GET", node, f"{folder(box, f['folder'])}/uids")
        state[f["folder"]] = {
            "uidvalidity": listed["uidvalidity"],
            "uid_next": listed["uid_next"],
            "highest_modseq": listed["highest_modseq"],
            "messages": sorted((m[0], m[1], tuple(m[2])) for m in listed["messages"]),
        }
    return state


async def test_a_move_keeps_folders_uids_flags_and_counters(cluster):
    c = cluster
    await c.ok("PUT", "mbx1", SOURCE, json={"display_name": "Alice"})
    for name in ("Projects", "Projects/2026", "Old"):
        await c.ok("POST", "mbx1", f"{SOURCE}/folders", json={"folder": name})
    await put(c, "Inbox", [f"in{i}" for i in range(12)])
    await put(c, "Inbox", ["seen0", "seen1"], [SEEN])
    await put(c, "Projects", [f"p{i}" for i in range(5)], [SEEN, "$Work"])
    await put(c, "Projects/2026", [f"y{i}" for i in range(3)])
    await put(c, "Old", ["old0", "old1"])
    await expunge(c, "Inbox", ["in3", "in4", "in7"])  # UIDs with gaps
    await expunge(c, "Projects", ["p4"])  # its newest: UIDNEXT past every UID left
    moved = {"folder": "Inbox", "to": "Projects", "item_ids": ["in9"]}
    await c.ok("POST", "mbx1", f"{SOURCE}/items/move", json=moved)
    flags = {"folder": "Inbox", "item_ids": ["in1", "in2"], "add": [ANSWERED, "$Label1"]}
    await c.ok("POST", "mbx1", f"{SOURCE}/items/flags", json=flags)
    await c.ok("POST", "mbx1", f"{folder(SOURCE, 'Projects')}/rename", json={"to": "Work"})
    await c.ok("DELETE", "mbx1", folder(SOURCE, "Old"))
    before = await imap_state(c, "mbx1", "DB1")
    assert before["Work/2026"]["messages"][0][0] == 1 and "Old" not in before

    async with mover_in_process(c) as (start, _):
        run = await start()
        # after the initial copy's first write: what changes now, the incremental sync carries
        written = run.nodes.pause(lambda method, db, n: (method, db) == ("put_items", "DB2"))
        await asyncio.wait_for(written.reached.wait(), timeout=240)
        flags = {"folder": "Inbox", "item_ids": ["in0"], "add": [FLAGGED]}
        await c.ok("POST", "mbx1", f"{SOURCE}/items/flags", json=flags)
        flags = {"folder": "Work", "item_ids": ["p0"], "replace": ["$Done"]}
        await c.ok("POST", "mbx1", f"{SOURCE}/items/flags", json=flags)
        await c.ok("POST", "mbx1", f"{folder(SOURCE, 'Work')}/rename", json={"to": "Archive/Work"})
        await put(c, "Archive/Work/2026", ["late"], [SEEN])
        await put(c, "Inbox", ["newest"])
        await expunge(c, "Inbox", ["newest"])  # the target never sees its UID: UIDNEXT must
        written.release.set()
        record, _ = await outcome(c, run)
    print("\n".join(run.lines))

    source = await imap_state(c, "mbx1", "DB1")
    target = await imap_state(c, await active_of(c, "DB2"), "DB2")
    assert set(target) == set(source) == {
        "Inbox", "Sent Items", "Deleted Items", "Archive/Work", "Archive/Work/2026"
    }  # fmt: skip
    for name, mine in source.items():
        theirs = target[name]
        assert theirs["uidvalidity"] == mine["uidvalidity"], name
        assert theirs["uid_next"] == mine["uid_next"], name
        assert theirs["highest_modseq"] >= mine["highest_modseq"], name
        assert theirs["messages"] == mine["messages"], name
    inbox = {m[1]: m for m in target["Inbox"]["messages"]}
    assert inbox["in0"][2] == (FLAGGED,) and inbox["in1"][2] == ("$Label1", ANSWERED)
    assert [m[0] for m in source["Inbox"]["messages"]][:4] == [1, 2, 3, 6]  # the gaps kept
    work = {m[1]: m for m in target["Archive/Work"]["messages"]}
    assert work["p0"][2] == ("$Done",) and "in9" in work
    assert [m[1] for m in target["Archive/Work/2026"]["messages"]] == ["y0", "y1", "y2", "late"]
    # the two flag changes made during the move went as flag writes, not as bodies again
    assert run.nodes.counts.get(("set_flags", "DB2"), 0) >= 2, run.nodes.counts
    assert any("renamed to 'Archive/Work'" in line for line in run.lines), run.lines
    assert record.verified_epoch
