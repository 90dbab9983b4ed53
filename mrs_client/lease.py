"""Running a move under its lease: claimed, renewed, and the move stopped the moment the
lease may be over.

The holder counts the lease from *before* each claim or renewal was asked, by its own
monotonic clock; when that deadline passes without a renewal (the store unreachable, the
process paused, the store saying no), the task running the move is cancelled: it stops
before any write past its lease, and `hold` raises LeaseLost.  Since the store's lease began
after the holder's count did, another worker can claim the move only after the holder gave
up.  Each save of the record is fenced by the lease in the store besides (`MoveStore.save`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import uuid
from collections.abc import AsyncIterator

from dag_common.clock import Clock
from dag_common.tasks import cancel_and_wait
from mrs_client.errors import MoveBusy
from mrs_client.move_store import LeaseLost, MoveLease, MoveStore

logger = logging.getLogger(__name__)

# Seconds a move lease lasts in the store unless renewed; renewed every third of it.
LEASE_TTL = 15.0


def worker_id(kind: str = "mrs") -> str:
    """This process as a lease holder: host, pid and a random part (a pid is reused)."""
    return f"{kind}@{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"


class _Keeper:
    """Renews one lease until stopped; cancels `owner` when the lease may be over."""

    def __init__(
        self,
        store: MoveStore,
        lease: MoveLease,
        *,
        clock: Clock,
        ttl: float,
        asked_at: float,
        owner: asyncio.Task[object],
    ) -> None:
        self._store = store
        self._lease = lease
        self._clock = clock
        self._ttl = ttl
        self._deadline = asked_at + ttl
        self._owner = owner
        self.lost: str | None = None

    async def run(self) -> None:
        while True:
            await self._clock.sleep(max(0.0, min(self._ttl / 3, self._left())))
            asked = self._clock.monotonic()
            try:
                async with asyncio.timeout(max(0.0, self._left())):
                    renewed = await self._store.renew(self._lease, self._ttl)
            except TimeoutError:
                return self._lose("the store did not answer before the lease ran out")
            except Exception as exc:  # the store refused or cannot be reached: try again
                logger.warning("move %s: renewing its lease: %s", self._lease.move_id, exc)
                if self._left() <= 0:
                    return self._lose(f"the lease ran out: {exc}")
                continue
            if not renewed:
                return self._lose("the store says the lease is over")
            self._deadline = asked + self._ttl

    def _left(self) -> float:
        return self._deadline - self._clock.monotonic()

    def _lose(self, why: str) -> None:
        self.lost = why
        logger.warning(
            "move %s: lease of %s lost: %s", self._lease.move_id, self._lease.worker, why
        )
        self._owner.cancel(f"lease lost: {why}")


@contextlib.asynccontextmanager
async def hold(
    store: MoveStore, move_id: str, worker: str, *, clock: Clock, ttl: float = LEASE_TTL
) -> AsyncIterator[MoveLease]:
    """Run the body under the move's lease: MoveBusy if another holder has it; LeaseLost
    (the body cancelled) if it is lost on the way; released at the end."""
    asked = clock.monotonic()
    lease = await store.claim(move_id, worker, ttl)
    if lease is None:
        held = await store.holder(move_id)
        who = (
            f"{held.worker} (its lease ends in {held.expires_in:.0f} s unless renewed)"
            if held
            else "a worker whose lease just ended"
        )
        raise MoveBusy(f"move {move_id} is being run by another worker, {who}")
    owner = asyncio.current_task()
    assert owner is not None
    keeper = _Keeper(store, lease, clock=clock, ttl=ttl, asked_at=asked, owner=owner)
    renewing = asyncio.create_task(keeper.run(), name=f"lease {move_id}")
    try:
        yield lease
    except asyncio.CancelledError:
        if keeper.lost is None:
            raise
        owner.uncancel()
        raise LeaseLost(f"move {move_id}: {keeper.lost}; stopped") from None
    finally:
        renewing.cancel()  # at once: from here on the keeper cancels nothing
        await cancel_and_wait([renewing])
        if keeper.lost is None:
            with contextlib.suppress(Exception):  # an unreachable store: the lease expires
                await store.release(lease)
