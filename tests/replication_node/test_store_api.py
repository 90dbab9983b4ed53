"""The store API over HTTP, one in-process node on a real port: reads name the epoch of the
copy that answers, and the mailbox digest answers what a mover compares before completing."""

from __future__ import annotations

import aiohttp
import pytest

from dag_common.auth import bearer
from dag_common.config import parse_config
from dag_common.mailbox_digest import item_term, to_hex
from tests.cluster_harness import cluster_config, free_port, wait_until
from tests.replication_node.helpers import serving_node

TOKEN = "api-token-0123456789abcdef"


@pytest.fixture
async def node(tmp_path):
    port = free_port()
    config = parse_config(
        cluster_config(
            [("n1", "s", f"http://127.0.0.1:{port}")],
            [{"name": "DB1", "copies": [{"node": "n1", "activation_preference": 1}]}],
            cluster="t",
            cluster_store={"kind": "embedded", "path": "cluster.db"},
            defaults={"log_file_size": "64KiB", "llr_depth": 2, "failover_after": None},
        ),
        base_dir=tmp_path,
    )
    async with (
        serving_node(config, tmp_path, name="n1", port=port, token=TOKEN) as (n, url),
        aiohttp.ClientSession(base_url=url, headers=bearer(TOKEN)) as session,
    ):
        yield n, session


async def call(session, method, path, **kw):
    async with session.request(method, path, **kw) as resp:
        if resp.content_type != "application/json":
            return resp.status, {"error": await resp.text()}
        return resp.status, await resp.json()


BOX = "/v1/databases/DB1/mailboxes/alice"


async def test_digest_and_reads_name_the_epoch_of_the_answering_copy(node):
    n, session = node
    epoch = n.instance("DB1").epoch
    assert epoch >= 1
    status, body = await call(session, "PUT", BOX, json={"folders": ["Inbox", "Projects"]})
    assert status == 201 and body["epoch"] == epoch
    items = [
        {"item_id": "b", "folder": "Projects", "subject": "s2", "body": "two"},
        {"item_id": "a", "folder": "Inbox", "subject": "s1", "body": "one"},
        {"item_id": "c", "folder": "Inbox", "subject": "s3", "body": "three"},
    ]
    status, body = await call(session, "POST", BOX + "/items", json={"items": items})
    assert status == 201 and body["lsn"]["epoch"] == epoch
    status, _ = await call(session, "DELETE", BOX + "/items/c")
    assert status == 200

    status, digest = await call(session, "GET", BOX + "/digest")
    assert status == 200
    # the sum of the live items' terms, independent of order (dag_common.mailbox_digest)
    expected = to_hex(
        item_term("alice", "b", "Projects", "s2", "two")
        + item_term("alice", "a", "Inbox", "s1", "one")
    )
    _, listing = await call(session, "GET", BOX + "/items")
    assert digest == {
        "mailbox": "alice",
        "item_count": 2,
        "digest": expected,
        "last_change_number": listing["last_change_number"],
        "epoch": epoch,
    }
    assert listing["epoch"] == epoch
    _, row = await call(session, "GET", BOX)
    assert row["epoch"] == epoch and row["folders"] == ["Inbox", "Projects"]
    _, rolled = await call(session, "POST", "/v1/databases/DB1/roll-log")
    assert rolled["epoch"] == epoch


async def test_the_digest_counts_the_files_rows_by_their_hash_and_the_overlays_over_them(node):
    """Items written into the database file (their generations flushed by LLR) count by the
    body hash each row keeps; changes still in the LLR overlay (a replacement, a deletion, a
    new item) count over them: the same digest as hashing every live body."""
    n, session = node
    await call(session, "PUT", BOX, json={"folders": ["Inbox"]})
    old = [
        {"item_id": f"i{k}", "folder": "Inbox", "subject": "s", "body": f"old {k}"}
        for k in range(3)
    ]
    await call(session, "POST", BOX + "/items", json={"items": old})
    for k in range(4):  # generations past the LLR depth (2): the file holds the old items
        filler = {"item_id": f"f{k}", "folder": "Inbox", "subject": "f", "body": "filler"}
        await call(session, "POST", BOX + "/items", json={"items": [filler]})
        await call(session, "POST", "/v1/databases/DB1/roll-log")
    copy = n.instance("DB1").copy
    assert {r.item_id for r in copy.db.digest_rows("alice")} >= {"i0", "i1", "i2"}
    await call(session, "POST", BOX + "/items", json={"items": [
        {"item_id": "i0", "folder": "Inbox", "subject": "s", "body": "new 0"},
        {"item_id": "n1", "folder": "Inbox", "subject": "s", "body": "new item"}]})  # fmt: skip
    await call(session, "DELETE", BOX + "/items/i1")
    status, digest = await call(session, "GET", BOX + "/digest")
    assert status == 200
    live = {"i0": "new 0", "i2": "old 2", "n1": "new item"}
    terms = sum(item_term("alice", i, "Inbox", "s", b) for i, b in live.items())
    terms += sum(item_term("alice", f"f{k}", "Inbox", "f", "filler") for k in range(4))
    assert (digest["item_count"], digest["digest"]) == (7, to_hex(terms))


