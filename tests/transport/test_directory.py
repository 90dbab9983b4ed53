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


async def test_the_mailbox_an_address_is_is_asked_of_the_store_once_a_ttl():
    """An RCPT's candidates: the address itself (never a mailbox here), then its local part.
    The address is asked of the store again only once the TTL has passed, not at every
    RCPT (it is unknown, and an unknown name alone is never remembered)."""
    store, clock = Store(), ManualClock()
    directory = CachedDirectory(store, clock, ttl=2.0)
    store.placed["bob"] = "DB1"
    names = ["bob@example.org", "bob"]
    assert await directory.first_of(names) == ("bob", "DB1") and store.asked == 2
    for _ in range(5):
        assert await directory.first_of(names) == ("bob", "DB1")
    assert store.asked == 2, "the address asked once, not at every RCPT"
    await clock.advance(2.1)
    assert await directory.first_of(names) == ("bob", "DB1") and store.asked == 4


async def test_an_address_none_of_whose_mailboxes_exists_is_not_remembered():
    store, clock = Store(), ManualClock()
    directory = CachedDirectory(store, clock)
    names = ["carol@example.org", "carol"]
    assert await directory.first_of(names) is None
    store.placed["carol@example.org"] = "DB2"  # created a moment later
    assert await directory.first_of(names) == ("carol@example.org", "DB2")
    assert await directory.first_of([]) is None, "an address no mailbox can be named as"


async def test_a_mailbox_named_as_the_address_takes_its_mail_within_the_ttl():
    """The price of remembering which mailbox an address is: a mailbox given the address's
    own name beside the local part's takes its mail once the TTL has passed; one moved is
    followed as `fresh` says."""
    store, clock = Store(), ManualClock()
    directory = CachedDirectory(store, clock, ttl=2.0)
    store.placed["bob"] = "DB1"
    names = ["bob@example.org", "bob"]
    assert await directory.first_of(names) == ("bob", "DB1")
    store.placed["bob@example.org"] = "DB2"
    assert await directory.first_of(names) == ("bob", "DB1"), "within the TTL: as it was"
    store.placed["bob"] = "DB3"  # moved; a delivery's 404 asks afresh
    assert await directory.fresh("bob") == "DB3"
    assert await directory.first_of(names) == ("bob", "DB3"), "the database fresh found"
    await clock.advance(2.1)
    assert await directory.first_of(names) == ("bob@example.org", "DB2")
    del store.placed["bob@example.org"]  # gone: the next one, once its answer is old
    await clock.advance(2.1)
    assert await directory.first_of(names) == ("bob", "DB3")


async def test_a_mailbox_remembered_for_an_address_and_removed_is_asked_of_the_store_once():
    """The mailbox an address was found to be is deleted within the TTL: the store, asked
    for it, says it is gone, and the address's other names are asked; not it a second
    time."""
    store, clock = Store(), ManualClock()
    directory = CachedDirectory(store, clock, ttl=2.0)
    store.placed["bob@example.org"] = "DB1"
    names = ["bob@example.org", "bob"]
    assert await directory.first_of(names) == ("bob@example.org", "DB1")
    del store.placed["bob@example.org"]
    await directory.fresh("bob@example.org")  # a delivery's 404: asked afresh, gone
    store.placed["bob"] = "DB2"
    asked = store.asked
    assert await directory.first_of(names) == ("bob", "DB2")
    assert store.asked == asked + 2, "the address once (it is gone), then its local part"
