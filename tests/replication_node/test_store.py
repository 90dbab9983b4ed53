"""The mailbox store's checks: a bad request is refused and changes nothing."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from dag_common.items_query import ItemsQuery
from dag_common.store_api import ItemIn
from replication_node.active.mailbox_store import MailboxStore
from replication_node.errors import BadRequest
from tests.replication_node.helpers import body_of, mount

LONE = "\ud800"  # a lone surrogate: valid in JSON text, not in UTF-8


@pytest.mark.parametrize(
    ("call", "field"),
    [
        (lambda s: s.create_mailbox("n", display_name=LONE), "display_name"),
        (lambda s: s.create_mailbox("n", folders=["Inbox", LONE]), "folder"),
        (lambda s: s.create_folder("m", "x" + LONE), "folder"),
    ],
    ids=["display name", "folder of a new mailbox", "new folder"],
)
async def test_text_that_is_not_utf8_is_refused_and_changes_nothing(tmp_path, call, field):
    copy = await mount(tmp_path)
    store = MailboxStore(copy)
    await store.create_mailbox("m")
    before = (copy.stream.generation, copy.stream.open_record_count, copy.items("m"))
    with pytest.raises(BadRequest, match=f"{field} is not valid UTF-8"):
        await call(store)
    assert (copy.stream.generation, copy.stream.open_record_count, copy.items("m")) == before
    assert copy.mailbox("n") is None
    await copy.crash_close()


@pytest.mark.parametrize("field", ["subject", "body"])
def test_an_item_whose_text_is_not_utf8_cannot_be_given_to_the_store(field):
    """An item is validated where it is built (the HTTP edge, or a caller in process), once:
    the store takes it as it is."""
    with pytest.raises(ValidationError, match=f"{field}\n.*not valid UTF-8"):
        ItemIn(**{field: "ok " + LONE})


async def test_the_store_assigns_ids_without_changing_the_items_it_is_given(tmp_path):
    copy = await mount(tmp_path)
    store = MailboxStore(copy)
    await store.create_mailbox("m")
    items = [ItemIn(body="one"), ItemIn(item_id="two", body="two")]
    written = await store.put_items("m", items)
    assert items == [ItemIn(body="one"), ItemIn(item_id="two", body="two")]
    assert written.item_ids is not None and written.item_ids[1] == "two"
    assert body_of(copy, "m", written.item_ids[0]) == "one"
    again = await store.put_items("m", items)  # the same items again: a new item, a replacement
    assert again.item_ids[0] != written.item_ids[0] and again.item_ids[1] == "two"
    assert len([i for i in copy.items("m") if not i.deleted]) == 3
    await copy.crash_close()


@pytest.mark.parametrize("limit", [1, 3, 7, 50])
async def test_pages_of_the_items_listing_add_up_to_the_whole_listing(tmp_path, limit):
    """Changes still in the LLR overlay are merged into each page up to where it ends: an
    item rewritten after its row in the file is not returned early (which would hide the
    file's rows between), and none is lost or returned stale.  (The file is paged; the
    overlay, a few generations at most, comes whole with the file's last page.)"""
    copy = await mount(tmp_path, log_file_size=64 * 1024, llr_depth=3)
    store = MailboxStore(copy)
    await store.create_mailbox("m")
    for i in range(300):  # several generations: the older in the file, the newer in the overlay
        await store.put_items("m", [ItemIn(item_id=f"i{i}", body="x" * 1000)])
    for i in range(0, 300, 7):  # rewritten: their newest change is in the overlay
        await store.put_items("m", [ItemIn(item_id=f"i{i}", body=f"again {i}")])
    for i in range(3, 300, 11):
        await store.delete_item("m", f"i{i}")
    assert copy.overlay.items, "the test needs changes still in the overlay"
    whole = {r.item_id: r for r in copy.items("m", 40)}

    held: dict[str, dict] = {}
    since, pages = 40, 0
    while True:
        page = copy.items_page("m", ItemsQuery(since, limit))
        numbers = [r.change_number for r in page.items]
        assert numbers == sorted(numbers) and all(since < n <= page.through for n in numbers)
        held.update((r.item_id, r) for r in page.items)
        pages += 1
        if page.complete:
            break
        assert page.through > since
        since = page.through
    assert held == whole
    assert pages > 1
    assert copy.live_count("m", 40) == sum(not r.deleted for r in whole.values())
    assert copy.live_count("m", 0) == 300 - len(range(3, 300, 11))
    await copy.crash_close()


@pytest.mark.parametrize("max_bytes", [1, 4000, 12_000, 10**9])
async def test_a_page_of_the_items_listing_is_cut_by_the_bytes_of_its_bodies(tmp_path, max_bytes):
    """`limit` counts changes; `max_bytes` stops a page once its bodies reach that many bytes
    (one change at least), file and overlay alike, and the pages still add up to the whole
    listing, overlay and all."""
    copy = await mount(tmp_path, log_file_size=64 * 1024, llr_depth=3)
    store = MailboxStore(copy)
    await store.create_mailbox("m")
    for i in range(60):  # 5,000 bytes each: the older in the file, the newer in the overlay
        await store.put_items("m", [ItemIn(item_id=f"i{i}", body="x" * 5000)])
    assert copy.overlay.items and copy.db.items("m"), "the test needs both"
    whole = {r.item_id: r for r in copy.items("m", 0)}
    held: dict[str, object] = {}
    since, pages = 0, []
    while True:
        page = copy.items_page("m", ItemsQuery(since, 50, page_bytes=max_bytes))
        file_rows = [r for r in page.items if r.change_number <= page.through]
        pages.append(len(page.items))
        held.update((r.item_id, r) for r in page.items)
        if page.complete:
            break
        # A page cut by bytes: its bodies reach max_bytes with its last change, not before.
        if len(file_rows) < 50:
            assert sum(r.size for r in file_rows) >= max_bytes
            assert sum(r.size for r in file_rows[:-1]) < max_bytes
        since = page.through
    assert held == whole
    per_page = max(1, -(-max_bytes // 5000))  # ceil: the change that reaches max_bytes is in
    if per_page < len(copy.db.items("m")):  # cut in the file, before the overlay
        assert pages[0] == per_page, pages
    else:  # `limit` holds over the overlay's rows too (they were merged past it)
        assert pages == [50, 10], pages
    await copy.crash_close()
