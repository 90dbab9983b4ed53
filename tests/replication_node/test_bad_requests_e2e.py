# ruff: noqa: E501 - one row per malformed request reads best on one line
"""Malformed requests against a real node process: each is a 4xx naming what is wrong, never
a 5xx, and nothing changes (the same items, the same log position afterwards)."""

from __future__ import annotations

import pytest

from tests.cluster_harness import LocalCluster

pytestmark = pytest.mark.slow

DB = "/v1/databases/DB1"
BOX = f"{DB}/mailboxes/alice"
DEEP = "[" * 100_000 + "]" * 100_000
# A body large enough to be taken out of its JSON in place (`dag_common/json_bodies.py`).
LARGE = "a" * 70_000
MESSAGE = "Subject: s\r\n\r\n" + LARGE

# (name, method, path, body as JSON text or a JSON value, status, fragment of the error)
BAD = [
    ("lone surrogate in a subject", "POST", f"{BOX}/items", '{"subject": "\\ud800"}', 400, "subject"),
    ("lone surrogate in a batch", "POST", f"{BOX}/items", '{"items": [{"body": "a\\udfff"}]}', 400, "items.0.body"),
    ("a number for a subject", "POST", f"{BOX}/items", {"subject": 5}, 400, "subject"),
    ("an empty batch", "POST", f"{BOX}/items", {"items": []}, 400, "items"),
    ("1001 items in a write", "POST", f"{BOX}/items", {"items": [{}] * 1001}, 400, "items"),
    ("an unknown field", "POST", f"{BOX}/items", {"subject": "s", "colour": "red"}, 400, "colour"),
    ("an item id with a path", "POST", f"{BOX}/items", {"item_id": "../x"}, 400, "item_id"),
    ("a folder with a control character", "POST", f"{BOX}/folders", {"folder": "a\x01"}, 400, "folder"),
    ("JSON nested 100,000 deep", "POST", f"{BOX}/items", DEEP, 400, "nested too deeply"),
    ("not JSON", "POST", f"{BOX}/items", "{oops", 400, "not JSON"),
    ("lone surrogate in a large body", "POST", f"{BOX}/items", '{"items": [{"body": "' + LARGE + '\\ud800"}]}', 400, "not valid UTF-8"),
    ("a control character in a large body", "POST", f"{BOX}/items", '{"body": "' + LARGE + '\x01"}', 400, "Invalid control character"),
    ("a bad escape in a large body", "POST", f"{BOX}/items", '{"body": "' + LARGE + '\\q"}', 400, "Invalid \\escape"),
    ("a large body not closed", "POST", f"{BOX}/items", '{"body": "' + LARGE, 400, "not JSON"),
    ("a large message-8bit body past Latin-1", "POST", f"{BOX}/items", {"format": "message-8bit", "body": MESSAGE + "\u20ac"}, 400, "Latin-1"),
    ("a large body's format a list", "POST", f"{BOX}/items", {"format": ["message"], "body": MESSAGE}, 400, "format"),
    ("a large message's subject not its own", "POST", f"{BOX}/items", {"format": "message", "subject": "t", "body": MESSAGE}, 400, "subject"),
    ("since_change 2^70", "GET", f"{BOX}/items?since_change={2**70}", None, 400, "since_change"),
    ("since_change -1", "GET", f"{BOX}/items?since_change=-1", None, 400, "since_change"),
    ("since_change not a number", "GET", f"{BOX}/items?since_change=abc", None, 400, "since_change"),
    ("a page of no items", "GET", f"{BOX}/items?limit=0", None, 400, "limit"),
    ("a page of a million items", "GET", f"{BOX}/items?limit=1000000", None, 400, "limit"),
    ("a page limit not a number", "GET", f"{BOX}/items?limit=ten", None, 400, "limit"),
    ("a display name of 300 characters", "PUT", f"{DB}/mailboxes/bob", {"display_name": "d" * 300}, 400, "display_name"),
    ("locked as a string", "PUT", f"{DB}/mailboxes/bob", {"locked": "yes"}, 400, "locked"),
    ("a mount dial that does not exist", "POST", f"{DB}/activate", {"node": "mbx1", "mount_dial_override": "Nope"}, 400, "mount_dial_override"),
    ("a number for a switchover target", "POST", f"{DB}/switchover", {"target": 5}, 400, "target"),
    ("a mailbox name with dot segments", "GET", f"{DB}/mailboxes/..%2F..%2Fetc", None, 400, "mailbox"),
    ("a hand-over without its copy", "POST", f"{DB}/hand-over", {}, 400, "to"),
    ("a hand-over to a node without a copy", "POST", f"{DB}/hand-over", {"to": "mbx9"}, 400, "holds no other copy"),
    ("the open log while it is written", "GET", f"{DB}/open-log", None, 409, "served only while the active is not mounted"),
    ("the open log by its file name", "GET", f"{DB}/logs/E00.log", None, 400, "not a closed generation"),
    ("last logs copied into the active", "POST", f"{DB}/copy-last-logs", None, 400, "no passive copy"),
]  # fmt: skip


async def test_malformed_requests_are_refused_and_change_nothing(tmp_path):
    cluster = LocalCluster(
        tmp_path,
        nodes=[("mbx1", "redmond")],
        databases=[{"name": "DB1", "copies": [{"node": "mbx1", "activation_preference": 1}]}],
    )
    await cluster.start()
    try:
        await cluster.ok("PUT", "mbx1", BOX)
        await cluster.ok("POST", "mbx1", f"{BOX}/items", json={"item_id": "kept", "subject": "k"})

        async def state():
            copy = (await cluster.status("mbx1"))["DB1"]
            items = await cluster.items("mbx1", "DB1", "alice")
            boxes = await cluster.ok("GET", "mbx1", f"{DB}/mailboxes")
            return (copy["last_log_generated"], copy["open_commits"], items, boxes["mailboxes"])

        before = await state()
        answers = {}
        for name, method, path, body, status, fragment in BAD:
            if isinstance(body, str):
                kw = {"data": body.encode(), "headers": {"Content-Type": "application/json"}}
            else:
                kw = {} if body is None else {"json": body}
            got, answer = await cluster.call(method, "mbx1", path, **kw)
            answers[name] = (got, answer)
            assert got == status, (name, got, answer)
            assert isinstance(answer, dict) and fragment in answer["error"], (name, answer)
        assert await state() == before, "a refused request changed something"
        assert "a bug" not in cluster.log("mbx1"), "a malformed request reached a 500"
    finally:
        await cluster.close()
