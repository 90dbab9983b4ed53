"""IMAP's state over real node processes (issue 50, step 1): each route of
`http/folder_routes.py` (rename, delete, flags, move, copy, expunge, a folder's UIDs) and the
folder counters of GET …/mailboxes/{mailbox}, their bad input refused with nothing written,
and a passive's state after replay the active's: UIDs, flags, counters."""

from __future__ import annotations

from urllib.parse import quote

import pytest

from tests.replication_node.e2e import converged, two_nodes

pytestmark = pytest.mark.slow

BOX = "/v1/databases/DB1/mailboxes/alice"
SEEN, DELETED = "\\Seen", "\\Deleted"


@pytest.fixture
async def cluster(tmp_path):
    c = two_nodes(tmp_path)
    await c.start()
    yield c
    await c.close()


def folder(name: str) -> str:
    return f"{BOX}/folders/{quote(name, safe='/')}"


async def uids(c, node: str, name: str, since: int = 0) -> dict:
    return await c.ok("GET", node, f"{folder(name)}/uids?since_modseq={since}")


async def test_every_imap_route_and_the_passive_replays_the_same_state(cluster):
    c = cluster
    await c.ok("PUT", "mbx1", BOX, json={"folders": ["Inbox", "Projects", "Projects/2026"]})
    items = [
        {"item_id": "a", "body": "1", "flags": [SEEN]},
        {"item_id": "b", "body": "2", "received": "2026-01-02T03:04:05+00:00"},
        {"item_id": "c", "body": "3", "folder": "Projects/2026"},
    ]
    await c.ok("POST", "mbx1", f"{BOX}/items", json={"items": items})
    inbox = await uids(c, "mbx1", "Inbox")
    assert [m[:3] for m in inbox["messages"]] == [[1, "a", [SEEN]], [2, "b", []]]
    assert inbox["messages"][1][5] == "2026-01-02T03:04:05+00:00"
    assert inbox["uid_next"] == 3 and inbox["uidvalidity"] > 0 and inbox["expunged"] == []

    flags = await c.ok(
        "POST",
        "mbx1",
        f"{BOX}/items/flags",
        json={"folder": "Inbox", "uids": [2], "add": [DELETED]},
    )
    assert flags["items"] == [{"uid": 2, "item_id": "b", "flags": [DELETED]}]
    modseq = flags["modseq"]
    copied = await c.ok(
        "POST", "mbx1", f"{BOX}/items/copy",
        json={"folder": "Inbox", "to": "Projects", "uids": [1, 2]},
    )  # fmt: skip
    assert copied["uids"] == [[1, 1], [2, 2]] and len(copied["item_ids"]) == 2
    before_move = (await uids(c, "mbx1", "Projects/2026"))["highest_modseq"]
    moved = await c.ok(
        "POST", "mbx1", f"{BOX}/items/move",
        json={"folder": "Projects/2026", "to": "Inbox", "item_ids": ["c"]},
    )  # fmt: skip
    assert moved["uids"] == [[1, 3]] and moved["uidvalidity"] == inbox["uidvalidity"]
    # the source tells the move as an expunge since before it
    out = await uids(c, "mbx1", "Projects/2026", before_move)
    assert out["expunged"] == [1] and out["messages"] == []
    gone = await c.ok("POST", "mbx1", f"{BOX}/items/expunge", json={"folder": "Inbox"})
    assert gone["expunged"] == [2]
    since = await uids(c, "mbx1", "Inbox", modseq)
    assert since["expunged"] == [2] and [m[0] for m in since["messages"]] == [3]
    renamed = await c.ok(
        "POST", "mbx1", f"{folder('Projects')}/rename", json={"to": "Archive/Projets été"}
    )
    assert renamed["to"] == "Archive/Projets été"
    kept = await uids(c, "mbx1", "Archive/Projets été")
    assert [m[0] for m in kept["messages"]] == [1, 2]  # UIDs and UIDVALIDITY kept
    await c.ok("POST", "mbx1", f"{BOX}/folders", json={"folder": "Old"})
    await c.ok("DELETE", "mbx1", folder("Old"))

    mailbox = await c.ok("GET", "mbx1", BOX)
    status = {f["folder"]: f for f in mailbox["folder_status"]}
    assert mailbox["folders"] == sorted(status)
    assert set(status) == {"Inbox", "Archive/Projets été", "Archive/Projets été/2026"}
    assert (status["Inbox"]["messages"], status["Inbox"]["unseen"]) == (2, 1)
    assert status["Inbox"]["uid_next"] == 4

    # the passive, replayed: the same UIDs, flags, counters
    await converged(c, "DB1", "mbx1", ["mbx2"])
    assert await c.ok("GET", "mbx2", BOX) | {"epoch": 0} == mailbox | {"epoch": 0}
    for name in status:
        on_active, on_passive = await uids(c, "mbx1", name), await uids(c, "mbx2", name)
        assert on_passive | {"epoch": 0} == on_active | {"epoch": 0}
    moved_from = "Archive/Projets été/2026"
    on_passive = await uids(c, "mbx2", moved_from, before_move)
    assert on_passive["expunged"] == [1]
    digests = [await c.ok("GET", n, f"{BOX}/digest") for n in ("mbx1", "mbx2")]
    assert digests[0]["digest"] == digests[1]["digest"]


