"""The store API over HTTP, one in-process node on a real port: reads name the epoch of the
copy that answers, and the mailbox digest answers what a mover compares before completing."""

from __future__ import annotations

import hashlib
import json

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


async def test_a_client_bounds_a_page_by_bytes_of_its_own_within_the_nodes_cap(node):
    """`page_bytes` (the mover's choice, at most ITEMS_PAGE_BYTES) cuts pages as the node's
    own cap does, with or without `limit`; one item at least."""
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
    for query in ("&page_bytes=15000", "&page_bytes=15000&limit=100"):
        since, pages = 0, []
        while True:
            status, page = await call(session, "GET", BOX + f"/items?since_change={since}{query}")
            assert status == 200, page
            pages.append([i["item_id"] for i in page["items"]])
            if not page["more"]:
                break
            since = page["last_change_number"]
        # 10 + 10 reach 15,000 with the second; 10 + 40; 10 + 10 (which may say there is
        # more: a page cut by bytes at the last change does not know it is the last).
        assert pages[:3] == [["i0", "i1"], ["i2", "i3"], ["i4", "i5"]], (query, pages)
        assert pages[3:] in ([], [[]]), pages


async def test_a_page_is_bounded_by_bytes_over_the_rows_still_in_the_llr_overlay(node):
    """`page_bytes` bounds a page whatever holds its rows: the LLR overlay's (the last
    generations' puts, not yet in the file) are cut as the file's are, and the pages add
    up to every item once (issue 52: they were merged into a page whole)."""
    n, session = node
    await call(session, "PUT", BOX)
    for i in range(6):
        body = {"item_id": f"i{i}", "body": "x" * (40_000 if i == 3 else 10_000)}
        status, _ = await call(session, "POST", BOX + "/items", json=body)
        assert status == 201
    copy = n.instance("DB1").copy
    assert len(copy.overlay.items) >= 3, "the test needs rows in the overlay"
    since, pages = 0, []
    while True:
        query = f"/items?since_change={since}&page_bytes=15000"
        status, page = await call(session, "GET", BOX + query)
        assert status == 200, page
        sizes = [len(i["body"]) for i in page["items"]]
        assert sum(sizes[:-1]) < 15_000, sizes  # the bytes reach the bound with the last
        pages.append([i["item_id"] for i in page["items"]])
        if not page["more"]:
            break
        since = page["last_change_number"]
    assert pages[:3] == [["i0", "i1"], ["i2", "i3"], ["i4", "i5"]], pages
    assert pages[3:] in ([], [[]]), pages


async def test_a_listing_without_bodies_gives_each_items_hash_and_size(node):
    """`bodies=false` (what the mover's reconcile compares): every row as with bodies, but
    the body's SHA-256 and size instead of the body, whether the row is in the database file
    or still in the LLR overlay; a tombstone has no hash.  Pages are cut by the rows as
    listed, not by the bodies they leave out."""
    n, session = node
    await call(session, "PUT", BOX, json={"folders": ["Inbox"]})
    bodies = {f"i{k}": f"old {k} " + "é" * 5000 for k in range(3)}
    for item_id, body in bodies.items():
        await call(session, "POST", BOX + "/items", json={"item_id": item_id, "body": body})
    for _ in range(3):  # past the LLR depth: these in the file
        await call(session, "POST", "/v1/databases/DB1/roll-log")
    copy = n.instance("DB1").copy
    await wait_until("the items in the file", lambda: not copy.overlay.items, timeout=30)
    bodies["i0"] = "new 0"  # in the overlay, over the file's row
    await call(session, "POST", BOX + "/items", json={"item_id": "i0", "body": "new 0"})
    await call(session, "DELETE", BOX + "/items/i1")
    assert copy.overlay.items, "the test needs rows in the overlay"

    status, whole = await call(session, "GET", BOX + "/items")
    assert status == 200
    status, heads = await call(session, "GET", BOX + "/items?bodies=false")
    assert status == 200
    assert [h["item_id"] for h in heads["items"]] == [i["item_id"] for i in whole["items"]]
    for head, item in zip(heads["items"], whole["items"], strict=True):
        assert "body" not in head
        assert {k: v for k, v in head.items() if k != "body_hash"} == {
            k: v for k, v in item.items() if k != "body"
        }
        expected = "" if item["deleted"] else hashlib.sha256(item["body"].encode()).hexdigest()
        assert head["body_hash"] == expected
        assert head["size"] == len(item["body"].encode())
    # 5,000 "é" are 10,000 bytes of body, but a row without it weighs its subject and framing
    status, page = await call(session, "GET", BOX + "/items?bodies=false&page_bytes=10000")
    assert status == 200 and len(page["items"]) == 3 and not page["more"]


@pytest.mark.parametrize(
    ("query", "words"),
    [
        ("page_bytes=0", "page_bytes must be within 1..67108864"),
        ("page_bytes=67108865", "page_bytes must be within 1..67108864"),
        ("page_bytes=lots", "page_bytes must be an integer"),
        ("bodies=maybe", "bodies must be true or false"),
        ("limit=0", "limit must be within 1..100000"),
    ],
)
async def test_bad_listing_requests_get_a_clear_error(node, query, words):
    _, session = node
    await call(session, "PUT", BOX)
    status, body = await call(session, "GET", BOX + f"/items?{query}")
    assert status == 400 and words in body["error"], body


async def test_a_listing_carries_text_past_ascii_as_utf_8_not_escaped(node):
    """A body in another script costs its UTF-8 bytes in the listing, not six a letter as
    `\\uXXXX` (issue 52: a page of such text was three times its size in the mover)."""
    _, session = node
    assert (await call(session, "PUT", BOX, json={}))[0] == 201
    body = "漢字かな交じり文、Кириллица, emoji 📬. " * 2000
    item = {"item_id": "u", "subject": "Grüße 📬", "body": body}
    assert (await call(session, "POST", BOX + "/items", json=item))[0] == 201
    async with session.get(BOX + "/items", params={"since_change": "0"}) as resp:
        assert resp.status == 200 and resp.charset == "utf-8"
        raw = await resp.read()
    assert b"\\u" not in raw
    assert len(raw) < len(body.encode()) + 1000  # escaped, it was 2.2 times that
    (listed,) = json.loads(raw)["items"]
    assert (listed["subject"], listed["body"]) == (item["subject"], body)
