"""Reading a source mailbox a page at a time, stepping over a change the source cannot read.

A damaged row on the source (text that no longer decodes, say) makes its node answer 500
for any listing that reaches it: every page from the cursor on would fail, and the move
would stall until it failed, for one item.  So when a page answers 500, the reader asks
for smaller pages (half the size each time) and returns the first that comes back: the
changes before the damaged one.  When even a page of one change answers 500 twice, that
change is the damaged one; its change number is the smallest `since` past which a page of
one change reads again (found by doubling, then halving the distance: a few dozen
requests), and the reader returns it as an unreadable item (`Item.unreadable_at`), which the
move reports as a bad item (`item_limits`).  The node cannot say which item it is.

Consecutive damaged changes, with nothing readable between them, are found as one: the
listing cannot tell them apart.  Any other failure (a node down, a 503, a 409) is raised as
it is: the move stalls and asks again, as for any read.
"""

from __future__ import annotations

from dataclasses import replace

from dag_common.items_query import ItemsQuery
from dag_common.store_api import Item, Items, NodeStore
from mrs_client.errors import NodeCallError

UNREADABLE = 500  # the node's answer for a row it cannot read (its "internal error")
MAX_CHANGE_NUMBER = 2**63 - 1  # the node's largest change number


def _damaged(exc: NodeCallError) -> bool:
    return exc.status == UNREADABLE


async def read_page(
    nodes: NodeStore,
    database: str,
    mailbox: str,
    since: int,
    limit: int,
    *,
    count: bool = False,
    page_bytes: int | None = None,
    bodies: bool = True,
) -> Items:
    """The changes of `mailbox` after `since`, about `limit` of them and within `page_bytes`
    (`NodeStore.items`, with or without `bodies`); short of a damaged change, or that change
    alone as an unreadable item.  (A damaged body is found by a listing with bodies only:
    without them, its row lists well, with the hash it was written with.)"""
    query = ItemsQuery(since, limit, count=count, page_bytes=page_bytes, bodies=bodies)
    try:
        return await nodes.items(database, mailbox, query)
    except NodeCallError as exc:
        if not _damaged(exc):
            raise
        error = exc
    size = limit
    while size > 1:
        size = max(1, size // 2)
        try:
            return await nodes.items(database, mailbox, replace(query, limit=size, count=False))
        except NodeCallError as exc:
            if not _damaged(exc):
                raise
            error = exc
    # A page of one change failed: once more, lest a passing 500 be taken for damage.
    try:
        return await nodes.items(database, mailbox, ItemsQuery(since, 1, bodies=bodies))
    except NodeCallError as exc:
        if not _damaged(exc):
            raise
        error = exc
    change, after = await _damaged_change(nodes, database, mailbox, since, bodies)
    why = f"the source answered HTTP {error.status} reading it: {error.detail or error}"
    return Items((Item.unreadable_at(change, why),), change, epoch=after.epoch, more=True)


async def _damaged_change(
    nodes: NodeStore, database: str, mailbox: str, since: int, bodies: bool
) -> tuple[int, Items]:
    """The change number of the first change after `since`, which cannot be read: the
    smallest `s` for which a page of one change after `s` reads (and that page)."""

    async def reads(s: int) -> Items | None:
        try:
            return await nodes.items(database, mailbox, ItemsQuery(s, 1, bodies=bodies))
        except NodeCallError as exc:
            if not _damaged(exc):
                raise
            return None

    low, step = since, 1  # a page after `low` fails
    while True:
        high = min(since + step, MAX_CHANGE_NUMBER)
        found = await reads(high)
        if found is not None:
            break
        if high == MAX_CHANGE_NUMBER:
            raise NodeCallError(
                f"the source cannot read {mailbox!r} after change {since}, however far on",
                status=UNREADABLE,
            )
        low, step = high, step * 2
    while high - low > 1:  # a page after `low` fails, a page after `high` reads
        middle = (low + high) // 2
        page = await reads(middle)
        if page is None:
            low = middle
        else:
            high, found = middle, page
    return high, found
