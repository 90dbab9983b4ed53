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
from collections.abc import AsyncIterator, Callable

from dag_common.clock import Clock
from dag_common.tasks import cancel_and_wait
from mrs_client.errors import MoveBusy
from mrs_client.move_store.interface import LeaseLost, MoveHolder, MoveLease, MoveStore

logger = logging.getLogger(__name__)

# Seconds a move lease lasts in the store unless renewed; renewed every third of it.
LEASE_TTL = 15.0
# Waiting for a holder that may be dead: how often its lease is read again, and how much
# longer its remaining time must have grown to count as renewed (the stores round).
_WAIT_STEP = 1.0
_RENEWED = 0.5


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
            await self._clock.sleep(max(0.0, min(self._ttl / 3, self.left())))
            if self.left() <= 0:  # woken late: paused (SIGSTOP, a frozen VM) or starved
                return self._lose(f"the lease ran out {-self.left():.1f} s before it was renewed")
            asked = self._clock.monotonic()
            try:
                async with asyncio.timeout(max(0.0, self.left())):
                    renewed = await self._store.renew(self._lease, self._ttl)
            except TimeoutError:
                return self._lose("the store did not answer before the lease ran out")
            except Exception as exc:  # the store refused or cannot be reached: try again
                logger.warning("move %s: renewing its lease: %s", self._lease.move_id, exc)
                if self.left() <= 0:
                    return self._lose(f"the lease ran out: {exc}")
                continue
            if not renewed:
                return self._lose("the store says the lease is over")
            self._deadline = asked + self._ttl

    def left(self) -> float:
        return self._deadline - self._clock.monotonic()

    def _lose(self, why: str) -> None:
        self.lost = why
        logger.warning(
            "move %s: lease of %s lost: %s", self._lease.move_id, self._lease.worker, why
        )
        self._owner.cancel(f"lease lost: {why}")


# The keeper of each lease held in this process, by token: `seconds_left` reads its count.
_KEEPERS: dict[str, _Keeper] = {}


def seconds_left(lease: MoveLease) -> float | None:
    """How long this process may still act under `lease`, by its own count (None: not a
    lease `hold` keeps here).  Checked before each node call (`Gates.node_call`): after a
    pause (SIGSTOP, a VM frozen) the move's own continuation may run before the keeper does,
    and must not write past the lease."""
    keeper = _KEEPERS.get(lease.token)
    return None if keeper is None else keeper.left()


def _who(held: MoveHolder | None) -> str:
    if held is None:
        return "a worker whose lease just ended"
    return f"{held.worker} (its lease ends in {held.expires_in:.0f} s unless renewed)"


async def _after_dead_holder(
    store: MoveStore,
    move_id: str,
    worker: str,
    *,
    clock: Clock,
    ttl: float,
    notify: Callable[[str], None],
) -> tuple[float, MoveLease | None]:
    """Wait for a lease nobody renews to end, then claim: (when asked, the lease), or
    (_, None) as soon as the holder renews (it is alive and running the move)."""
    held = await store.holder(move_id)
    if held is not None:
        notify(
            f"move {move_id}: held by {held.worker}; waiting up to {held.expires_in:.0f} s "
            "for its lease to end (a live holder renews it, and then this stops)"
        )
    while True:
        if held is not None:
            await clock.sleep(min(_WAIT_STEP, max(held.expires_in, 0.0) + 0.05))
        asked = clock.monotonic()
        lease = await store.claim(move_id, worker, ttl)
        if lease is not None:
            return asked, lease
        now = await store.holder(move_id)
        if now is None:
            held = None  # it ended between the claim and the read: claim again
            continue
        if held is not None and (
            now.worker != held.worker or now.expires_in > held.expires_in + _RENEWED
        ):
            return asked, None  # renewed, or taken by another: a live holder
        held = now


@contextlib.asynccontextmanager
async def hold(
    store: MoveStore,
    move_id: str,
    worker: str,
    *,
    clock: Clock,
    ttl: float = LEASE_TTL,
    wait_for_dead_holder: bool = False,
    notify: Callable[[str], None] = lambda _: None,
) -> AsyncIterator[MoveLease]:
    """Run the body under the move's lease: MoveBusy if another holder has it; LeaseLost
    (the body cancelled) if it is lost on the way; released at the end.

    `wait_for_dead_holder` (an operator's `mrs resume` after a kill -9): a holder that does
    not renew its lease is waited for until the lease ends (saying so through `notify`);
    one that renews is running the move, and MoveBusy comes as soon as that is seen."""
    asked = clock.monotonic()
    lease = await store.claim(move_id, worker, ttl)
    if lease is None and wait_for_dead_holder:
        asked, lease = await _after_dead_holder(
            store, move_id, worker, clock=clock, ttl=ttl, notify=notify
        )
    if lease is None:
        held = await store.holder(move_id)
        raise MoveBusy(f"move {move_id} is being run by another worker, {_who(held)}")
    owner = asyncio.current_task()
    assert owner is not None
    keeper = _Keeper(store, lease, clock=clock, ttl=ttl, asked_at=asked, owner=owner)
    renewing = asyncio.create_task(keeper.run(), name=f"lease {move_id}")
    _KEEPERS[lease.token] = keeper
    try:
        yield lease
    except asyncio.CancelledError:
        if keeper.lost is None:
            raise
        owner.uncancel()
        raise LeaseLost(f"move {move_id}: {keeper.lost}; stopped") from None
    finally:
        _KEEPERS.pop(lease.token, None)
        renewing.cancel()  # at once: from here on the keeper cancels nothing
        await cancel_and_wait([renewing])
        if keeper.lost is None:
            with contextlib.suppress(Exception):  # an unreachable store: the lease expires
                await store.release(lease)