@pytest.mark.parametrize(
    ("path", "status", "words"),
    [
        ("/v1/databases/DB1/mailboxes/nobody/digest", 404, "no mailbox"),
        ("/v1/databases/DB9/mailboxes/alice/digest", 404, "no readable copy"),
        ("/v1/databases/DB1/mailboxes/..%2F..%2Fetc/digest", 400, "invalid mailbox name"),
        # dot segments are resolved before routing: no mailbox route matches at all
        ("/v1/databases/DB1/mailboxes/%2E%2E/digest", 404, "Not Found"),
        ("/v1/databases/DB1/mailboxes/a%00b/digest", 400, "invalid mailbox name"),
        ("/v1/databases/DB1/mailboxes/-x/digest", 400, "invalid mailbox name"),
    ],
)
async def test_bad_digest_requests_get_a_clear_error_and_change_nothing(node, path, status, words):
    n, session = node
    await call(session, "PUT", BOX)
    before = n.instance("DB1").copy.stream.generation, n.reader("DB1").mailboxes()
    code, body = await call(session, "GET", path)
    assert code == status and words in body["error"], body
    assert (n.instance("DB1").copy.stream.generation, n.reader("DB1").mailboxes()) == before


async def test_digest_needs_the_token(node):
    _, session = node
    async with (
        aiohttp.ClientSession(base_url=session._base_url) as anonymous,
        anonymous.get(BOX + "/digest") as resp,
    ):
        assert resp.status == 401


async def test_a_write_refused_during_a_switchover_says_where_it_goes(node):
    n, session = node
    await call(session, "PUT", BOX)
    await n.instance("DB1").quiesce("n2")
    try:
        status, body = await call(session, "POST", BOX + "/items", json={"subject": "x"})
        assert status == 409 and body["switching_to"] == "n2" and body["active_node"] == "n1"
    finally:
        n.instance("DB1").unquiesce()


async def test_a_mailbox_the_directory_places_elsewhere_can_be_removed_and_made_again(node):
    """DELETE of a mailbox: a move's target copy (the directory names another database) goes
    with its folders and items, whether in the file or still in the LLR overlay, and its
    name is free again for a move's target; a mailbox the directory places here is refused."""
    n, session = node
    for name in ("bob", "carol"):  # move targets: the directory names their source
        await n.cluster_store.set_mailbox_database(name, "DB9", expected=None)
    await call(session, "PUT", BOX, json={"folders": ["Inbox"]})
    for name in ("bob", "carol"):
        path = f"/v1/databases/DB1/mailboxes/{name}"
        status, _ = await call(
            session, "PUT", path, json={"folders": ["Inbox", "Old"], "locked": True}
        )
        assert status == 201
        items = [{"item_id": f"i{k}", "folder": "Old", "body": "x"} for k in range(3)]
        status, _ = await call(
            session,
            "POST",
            path + "/items",
            params={"override_lock": "true"},
            json={"items": items},
        )
        assert status == 201
        if name == "bob":  # rolled past the LLR depth (2): bob goes to the database file
            for _ in range(3):
                await call(session, "POST", "/v1/databases/DB1/roll-log")
    async with aiohttp.ClientSession(base_url=str(session._base_url)) as anonymous:
        status, _ = await call(anonymous, "DELETE", "/v1/databases/DB1/mailboxes/bob")
        assert status == 401
    status, body = await call(session, "DELETE", BOX)
    assert status == 409 and "directory places 'alice' in DB1" in body["error"]
    assert (await call(session, "GET", BOX))[0] == 200
    for name in ("bob", "carol"):
        path = f"/v1/databases/DB1/mailboxes/{name}"
        status, body = await call(session, "DELETE", path)
        assert status == 200 and body["epoch"] == n.instance("DB1").epoch
        assert (await call(session, "GET", path))[0] == 404
        assert (await call(session, "GET", path + "/items"))[0] == 404
        assert (await call(session, "DELETE", path))[0] == 404
        # a mailbox of its users is still refused here (the directory names DB9), a move's
        # target made again is not
        status, body = await call(session, "PUT", path, json={"folders": ["Inbox"]})
        assert status == 409 and f"places '{name}' in DB9" in body["error"], body
        status, _ = await call(session, "PUT", path, json={"folders": ["Inbox"], "locked": True})
        assert status == 201
        _, box = await call(session, "GET", path)
        assert box["folders"] == ["Inbox"] and box["locked"]
        _, listed = await call(session, "GET", path + "/items")
        assert listed["items"] == []
        _, paged = await call(session, "GET", path + "/items?limit=1&count=true")
        assert paged["items"] == [] and not paged["more"] and paged["live_count"] == 0
    _, listed = await call(session, "GET", "/v1/databases/DB1/mailboxes")
    assert [m["mailbox"] for m in listed["mailboxes"]] == ["alice", "bob", "carol"]


async def test_a_page_of_the_items_listing_holds_its_limit_or_its_bytes_whichever_comes_first(
    node, monkeypatch
):
    """`limit` counts changes, and items may be of 36 MiB: a page stops once its bodies reach
    ITEMS_PAGE_BYTES (one item at least, whatever its size), saying there is more."""
    from replication_node.http import store_routes

    monkeypatch.setattr(store_routes, "ITEMS_PAGE_BYTES", 25_000)
    n, session = node
    await call(session, "PUT", BOX)
    for i in range(6):
        body = {"item_id": f"i{i}", "body": "x" * (40_000 if i == 3 else 10_000)}
        status, _ = await call(session, "POST", BOX + "/items", json=body)
        assert status == 201
    copy = n.instance("DB1").copy
    for _ in range(3):  # past the LLR depth: every item in the file, none in the overlay
        await call(session, "POST", "/v1/databases/DB1/roll-log")
    await wait_until("the items in the file", lambda: not copy.overlay.items, timeout=30)
    since, pages = 0, []
    while True:
        status, page = await call(session, "GET", BOX + f"/items?since_change={since}&limit=100")
        assert status == 200
        pages.append([i["item_id"] for i in page["items"]])
        if not page["more"]:
            break
        since = page["last_change_number"]
    # 10 + 10 + 10 reach 25,000 with the third; the 40,000 alone; then the last two.
    assert pages == [["i0", "i1", "i2"], ["i3"], ["i4", "i5"]], pages
