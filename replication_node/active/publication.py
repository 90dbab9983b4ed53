"""An active copy's record in the cluster store, at its epoch.

Read before every mount (the change-number ceiling in it must be known before any number is
handed out; retried while the store errs) and before a re-mount (is this node still the
active?); written when each generation's open log takes its first commit (announced before
that commit is acknowledged) and when a generation closes (LastLogGenerated, best effort).
Every write is a compare-and-set on this node and epoch: a deposed active's writes are
refused, never applied.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import TypeVar

from dag_common.backoff import Backoff
from dag_common.clock import Clock
from dag_common.cluster_store.interface import ActiveRecord, ClusterStore
from replication_node.errors import Deposed

logger = logging.getLogger(__name__)

T = TypeVar("T")


# A cluster store that errs is asked again after 50 ms, doubling to 5 s.
STORE_RETRY_FIRST, STORE_RETRY_LONGEST = 0.05, 5.0


class ActivePublication:
    """What one active copy reads from and writes to the cluster store."""

    def __init__(
        self, *, cluster_store: ClusterStore, database: str, node: str, epoch: int, clock: Clock
    ) -> None:
        self._store = cluster_store
        self._database = database
        self._node = node
        self._epoch = epoch
        self._clock = clock

    async def record(self) -> ActiveRecord | None:
        """The store's record of the database, retried while the store errs: the
        change-number ceiling in it must be known before any number is handed out."""
        return await self._retried("the cluster store", lambda: self._store.active(self._database))

    async def lost_logs(self) -> int | None:
        """The logs this epoch's activation lost (its history record's `lost_logs`; None:
        not known), retried while the store errs, as `record` is."""

        async def read() -> int | None:
            history = await self._store.history(self._database)
            return next((r.lost_logs for r in history if r.epoch == self._epoch), None)

        return await self._retried("the stream history", read)

    async def _retried(self, what: str, read: Callable[[], Awaitable[T]]) -> T:
        """`read()`, tried again while the store errs (the mount waits on it), a warning
        naming `what` the first time and every tenth."""
        backoff = Backoff(STORE_RETRY_FIRST, STORE_RETRY_LONGEST)
        while True:
            try:
                return await read()
            except Exception as exc:
                wait = backoff.next()
                if backoff.worth_saying():
                    logger.warning(
                        "%s: mount waits: cannot read %s (%d attempt(s)): %s",
                        self._database,
                        what,
                        backoff.failures,
                        exc,
                    )
                await self._clock.sleep(wait)

    async def check_still_active(self) -> None:
        """Deposed if the store no longer names this node the active at its epoch."""
        record = await self._store.active(self._database)
        if record is None or (record.node, record.epoch) != (self._node, self._epoch):
            raise Deposed(
                f"{self._database} is no longer active on {self._node} at epoch {self._epoch}"
            )

    async def announce_open(self, generation: int, ceiling: int) -> bool:
        """Announce that the open log `generation` holds a commit, with the change-number
        ceiling; False if the store names another active.  Store errors propagate."""
        accepted = await self._store.publish_open_generation(
            self._database, self._node, self._epoch, generation, ceiling
        )
        if accepted:
            logger.debug(
                "%s: open generation %d announced (change-number ceiling %d)",
                self._database,
                generation,
                ceiling,
            )
        return accepted

    async def last_log_generated(self, generation: int) -> None:
        """Record LastLogGenerated (best effort: the store may be busy)."""
        try:
            await self._store.publish_last_log_generated(
                self._database, self._node, self._epoch, generation
            )
        except Exception as exc:  # the store being busy must not stop the database
            logger.warning("%s: cannot publish LastLogGenerated: %s", self._database, exc)
