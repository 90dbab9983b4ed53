"""The change feed of one mounted active copy: which mailboxes changed above a change
number, and the waiters to wake when one does (`GET …/mailboxes/{mb}/changes`,
`http/changes_routes.py`).

Fed by the instance's stream listener (`ActiveInstance._on_event`), which the log stream
calls for each durable transaction after the copy's own listener added it to the LLR overlay
(`ActiveCopy._on_event`, registered first) and before its committer is answered: when a
waiter wakes, what woke it is visible to every read.  Nothing here polls.

What it knows, from the transactions of this mount:
- for each mailbox one touched, the change number of the last (numbers grow in log order, so
  that is the mailbox's highest), and of each of its folders the last that named it;
- `visible`: every change number at or below it that this copy will ever show, it shows
  (numbers are handed out in log order and every one handed out is written: `copy.py`).

Of what came before the mount it knows only `floor` (the copy's highest change number then):
a question about a change number below it is the store's to answer (the route asks it).

Waiters: one `asyncio.Event` each, kept under its mailbox; a transaction sets the events of
the mailboxes it touches and no other; `end` (the copy stops being the mounted active) sets
every one.  A woken waiter looks again at the copy and the feed: the event says only "look".
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator

from replication_node.log.events import Transaction
from replication_node.log.operations import (
    CreateMailbox,
    DeleteItem,
    DeleteMailbox,
    Operation,
    PutItem,
    RecordBackup,
    last_cn,
)

# The folder an item is in (None: not known), read where the overlay has it.
FolderOf = Callable[[str, str], str | None]


def _folders_named(op: Operation, folder_of: FolderOf) -> Iterator[str]:
    """The folders an operation changes: the one it names (`folder`, and `to` for one that
    moves or renames), every folder of a new mailbox, a deleted item's own."""
    if isinstance(op, CreateMailbox):
        yield from op.folders
    elif isinstance(op, DeleteItem):
        folder = folder_of(op.mailbox, op.item_id)
        if folder is not None:
            yield folder
    for field in ("folder", "to"):
        value = getattr(op, field, None)
        if isinstance(value, str):
            yield value


class ChangeFeed:
    """The changes of one mount of an active copy, and who waits on them."""

    def __init__(self, *, floor: int, folder_of: FolderOf) -> None:
        self.floor = floor
        self.visible = floor
        self.ended = False
        self._folder_of = folder_of
        self._last: dict[str, int] = {}
        self._folders: dict[str, dict[str, int]] = {}
        self._waiting: dict[str, set[asyncio.Event]] = {}

    @property
    def waiting(self) -> int:
        """Waiters registered now."""
        return sum(len(events) for events in self._waiting.values())

    def observe(self, txn: Transaction) -> None:
        """A transaction became visible: note what it changed, wake its mailboxes' waiters."""
        touched: set[str] = set()
        for op in txn.ops:
            if type(op) is PutItem:  # nearly every operation: what the loop below finds
                cn, mailbox = op.cn, op.mailbox
                self.visible = max(self.visible, cn)
                self._last[mailbox] = cn
                touched.add(mailbox)
                self._folders.setdefault(mailbox, {})[op.folder] = cn
                continue
            if isinstance(op, RecordBackup):
                continue
            # Read by name: an operation of one mailbox has both; one of none (a database's
            # own) wakes nobody here.
            mailbox, cn = getattr(op, "mailbox", None), getattr(op, "cn", None)
            if not isinstance(cn, int):
                continue
            cn = last_cn(op)  # an operation numbering several items: the last of them
            self.visible = max(self.visible, cn)
            if not isinstance(mailbox, str):
                continue
            self._last[mailbox] = cn
            touched.add(mailbox)
            if isinstance(op, DeleteMailbox):
                self._folders.pop(mailbox, None)  # its folders are gone with it
                continue
            for folder in _folders_named(op, self._folder_of):
                self._folders.setdefault(mailbox, {})[folder] = cn
        for mailbox in touched:
            for event in self._waiting.pop(mailbox, ()):
                event.set()

    def last_seen(self, mailbox: str) -> int:
        """The change number of the mailbox's last change this mount saw (0: none)."""
        return self._last.get(mailbox, 0)

    def folders_above(self, mailbox: str, since: int) -> set[str]:
        """The folders of the mailbox that this mount saw change above `since`."""
        return {f for f, cn in self._folders.get(mailbox, {}).items() if cn > since}

    def register(self, mailbox: str) -> asyncio.Event:
        """A waiter on `mailbox`: its event is set by the mailbox's next change, or `end`."""
        event = asyncio.Event()
        if self.ended:
            event.set()
        else:
            self._waiting.setdefault(mailbox, set()).add(event)
        return event

    def unregister(self, mailbox: str, event: asyncio.Event) -> None:
        """The waiter is done (answered, or its caller gone)."""
        events = self._waiting.get(mailbox)
        if events is not None:
            events.discard(event)
            if not events:
                del self._waiting[mailbox]

    def end(self) -> None:
        """The copy is no longer this mount's mounted active: wake every waiter, take none."""
        self.ended = True
        waiting, self._waiting = self._waiting, {}
        for events in waiting.values():
            for event in events:
                event.set()