async def test_a_moves_writes_keep_the_numbers_given_and_the_passive_replays_them(cluster):
    """The mover's copy (issue 50, step 6): a folder made with the source's counters, items
    put with the source's UIDs and modseqs (UIDNEXT goes past them), a flag write with the
    source's modseq, and the final sync's counters lifted, never lowered."""
    c = cluster
    move = "?override_lock=true"
    await c.ok("PUT", "mbx1", BOX, json={"folders": [], "locked": True})
    counters = {"folder": "Work", "uidvalidity": 1234, "uid_next": 9, "highest_modseq": 40}
    await c.ok("POST", "mbx1", f"{BOX}/folders{move}", json=counters)
    items = [
        {"item_id": "a", "folder": "Work", "body": "1", "uid": 3, "modseq": 12, "flags": [SEEN]},
        {"item_id": "b", "folder": "Work", "body": "2", "uid": 17, "modseq": 41},
    ]
    await c.ok("POST", "mbx1", f"{BOX}/items{move}", json={"items": items})
    work = await uids(c, "mbx1", "Work")
    assert [m[:4] for m in work["messages"]] == [[3, "a", [SEEN], 12], [17, "b", [], 41]]
    assert (work["uidvalidity"], work["uid_next"], work["highest_modseq"]) == (1234, 18, 41)
    flags = {"folder": "Work", "item_ids": ["a"], "replace": [DELETED], "modseq": 50}
    assert (await c.ok("POST", "mbx1", f"{BOX}/items/flags{move}", json=flags))["modseq"] == 50
    past = (await c.ok("GET", "mbx1", BOX))["uidvalidity_next"] + 1000
    lift = {"uid_next": 30, "highest_modseq": 45, "uidvalidity_next": past}
    await c.ok("POST", "mbx1", f"{folder('Work')}/counters{move}", json=lift)
    await c.ok("POST", "mbx1", f"{BOX}/unlock")
    work = await uids(c, "mbx1", "Work")
    assert (work["uid_next"], work["highest_modseq"]) == (30, 50)  # lifted, never lowered
    box = await c.ok("GET", "mbx1", BOX)
    assert box["uidvalidity_next"] == past
    # what the mailbox numbers next goes past what it was given
    await c.ok("POST", "mbx1", f"{BOX}/items", json={"item_id": "c", "folder": "Work"})
    await c.ok("POST", "mbx1", f"{BOX}/folders", json={"folder": "Next"})
    assert [m[0] for m in (await uids(c, "mbx1", "Work"))["messages"]] == [3, 17, 30]
    assert (await uids(c, "mbx1", "Next"))["uidvalidity"] == past
    await converged(c, "DB1", "mbx1", ["mbx2"])
    for name in ("Work", "Next"):
        on_active, on_passive = await uids(c, "mbx1", name), await uids(c, "mbx2", name)
        assert on_passive | {"epoch": 0} == on_active | {"epoch": 0}


