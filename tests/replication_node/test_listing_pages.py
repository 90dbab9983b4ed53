"""A page of the items listing is cut by bytes over the database file's rows and the LLR
overlay's alike (issue 52): the overlay's rows (the last `llr_depth` generations' puts, which
may be several large items) were merged into a page whole, whatever its `max_bytes`.  The
file and the overlay share one cursor (the change number), so paging through both in pages
of any bound gives every change exactly once, in order.

Over a real active copy (its large bodies held in the log, read back for the page), and, as
a property, over a real database file with a real overlay merged in (`listing.items_page`)."""

from __future__ import annotations

import tempfile
import uuid
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dag_common.items_query import ItemsQuery
from dag_common.model import Position
from dag_common.store_api import ItemIn
from replication_node.active.listing import items_page, merged_page
from replication_node.active.mailbox_store import MailboxStore
from replication_node.log import operations as ops
from replication_node.log.events import Transaction
from replication_node.storage.database import Database
from replication_node.storage.overlay import LlrOverlay
from replication_node.storage.reader import ROW_BYTES, ItemRow, ItemsPage
from tests.replication_node.helpers import mount, text_of
from tests.replication_node.strategies import T0

LARGE = 300_000


def _body(size: int, seed: str) -> str:
    line = f"{seed} line of a large item\r\n"
    return (line * (size // len(line) + 1))[:size]


def _pages(read, since: int) -> list[ItemsPage]:  # type: ignore[no-untyped-def]
    """Every page after `since`, each asked for after the last one's end."""
    pages = []
    while True:
        page = read(since)
        pages.append(page)
        if page.complete:
            return pages
        assert page.through > since, "a page that does not move on"
        since = page.through


def _check_cut(page: ItemsPage, max_bytes: int, limit: int, bodies: bool = True) -> None:
    """At most `limit` changes, and the bytes reach `max_bytes` only with the last one."""
    sizes = [r.listed_size(bodies) for r in page.items]
    assert len(sizes) <= limit
    assert sum(sizes[:-1]) < max_bytes, (sizes, max_bytes)


async def test_the_overlays_large_rows_are_cut_into_pages_by_bytes(tmp_path: Path) -> None:
    copy = await mount(tmp_path, log_file_size=64 * 1024, llr_depth=50)
    store = MailboxStore(copy)
    await store.create_mailbox("m")
    for i in range(4):  # in the file, two of them rewritten in the overlay below
        await store.put_items("m", [ItemIn(item_id=f"f{i}", body=_body(LARGE, f"f{i}"))])
    await copy.roll()
    await copy._flush_llr(through=copy.stream.last_closed_generation)
    assert copy.db.items("m") and not copy.overlay.items
    for i in range(6):  # in the overlay: six large bodies held as their place in the log
        await store.put_items("m", [ItemIn(item_id=f"o{i}", body=_body(LARGE, f"o{i}"))])
        if i in (1, 3):
            await store.put_items("m", [ItemIn(item_id=f"f{i}", body=_body(LARGE, f"again{i}"))])
    assert len(copy.overlay.logged) == 8
    whole = copy.items("m", 0)
    max_bytes = LARGE + LARGE // 2  # two items a page at most

    pages = _pages(
        lambda since: copy.items_page("m", ItemsQuery(since, 100, page_bytes=max_bytes)), 0
    )
    for page in pages:
        _check_cut(page, max_bytes, 100)  # before: the overlay's eight whole in the last page
    listed = [r for page in pages for r in page.items]
    assert listed == whole
    # read back from the log, a part at a time
    assert [text_of(r.body) for r in listed] == [text_of(r.body) for r in whole]
    assert text_of(whole[-1].body) == _body(LARGE, "o5")
    assert len(pages) == 6

    # Without bodies, cut by the rows as listed; every change once, hashed.
    bound = 2 * ROW_BYTES  # two rows a page (their subjects are empty)
    bare = _pages(
        lambda since: copy.items_page("m", ItemsQuery(since, 100, page_bytes=bound, bodies=False)),
        0,
    )
    for page in bare:
        _check_cut(page, bound, 100, bodies=False)
    assert [(r.item_id, r.change_number) for p in bare for r in p.items] == [
        (r.item_id, r.change_number) for r in whole
    ]
    assert all(r.body == "" and r.body_hash for p in bare for r in p.items)
    await copy.crash_close()


# A change: (item 0..5, a put of this many bytes, or a deletion: None).
changes = st.lists(st.tuples(st.integers(0, 5), st.none() | st.integers(0, 3000)), max_size=30)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    history=changes,
    in_file=st.integers(0, 30),
    since=st.integers(0, 10),
    limit=st.integers(1, 8),
    max_bytes=st.none() | st.integers(1, 8000),
    bodies=st.booleans(),
)
def test_paging_through_file_and_overlay_gives_every_change_once_in_order(
    history: list[tuple[int, int | None]],
    in_file: int,
    since: int,
    limit: int,
    max_bytes: int | None,
    bodies: bool,
) -> None:
    """The first `in_file` changes written into a real database file, the rest held in a
    real overlay over it: the pages of any `limit` and `max_bytes` add up to the listing the
    history leaves (each item's last change after `since`), in change-number order, each
    page cut as the bound says."""
    txns = [Transaction(Position(1, 512), T0, (ops.CreateMailbox("m", 1),))]
    latest: dict[str, tuple[int, int | None]] = {}
    for n, (item, size) in enumerate(history):
        cn, item_id = n + 2, f"i{item}"
        if size is None:
            op: ops.Operation = ops.DeleteItem("m", cn, item_id)
        else:
            op = ops.PutItem("m", cn, item_id, "Inbox", f"s{n}", _body(size, str(n)))
        txns.append(Transaction(Position(n + 2, 512), T0, (op,)))
        latest[item_id] = (cn, size)
    cut = min(in_file + 1, len(txns))
    with tempfile.TemporaryDirectory() as scratch:
        db = Database.create(
            Path(scratch) / "db.sqlite", database_signature=uuid.uuid4(), log_signature=uuid.uuid4()
        )
        try:
            db.apply(txns[:cut], waypoint=cut, committed=cut, last_log_time=T0)
            overlay = LlrOverlay()
            for txn in txns[cut:]:
                overlay.add(txn, db)

            def read(after: int) -> ItemsPage:
                query = ItemsQuery(after, limit, page_bytes=max_bytes, bodies=bodies)
                page = items_page(overlay, db, "m", query, with_body=_same)
                numbers = [r.change_number for r in page.items]
                assert all(after < n <= page.through for n in numbers)
                if max_bytes is not None:
                    _check_cut(page, max_bytes, limit, bodies)
                assert len(numbers) <= limit
                return page

            listed = [r for page in _pages(read, since) for r in page.items]
        finally:
            db.close()
    numbers = [r.change_number for r in listed]
    assert numbers == sorted(numbers) and len(set(numbers)) == len(numbers)
    expected = sorted((cn, item_id, size) for item_id, (cn, size) in latest.items() if cn > since)
    got = [(r.change_number, r.item_id, None if r.deleted else r.size) for r in listed]
    assert got == expected
    for row in listed:
        if bodies and not row.deleted:
            assert row.body == _body(row.size, str(row.change_number - 2))


def _same(row: ItemRow) -> ItemRow:
    """An overlay row with its body: these hold it in memory (none was staged in a log)."""
    return row


def _row(item: str, cn: int, size: int) -> ItemRow:
    return ItemRow("m", item, "Inbox", "", "", size, cn, False, "")


# The file's page after change 0 (a, c, e; `b` there superseded by the overlay's `b`), the
# overlay's rows (b at 4, d at 6, f at 9): the merged page, cut by the bound.
FILE = [_row("a", 1, 100), _row("b", 2, 100), _row("c", 3, 100), _row("e", 7, 100)]
HELD = [_row("b", 4, 500), _row("d", 6, 500), _row("f", 9, 500)]


@pytest.mark.parametrize(
    ("complete", "limit", "max_bytes", "items", "through", "done"),
    [
        # the file's page complete: every overlay row merged, none past the bound
        (True, 10, None, ["a", "c", "b", "d", "e", "f"], 9, True),
        # cut at the overlay's row that reaches the bound (100 + 100 + 500)
        (True, 10, 600, ["a", "c", "b"], 4, False),
        # cut at a file's row: the overlay's next one waits for the next page
        (True, 10, 150, ["a", "c"], 3, False),
        # cut by count over both
        (True, 4, None, ["a", "c", "b", "d"], 6, False),
        # the file's page cut at 7: the overlay's row at 9 belongs to a later page
        (False, 10, None, ["a", "c", "b", "d", "e"], 7, False),
        # the bound reached with the last row of a complete merge: nothing after it
        (True, 10, 1800, ["a", "c", "b", "d", "e", "f"], 9, True),
    ],
)
def test_a_merged_page_is_cut_after_the_row_that_reaches_its_bound(
    complete: bool,
    limit: int,
    max_bytes: int | None,
    items: list[str],
    through: int,
    done: bool,
) -> None:
    page = merged_page(
        ItemsPage(FILE, 7, complete), HELD, ItemsQuery(0, limit, page_bytes=max_bytes)
    )
    assert ([r.item_id for r in page.items], page.through, page.complete) == (
        items,
        through,
        done,
    )
