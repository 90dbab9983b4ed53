"""IDLE's long polls shared by a front's sessions (`imap_front.feed_polls`): the sessions of
one mailbox at one cursor make one request; one leaving (DONE) leaves it to the others; the
last leaving cancels it.  The node client is a fake peer that answers when told to."""

from __future__ import annotations

import asyncio

import pytest

from dag_common.store_api import Changes
from imap_front.feed_polls import FeedPolls


class FakeFeed:
    """`changes` as the node client has it: each call waits until `answer` is set."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, int]] = []
        self.cancelled = 0
        self.answer = asyncio.Event()

    async def changes(self, database, mailbox, since, *, wait, epoch):
        self.calls.append((mailbox, since))
        try:
            await self.answer.wait()
        except asyncio.CancelledError:
            self.cancelled += 1
            raise
        return Changes(mailbox=mailbox, since_change=since, last_change_number=since + 1,
                       changed=True, epoch=epoch or 0, folders=("Inbox",))  # fmt: skip


async def settle() -> None:
    for _ in range(5):  # the tasks started reach their first wait
        await asyncio.sleep(0)


async def test_sessions_at_one_cursor_share_one_request_and_each_gets_its_answer():
    fake = FakeFeed()
    polls = FeedPolls(fake)
    same = [asyncio.ensure_future(polls.changes("DB1", "alice", 7, wait=25, epoch=3))
            for _ in range(3)]  # fmt: skip
    other = asyncio.ensure_future(polls.changes("DB1", "alice", 5, wait=25, epoch=3))
    bob = asyncio.ensure_future(polls.changes("DB1", "bob", 7, wait=25, epoch=3))
    await settle()
    assert sorted(fake.calls) == [("alice", 5), ("alice", 7), ("bob", 7)]
    assert len(polls) == 3
    fake.answer.set()
    answers = await asyncio.gather(*same, other, bob)
    assert [a.last_change_number for a in answers] == [8, 8, 8, 6, 8]
    assert answers[4].mailbox == "bob"
    await settle()
    assert len(polls) == 0


async def test_one_leaving_leaves_the_request_to_the_others_and_the_last_cancels_it():
    fake = FakeFeed()
    polls = FeedPolls(fake)
    a = asyncio.ensure_future(polls.changes("DB1", "alice", 7, wait=25, epoch=3))
    b = asyncio.ensure_future(polls.changes("DB1", "alice", 7, wait=25, epoch=3))
    await settle()
    a.cancel()  # DONE
    await settle()
    assert fake.cancelled == 0 and len(polls) == 1
    b.cancel()
    await settle()
    assert fake.cancelled == 1 and len(polls) == 0
    # a session idling again at that cursor makes a new request
    c = asyncio.ensure_future(polls.changes("DB1", "alice", 7, wait=25, epoch=3))
    await settle()
    assert len(fake.calls) == 2
    fake.answer.set()
    assert (await c).last_change_number == 8
    for t in (a, b):
        with pytest.raises(asyncio.CancelledError):
            await t


async def test_a_failed_request_fails_every_session_waiting_on_it():
    class Failing(FakeFeed):
        async def changes(self, database, mailbox, since, *, wait, epoch):
            self.calls.append((mailbox, since))
            await self.answer.wait()
            raise ConnectionError("the node went away")

    fake = Failing()
    polls = FeedPolls(fake)
    waiting = [asyncio.ensure_future(polls.changes("DB1", "alice", 7, wait=25, epoch=3))
               for _ in range(2)]  # fmt: skip
    await settle()
    fake.answer.set()
    got = await asyncio.gather(*waiting, return_exceptions=True)
    assert [type(g) for g in got] == [ConnectionError, ConnectionError]
    assert len(fake.calls) == 1 and len(polls) == 0
