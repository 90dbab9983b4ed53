"""The mailbox directory and the store agree, over the node's HTTP API (one in-process node
hosting two databases, on a real port, its cluster store a real SQLite file): a mailbox is
created only where the directory places it or may place it, never as a second mailbox the
directory does not name, even when two creations race; and the soft-deleted mailboxes a
move leaves are listed, purged and restored as the operator's tools say."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

import aiohttp
import pytest

from dag_common.auth import bearer
from dag_common.cluster_store.embedded import EmbeddedClusterStore
from dag_common.config import parse_config
from mrs_client.move_store.embedded import EmbeddedMoveStore
from mrs_client.move_store.interface import MoveRecord
from tests.cluster_harness import cluster_config, free_port
from tests.replication_node.helpers import serving_node

TOKEN = "api-token-0123456789abcdef"


@pytest.fixture
async def node(tmp_path):
    port = free_port()
    config = parse_config(
        cluster_config(
            [("n1", "s", f"http://127.0.0.1:{port}")],
            [
                {"name": db, "copies": [{"node": "n1", "activation_preference": 1}]}
                for db in ("DB1", "DB2")
            ],
            cluster="t",
            cluster_store={"kind": "embedded", "path": "cluster.db"},
            defaults={"log_file_size": "64KiB", "llr_depth": 2, "failover_after": None},
        ),
        base_dir=tmp_path,
    )
    directory = EmbeddedClusterStore(tmp_path / "cluster.db")
    async with (
        serving_node(config, tmp_path, name="n1", port=port, token=TOKEN) as (_, url),
        aiohttp.ClientSession(base_url=url, headers=bearer(TOKEN)) as session,
    ):
        yield session, directory
    directory.close()


async def call(session, method, path, **kw):
    async with session.request(method, path, **kw) as resp:
        return resp.status, await resp.json()


def box(db: str, name: str = "alice") -> str:
    return f"/v1/databases/{db}/mailboxes/{name}"


async def test_a_mailbox_the_directory_places_elsewhere_is_refused_and_nothing_is_created(node):
    session, directory = node
    status, _ = await call(session, "PUT", box("DB1"), json={})
    assert status == 201
    assert await directory.mailbox_database("alice") == "DB1"

    status, body = await call(session, "PUT", box("DB2"), json={"display_name": "Alice"})
    assert status == 409, body
    assert "places 'alice' in DB1" in body["error"]
    assert (await call(session, "GET", box("DB2")))[0] == 404
    _, listing = await call(session, "GET", "/v1/databases/DB2/mailboxes")
    assert listing["mailboxes"] == []
    assert await directory.mailbox_database("alice") == "DB1"


async def test_racing_creations_in_two_databases_leave_one_mailbox_where_the_directory_says(node):
    session, directory = node
    for k in range(8):
        name = f"race{k}"
        answers = await asyncio.gather(
            call(session, "PUT", box("DB1", name), json={}),
            call(session, "PUT", box("DB2", name), json={}),
        )
        assert sorted(status for status, _ in answers) == [201, 409], answers
        placed = await directory.mailbox_database(name)
        held = [
            db for db in ("DB1", "DB2") if (await call(session, "GET", box(db, name)))[0] == 200
        ]
        assert held == [placed], (name, placed, held)


async def test_a_claim_left_by_a_creation_that_died_is_completed_by_asking_again(node):
    """The directory claimed first, then the node died before the mailbox was written: the
    directory names DB2 with no mailbox there (nothing orphaned); the same request again
    creates it, and another database is still refused."""
    session, directory = node
    assert await directory.set_mailbox_database("bob", "DB2", expected=None)
    status, body = await call(session, "PUT", box("DB1", "bob"), json={})
    assert status == 409 and "places 'bob' in DB2" in body["error"]
    status, _ = await call(session, "PUT", box("DB2", "bob"), json={})
    assert status == 201
    assert (await call(session, "GET", box("DB2", "bob")))[0] == 200


async def test_bad_input_claims_nothing(node):
    session, directory = node
    status, _ = await call(session, "PUT", box("DB1"), json={"folders": ["bad\x00folder"]})
    assert status == 400
    assert await directory.mailbox_database("alice") is None


ITEMS = {"items": [{"item_id": f"i{k}", "folder": "Inbox", "body": f"b{k}"} for k in range(3)]}


async def moved_by_hand(session, directory) -> None:
    """alice as a completed move DB1 -> DB2 leaves her: live in DB2 (where the directory
    places her), soft-deleted (and locked) in DB1 with her items."""
    assert (await call(session, "PUT", box("DB1"), json={}))[0] == 201
    assert (await call(session, "POST", box("DB1") + "/items", json=ITEMS))[0] == 201
    assert (await call(session, "PUT", box("DB2"), json={"locked": True}))[0] == 201
    assert await directory.set_mailbox_database("alice", "DB2", expected="DB1")
    for path in (box("DB2") + "/unlock", box("DB1") + "/lock", box("DB1") + "/soft-delete"):
        assert (await call(session, "POST", path))[0] == 200


async def soft_deleted(session, db: str) -> list[dict]:
    status, body = await call(session, "GET", f"/v1/databases/{db}/soft-deleted-mailboxes")
    assert status == 200, body
    return body["mailboxes"]


async def test_a_moves_soft_deleted_source_is_listed_and_purged_and_a_live_one_is_not(node):
    session, directory = node
    await moved_by_hand(session, directory)
    listed = await soft_deleted(session, "DB1")
    assert [(m["mailbox"], m["directory_database"]) for m in listed] == [("alice", "DB2")]
    assert await soft_deleted(session, "DB2") == []

    # a second alice in DB1 is refused, however asked for: the directory places her in DB2
    status, body = await call(session, "PUT", box("DB1"), json={})
    assert status == 409 and "soft-deleted mailbox 'alice'" in body["error"], body

    status, body = await call(session, "POST", box("DB2") + "/purge")
    assert status == 409 and "live, not soft-deleted" in body["error"], body
    status, body = await call(session, "POST", box("DB1", "nobody") + "/purge")
    assert status == 404, body

    status, body = await call(session, "POST", box("DB1") + "/purge")
    assert status == 200, body
    assert (await call(session, "GET", box("DB1")))[0] == 404
    assert await soft_deleted(session, "DB1") == []
    assert (await call(session, "GET", box("DB2")))[0] == 200  # the live one is untouched
    assert await directory.mailbox_database("alice") == "DB2"


async def test_restore_refuses_a_mailbox_the_directory_places_elsewhere_unless_told_to_replace(
    node,
):
    session, directory = node
    await moved_by_hand(session, directory)
    status, body = await call(session, "POST", box("DB1") + "/restore")
    assert status == 409, body
    assert "places 'alice' in DB2" in body["error"]
    assert "mrs move --mailbox alice --to DB1" in body["error"]
    status, body = await call(session, "POST", box("DB1") + "/restore", json={"replace": "DB3"})
    assert status == 409 and "not in DB3" in body["error"], body
    status, body = await call(session, "POST", box("DB2") + "/restore")
    assert status == 409 and "live, not soft-deleted" in body["error"], body
    assert await directory.mailbox_database("alice") == "DB2"
    assert [m["mailbox"] for m in await soft_deleted(session, "DB1")] == ["alice"]

    # DB2's copy lost (here: soft-deleted too): restored over it, the directory follows
    assert (await call(session, "POST", box("DB2") + "/soft-delete"))[0] == 200
    status, body = await call(session, "POST", box("DB1") + "/restore", json={"replace": "DB2"})
    assert status == 200, body
    assert await directory.mailbox_database("alice") == "DB1"
    _, row = await call(session, "GET", box("DB1"))
    assert (row["locked"], row["soft_deleted"]) == (False, False)
    _, items = await call(session, "GET", box("DB1") + "/items")
    assert sorted(i["item_id"] for i in items["items"]) == ["i0", "i1", "i2"]
    # written to like any mailbox; purge now refuses DB1's, the directory's own
    assert (await call(session, "POST", box("DB1") + "/items", json=ITEMS))[0] == 201
    assert (await call(session, "POST", box("DB1") + "/soft-delete"))[0] == 200
    status, body = await call(session, "POST", box("DB1") + "/purge")
    assert status == 409 and "restore it" in body["error"], body
    status, _ = await call(session, "POST", box("DB1") + "/restore")
    assert status == 200


async def test_restore_waits_for_a_move_holding_the_mailbox(node, tmp_path):
    session, directory = node
    await moved_by_hand(session, directory)
    moves = EmbeddedMoveStore(tmp_path / "cluster.db")
    now = datetime(2026, 11, 23, 9, 0, tzinfo=UTC)
    await moves.create([MoveRecord("3fa2b1c4d5e6", ("alice",), "DB2", "DB1", now, now)])
    await moves.aclose()
    status, body = await call(session, "POST", box("DB1") + "/restore", json={"replace": "DB2"})
    assert status == 409 and "move 3fa2b1c4d5e6 holds 'alice'" in body["error"], body
    assert await directory.mailbox_database("alice") == "DB2"


async def test_a_moves_target_replaces_a_soft_deleted_copy_in_one_transaction(node):
    session, directory = node
    await moved_by_hand(session, directory)
    status, body = await call(session, "PUT", box("DB1"), json={"replace_soft_deleted": True})
    assert status == 400 and "with locked" in body["error"], body
    status, body = await call(session, "PUT", box("DB1"), json={"locked": True})
    assert status == 409 and "soft-deleted mailbox 'alice'" in body["error"], body

    body = {"locked": True, "replace_soft_deleted": True, "folders": ["Inbox", "Projects"]}
    status, written = await call(session, "PUT", box("DB1"), json=body)
    assert status == 201, written
    _, row = await call(session, "GET", box("DB1"))
    assert (row["locked"], row["soft_deleted"], row["folders"]) == (
        True,
        False,
        ["Inbox", "Projects"],
    )
    _, items = await call(session, "GET", box("DB1") + "/items")
    assert items["items"] == []  # the soft-deleted copy's items went with it
    assert await directory.mailbox_database("alice") == "DB2"  # a move's target claims nothing
    # a live copy is never replaced
    status, body = await call(session, "PUT", box("DB1"), json=body)
    assert status == 409 and "exists already" in body["error"], body
