"""IDLE's long polls of the node's change feed, one per mailbox and cursor for the whole
front, over a connection pool of their own.

Each idling session used to hold its own `GET …/changes?wait=25` on the front's one pool of
connections to the nodes, whose bound is 100: past 100 idlers every other session's calls
(SELECT's state and feed reads, a FETCH's rows and bodies) queued behind polls that end only
when their mailbox changes or after 25 s.  A front opening 1,000 idle sessions on one
mailbox stalled at about 165 (bench/README.md, *imap: 1,000 idle sessions*).  Here:

- the sessions idling on one mailbox at one feed cursor (and epoch) share one request: the
  first starts it, the others wait on its answer (`FeedPolls.changes`).  After a change
  every session of the mailbox resyncs to the same cursor, so they meet again on the next
  poll.  A session that says DONE leaves the request; the last one to leave cancels it.
- the polls go over connections of their own (the node client's `poll_session`, whose
  pool is unbounded: one connection for each mailbox idling), so a command never waits
  behind an idler.  The client is the commands' one: the active it follows a switchover
  to is theirs too (a client of its own for the polls had the commands read the old
  active after the polls had followed the new one).

A shared answer (or failure) is each waiter's own: `Changes` is a frozen value, and each
session takes its own decisions from it (`folders.Folder._poll_until`).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from dag_common.node_client import NodeStoreClient
from dag_common.store_api import Changes

# (database, mailbox, cursor, epoch, wait): what makes two polls the same request
Key = tuple[str, str, int, int | None, float]


@dataclass(eq=False)
class _Poll:
    task: asyncio.Future[Changes | None]
    waiters: int = field(default=0)


class FeedPolls:
    """The front's long polls in flight, keyed by mailbox and cursor; shared by sessions."""

    def __init__(self, nodes: NodeStoreClient) -> None:
        self._nodes = nodes
        self._polls: dict[Key, _Poll] = {}

    def __len__(self) -> int:
        """Requests in flight."""
        return len(self._polls)

    async def changes(
        self, database: str, mailbox: str, since: int, *, wait: float, epoch: int | None
    ) -> Changes | None:
        """`NodeStoreClient.changes`, the request shared with every caller asking the same
        thing meanwhile.  A caller cancelled (DONE) leaves it running for the others."""
        key = (database, mailbox, since, epoch, wait)
        poll = self._polls.get(key)
        if poll is None or poll.task.cancelled():
            task = asyncio.ensure_future(
                self._nodes.changes(database, mailbox, since, wait=wait, epoch=epoch)
            )
            poll = self._polls[key] = _Poll(task)
            task.add_done_callback(lambda _, key=key, poll=poll: self._forget(key, poll))
        poll.waiters += 1
        try:
            return await asyncio.shield(poll.task)
        finally:
            poll.waiters -= 1
            if poll.waiters == 0 and not poll.task.done():
                poll.task.cancel()  # nobody waits on its answer any more
                self._forget(key, poll)

    def _forget(self, key: Key, poll: _Poll) -> None:
        if self._polls.get(key) is poll:
            del self._polls[key]
        if poll.task.done() and not poll.task.cancelled():
            poll.task.exception()  # each waiter raised it already, or none was left to
