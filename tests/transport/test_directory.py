"""The transport's view of the mailbox directory: remembered for a moment, never a None."""

from __future__ import annotations

from dag_common.clock import ManualClock
from transport.directory import CachedDirectory


class Store:
    def __init__(self) -> None:
        self.placed: dict[str, str] = {}
        self.asked = 0

    async def mailbox_database(self, mailbox: str) -> str | None:
        self.asked += 1
        return self.placed.get(mailbox)


async def test_an_answer_is_kept_for_its_ttl_and_asked_afresh_after_or_on_demand():
    store, clock = Store(), ManualClock()
    directory = CachedDirectory(store, clock, ttl=2.0)
    store.placed["bob"] = "DB2"
    assert await directory.mailbox_database("bob") == "DB2"
    store.placed["bob"] = "DB1"  # moved
    assert await directory.mailbox_database("bob") == "DB2" and store.asked == 1
    assert await directory.fresh("bob") == "DB1", "after a 404, the store itself"
    store.placed["bob"] = "DB3"
    await clock.advance(2.1)
    assert await directory.mailbox_database("bob") == "DB3"


async def test_an_unknown_mailbox_is_not_remembered():
    store, clock = Store(), ManualClock()
    directory = CachedDirectory(store, clock)
    assert await directory.mailbox_database("carol") is None
    store.placed["carol"] = "DB1"  # created a moment later
    assert await directory.mailbox_database("carol") == "DB1"
