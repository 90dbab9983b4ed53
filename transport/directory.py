"""The mailbox directory as the transport reads it: the cluster store, remembered briefly.

Every submission checks its recipients and every delivery resolves its mailbox; asking the
cluster store each time is a round trip (etcd) or a hop to its thread (the embedded file)
per message.  An answer is kept for `ttl` seconds (TTL), which a stale answer cannot hurt:
a delivery to a database the mailbox has left is answered 404, after which the delivery
asks the store afresh (`fresh`).  A mailbox the directory does not know is not remembered,
so one created a moment ago is found at once.
"""

from __future__ import annotations

from dag_common.clock import Clock
from transport.delivery import Directory

TTL = 2.0


class CachedDirectory:
    def __init__(self, store: Directory, clock: Clock, ttl: float = TTL) -> None:
        self._store = store
        self._clock = clock
        self._ttl = ttl
        self._known: dict[str, tuple[str, float]] = {}  # mailbox -> (database, until)

    async def mailbox_database(self, mailbox: str) -> str | None:
        known = self._known.get(mailbox)
        if known is not None and self._clock.monotonic() < known[1]:
            return known[0]
        return await self.fresh(mailbox)

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
