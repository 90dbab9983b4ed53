"""The mailbox directory as the transport reads it: the cluster store, remembered briefly.

Every submission checks its recipients and every delivery resolves its mailbox; asking the
cluster store each time is a round trip (etcd) or a hop to its thread (the embedded file)
per message.  An answer is kept for `ttl` seconds (TTL), which a stale answer cannot hurt:
a delivery to a database the mailbox has left is answered 404, after which the delivery
asks the store afresh (`fresh`).  A mailbox the directory does not know is not remembered,
so one created a moment ago is found at once.

An SMTP or LMTP recipient may be one of several mailboxes, asked in order
(`mail_policy.mailboxes_of`: `bob@example.org` itself, then `bob`); which one it is, is kept
for TTL too (`first_of`).  Without it every RCPT asked the store for the address itself,
which is nearly never a mailbox and, unknown, never remembered: a store round trip each,
~0.1 ms of the transport's CPU a message; remembered, 4 KiB LMTP runs 11.6 % more
messages/s (bench/README.md, "lmtp: the recipient's mailbox remembered").  The price: a
mailbox given an address's own name takes that address's mail from the mailbox of its
local part within TTL, not at once (as a move is followed within TTL).  A recipient none
of whose mailboxes exists is still not remembered.
"""

from __future__ import annotations

from collections.abc import Sequence

from dag_common.clock import Clock
from transport.delivery import Directory

TTL = 2.0


class CachedDirectory:
    def __init__(self, store: Directory, clock: Clock, ttl: float = TTL) -> None:
        self._store = store
        self._clock = clock
        self._ttl = ttl
        self._known: dict[str, tuple[str, float]] = {}  # mailbox -> (database, until)
        self._first: dict[tuple[str, ...], tuple[str, float]] = {}  # names -> (one, until)

    async def mailbox_database(self, mailbox: str) -> str | None:
        known = self._known.get(mailbox)
        if known is not None and self._clock.monotonic() < known[1]:
            return known[0]
        return await self.fresh(mailbox)

    async def first_of(self, names: Sequence[str]) -> tuple[str, str] | None:
        """The first of `names` the directory has, and its database; None: none of them
        (not remembered).  Which one it was is kept for TTL (see the module); its database
        is `mailbox_database`'s, so that a delivery's `fresh` answer is the one given."""
        key = tuple(names)
        known = self._first.get(key)
        gone = None  # the one remembered, which the store just said is no more
        if known is not None and self._clock.monotonic() < known[1]:
            database = await self.mailbox_database(known[0])
            if database is not None:
                return known[0], database
            gone = known[0]
        for name in names:
            if name == gone:  # not asked twice in a row
                continue
            database = await self.mailbox_database(name)
            if database is not None:
                if len(self._first) > 100_000:  # bounded: forget everything, ask again
                    self._first.clear()
                self._first[key] = (name, self._clock.monotonic() + self._ttl)
                return name, database
        self._first.pop(key, None)
        return None

    async def fresh(self, mailbox: str) -> str | None:
        """The store's answer now (and remembered)."""
        database = await self._store.mailbox_database(mailbox)
        if database is None:
            self._known.pop(mailbox, None)
        else:
            if len(self._known) > 100_000:  # bounded: forget everything, ask again
                self._known.clear()
            self._known[mailbox] = (database, self._clock.monotonic() + self._ttl)
        return database
