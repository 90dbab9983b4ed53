"""The item bodies a mover process holds, within a budget (issue 52): every move of the
process (`mrs move` runs one, `mrs serve` many) reads its source a page at a time and holds
each page's bodies until they are written; past the budget, the next page waits until
bodies already read are written.  Nothing is refused: the move goes on at the rate memory
allows.

A page is asked for with a byte bound the mover chooses (`MoveSettings.sync_page_bytes`: the
node's listing stops once its bodies reach it, one item at least).  While a page is read it
counts that bound once: the answer is read into one buffer and its large bodies unescaped
in place there (`dag_common.listing_bodies`), so a page is held once, not as its bytes and
their text as before; then what its items hold (`Item.size`), given back item by item as
each is written or set aside.  A page's last item may pass the bound: the budget is passed
by at most one item per page being read, and one move reads at most two pages at once (the
one it writes and the next, read ahead).

`Hold`: what one sync or reconcile of one mailbox holds of the budget; whatever it still
holds when it ends (a failure, a stall given up, a stop) is given back then, so a failed move
never keeps memory from the others.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable

from dag_common.memory import MemoryBudget
from dag_common.store_api import Item, Items


class BodyBudget:
    """Bytes of item bodies the movers of one process hold, at most `limit` (module
    docstring)."""

    def __init__(self, limit: int) -> None:
        # The budget itself: what it holds (`in_use`) is read there, as by its metrics
        # (`dag_common.memory_metrics`).
        self.budget = MemoryBudget(limit, wait=None)

    @contextlib.asynccontextmanager
    async def hold(self) -> AsyncIterator[Hold]:
        """A share of the budget for one piece of work, all given back at its end."""
        hold = Hold(self.budget)
        try:
            yield hold
        finally:
            hold.release_bytes(hold.held)


class Hold:
    """The bodies one sync or reconcile of a mailbox holds (`BodyBudget.hold`)."""

    def __init__(self, budget: MemoryBudget) -> None:
        self._budget = budget
        self.held = 0

    async def read(self, read: Callable[[], Awaitable[Items]], page_bytes: int) -> Items:
        """The page `read` gives (asked with `page_bytes`), read once the budget has room
        for it; its items are held from then on, until `release`d."""
        reading = page_bytes  # the answer's one buffer, its bodies taken out in place
        await self._budget.acquire(reading, "a page of items")
        try:
            page = await read()
        finally:
            self._budget.release(reading)
        size = sum(item.size for item in page.items if item.has_body)
        self._budget.take(size)
        self.held += size
        return page

    def release(self, items: Iterable[Item]) -> None:
        """`items` (read with `read`) are written or set aside: their bodies go."""
        self.release_bytes(sum(item.size for item in items if item.has_body))

    def release_bytes(self, size: int) -> None:
        size = min(size, self.held)
        self.held -= size
        self._budget.release(size)