@pytest.mark.parametrize(
    ("method", "path", "body", "status"),
    [
        ("POST", "/items/flags", {"folder": "Inbox", "uids": [1]}, 400),  # no change
        ("POST", "/items/flags", {"folder": "Inbox", "uids": [1], "add": ["a b"]}, 400),
        ("POST", "/items/flags", {"folder": "Inbox", "add": [SEEN]}, 400),  # no items
        ("POST", "/items/flags", {"folder": "Inbox", "uids": [0], "add": [SEEN]}, 400),
        ("POST", "/items/flags", {"folder": "Inbox", "uids": [9], "add": [SEEN]}, 404),
        ("POST", "/items/flags", {"folder": "Nope", "uids": [1], "add": [SEEN]}, 404),
        ("POST", "/items/move", {"folder": "Inbox", "to": "Nope", "uids": [1]}, 404),
        ("POST", "/items/move", {"folder": "Inbox", "to": "Inbox", "uids": [1]}, 400),
        ("POST", "/items/copy", {"folder": "Inbox", "uids": [1]}, 400),  # no target
        ("POST", "/items/expunge", {"folder": "Inbox", "uids": "1"}, 400),
        ("POST", "/folders/Inbox/rename", {"to": "X"}, 409),
        ("POST", "/folders/Work/rename", {"to": "/x"}, 400),
        ("POST", "/folders/Work/rename", {}, 400),
        ("POST", "/folders/Nope/rename", {"to": "X"}, 404),
        ("DELETE", "/folders/Inbox", None, 409),
        ("DELETE", "/folders/Nope", None, 404),
        ("GET", "/folders/Inbox/uids?since_modseq=x", None, 400),
        ("GET", "/folders/Nope/uids", None, 404),
        # numbers are given only by a move's copy (override_lock), and only well formed
        ("POST", "/items", {"item_id": "n", "body": "x", "uid": 7}, 400),
        ("POST", "/items?override_lock=true", {"item_id": "n", "uid": 0}, 400),
        ("POST", "/items?override_lock=true", {"item_id": "n", "modseq": 5}, 400),
        ("POST", "/folders", {"folder": "N", "uidvalidity": 5}, 400),
        ("POST", "/folders?override_lock=true", {"folder": "N", "uid_next": 5}, 400),
        ("POST", "/items/flags", {"folder": "Inbox", "uids": [1], "add": [SEEN], "modseq": 9}, 400),
        (
            "POST",
            "/items/flags",
            {"folder": "Inbox", "uids": [1], "add": [SEEN], "unchanged_since": 2**63},
            400,
        ),
        (
            "POST",
            "/items/flags",
            {"folder": "Inbox", "uids": [1], "add": [SEEN], "unchanged_since": "5"},
            400,
        ),
        (
            "POST",
            "/items/flags",
            {"folder": "Inbox", "uids": [1], "add": [SEEN], "unchanged_since": -1},
            400,
        ),
        (
            "POST",
            "/items/flags",
            {"folder": "Inbox", "uids": [1], "add": [SEEN], "unchanged_since": 0},
            200,
        ),  # nothing passes: no write
        ("POST", "/folders/Inbox/counters", {"uid_next": 0}, 400),
        ("POST", "/folders/Nope/counters?override_lock=true", {"uid_next": 9}, 404),
        ("POST", "/folders/Inbox/counters", {"uid_next": 99}, 400),  # not a move's
    ],
)
async def test_bad_imap_requests_are_refused_and_change_nothing(
    cluster, method, path, body, status
):
    c = cluster
    await c.ok("PUT", "mbx1", BOX, json={"folders": ["Inbox", "Work"]})
    await c.ok("POST", "mbx1", f"{BOX}/items", json={"item_id": "a", "body": "x"})
    before = (await c.ok("GET", "mbx1", BOX), await c.items("mbx1", "DB1", "alice"))
    got, answer = await c.call(method, "mbx1", BOX + path, json=body)
    assert got == status, answer
    assert "error" in answer or answer["modified"] == [{"uid": 1, "item_id": "a"}]
    assert (await c.ok("GET", "mbx1", BOX), await c.items("mbx1", "DB1", "alice")) == before


async def test_a_listing_gives_the_size_of_the_bytes_served_where_its_row_tells_it(cluster):
    """`message_size` (RFC822.SIZE): the length of GET …/message's bytes for a message kept
    as UTF-8, non-ASCII included; null for a Latin-1 message with 8-bit bytes (its body's
    UTF-8, `size`, is longer than what is served) and for a text item (served as a message
    made of it) — on the active and on the passive after replay."""
    c = cluster
    await c.ok("PUT", "mbx1", BOX, json={"folders": ["Inbox"]})
    mail = {
        "utf8": "Subject: café\r\n\r\nnaïve body\r\n".encode(),
        "latin1": "Subject: caf\xe9\r\n\r\nna\xefve body\r\n".encode("latin-1"),
    }
    headers = {"Content-Type": "message/rfc822"}
    for item_id, raw in mail.items():
        await c.ok("PUT", "mbx1", f"{BOX}/items/{item_id}/message", data=raw, headers=headers)
    await c.ok("POST", "mbx1", f"{BOX}/items", json={"items": [{"item_id": "text", "body": "é"}]})
    served = {}
    for item_id in ("utf8", "latin1", "text"):
        status, raw = await c.call("GET", "mbx1", f"{BOX}/items/{item_id}/message")
        assert status == 200, raw
        served[item_id] = raw
    assert served["utf8"] == mail["utf8"] and served["latin1"] == mail["latin1"]
    await converged(c, "DB1", "mbx1", ["mbx2"])
    for node in ("mbx1", "mbx2"):
        rows = {m[1]: m for m in (await uids(c, node, "Inbox"))["messages"]}
        assert rows["utf8"][6] == len(served["utf8"]) == rows["utf8"][4]
        assert rows["latin1"][6] is None and rows["latin1"][4] != len(served["latin1"])
        assert rows["text"][6] is None and rows["text"][4] != len(served["text"])
