"""What a mover's page takes from its process's budget (`mrs_client.body_budget`, issue 52):
its byte bound once while it is read (the answer is one buffer, its large bodies unescaped in
place: `dag_common.listing_bodies`), then what its items hold.  A page past what the budget
has left waits, as documented (docs/concepts/memory.md: nothing is refused), until bodies
already read are given back.  The real budget; each read a page built in memory."""

from __future__ import annotations

import asyncio

from dag_common.store_api import Item, Items
from mrs_client.body_budget import BodyBudget

PAGE = 4000  # the page's byte bound (`sync_page_bytes`)
HELD = 9000  # what a first page's items hold


def page(*sizes: int) -> Items:
    """Items of `sizes` (`Item.size`: the subject's and the body's)."""
    items = tuple(
        Item(f"m{n}", "Inbox", "s", "x" * (size - 1), n + 1) for n, size in enumerate(sizes)
    )
    return Items(items, len(items))


class Reads:
    """A page read, recording what the budget held when it was asked for."""

    def __init__(self, budget: BodyBudget, items: Items) -> None:
        self.budget, self.items = budget, items
        self.in_use: list[int] = []

    async def __call__(self) -> Items:
        self.in_use.append(self.budget.budget.in_use)
        return self.items


async def test_a_page_being_read_takes_its_byte_bound_once():
    budget = BodyBudget(HELD + PAGE)
    async with budget.hold() as first, budget.hold() as second:
        await first.read(Reads(budget, page(HELD)), PAGE)
        assert budget.budget.in_use == HELD
        reads = Reads(budget, page(PAGE // 2))
        reading = asyncio.create_task(second.read(reads, PAGE))
        await asyncio.sleep(0)  # one turn of the loop: the read begins, or waits for room
        # Room for the bound once beside the first page's items: read at once (it took
        # twice its bound, and waited for the first page's items to be written).
        assert reads.in_use == [HELD + PAGE], budget.budget.waiting
        await reading
        assert budget.budget.in_use == HELD + PAGE // 2 and first.held + second.held == (
            budget.budget.in_use
        )
    assert budget.budget.in_use == 0


async def test_a_page_past_what_the_budget_has_left_waits_until_bodies_are_written():
    budget = BodyBudget(HELD + PAGE - 1)
    async with budget.hold() as first, budget.hold() as second:
        written = await first.read(Reads(budget, page(HELD)), PAGE)
        reads = Reads(budget, page(PAGE))
        reading = asyncio.create_task(second.read(reads, PAGE))
        await asyncio.sleep(0)
        assert reads.in_use == [] and budget.budget.waiting == 1  # waits, never refused
        first.release(written.items)  # the first page's items written: room for the next
        got = await reading
        assert reads.in_use == [PAGE] and got.items and second.held == PAGE
    assert budget.budget.in_use == 0
