"""The active copy's lease on its role: it acknowledges a commit only while it holds one.

The cluster store grants the lease for `ttl` seconds by its own clock (`renew_lease`) and
refuses to activate another copy while it is live (`LeaseHeld`), so an active cut off from
the store stops acknowledging before another copy can be activated, and no two copies
acknowledge writes in overlapping lease periods.

The holder counts the lease by its own monotonic clock, from *before* it asked, and only for
`SAFETY` of the TTL: whatever the request's delay, and with clock rates that differ by up
to 10 %, it never believes it holds the lease after the store has let it go.

- `run()` renews every ttl/3 (every ttl/10 while renewals fail).  The store answering
  "not the active at this epoch" is final: `lost` is set with `Deposed`.  Failing to reach
  the store sets `failing`; once the lease has surely expired by the store's clock too
  (`ttl / SAFETY` after the last grant was answered), `lost` is set with `LeaseLost` and the
  instance dismounts (a copy may now be activated elsewhere).
- Each renewal waits ttl/3 for the store's answer.  When that deadline wakes late because
  the event loop was held (a long listing, a pause), the store gets as long again as the
  loop took, up to ttl/3 more, before the renewal counts as failed: the loop's delay is not
  the store's, and a grant however late is safe to take, being counted from before the
  request.  A store that does not answer, or answers that the role is gone, still fails it.
- `confirm()` is the log stream's fence, awaited after the fsync and before the answer: with
  the lease unexpired, nothing to do; expired by this clock (a long pause of the process, a
  slow renewal, a test's manual clock jumping), it renews once, there and then: a renewal
  asked after the records were durable and granted proves that no other copy was activated
  meanwhile (activation bumps the epoch, and the renewal checks it).
- `refuse_without_lease()` refuses a write before it is written while renewals fail and the
  lease has run out (a clear 503), rather than writing what cannot be acknowledged, and while
  a switchover hands the role on (`handing_over()` names the target: `SwitchingOver`, 409).
- `release()` ends it at once (a switchover's quiesce, a clean dismount): the copy taking
  over need not wait for it to expire; renewals stop while a switchover hands the role on.

A switchover's order (`switchover.py`): `handing_over()` is set first, so every commit after
it is refused before it is written; the roll that closes the open log is queued behind every
commit admitted before, and each of those is fenced by the lease still held and answered;
only after the roll is the lease released.  The fence never refuses a commit for the
switchover itself: a commit between its fsync and its fence when the quiesce began is
answered, not left durable-and-unanswered with the stream stopped (which dismounted the copy
and sent it through crash recovery under load).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine

from dag_common.clock import Clock
from dag_common.cluster_store.interface import ClusterStore
from replication_node.errors import Deposed, LeaseLost, SwitchingOver

logger = logging.getLogger(__name__)

SAFETY = 0.9  # the share of the TTL the holder counts, from before its request


class LeaseKeeper:
    """Holds, renews and releases one active copy's lease on its role."""

    def __init__(
        self,
        *,
        cluster_store: ClusterStore,
        database: str,
        node: str,
        epoch: int,
        ttl: float,
        clock: Clock,
        handing_over: Callable[[], str | None] = lambda: None,
    ) -> None:
        self._store = cluster_store
        self.database = database
        self._node = node
        self._epoch = epoch
        self.ttl = ttl
        self._clock = clock
        self._handing_over = handing_over  # the target of a switchover under way
        self._released = False  # release() gave it up; a grant takes it again
        self.valid_until: float | None = None  # by this clock; None: not held
        self._granted_at: float | None = None  # when the last grant was answered
        self.failing: str | None = None  # why the last renewal failed, while it does
        self.lost = asyncio.Event()
        self.lost_reason: BaseException | None = None

    # ---- what the copy asks --------------------------------------------------------------

    def held(self) -> bool:
        """Whether the lease is unexpired by this node's clock."""
        return self.valid_until is not None and self._clock.monotonic() < self.valid_until

    def expires_in(self) -> float | None:
        """Seconds left by this node's reckoning (None: not held)."""
        if self.valid_until is None:
            return None
        return max(0.0, self.valid_until - self._clock.monotonic())

    async def acquire(self) -> None:
        """Take or renew the lease now (before a mount): Deposed if the store names another
        active or another node's lease is live, LeaseLost if the store cannot be reached."""
        failure = await self._renew_now()
        if failure is not None:
            raise failure
        self.lost, self.lost_reason = asyncio.Event(), None  # a new mount, a new lease

    async def confirm(self) -> BaseException | None:
        """The fence, after the fsync and before the answer: None if the commit may be
        acknowledged, else why not (LeaseLost, or Deposed)."""
        if self.lost_reason is not None:
            return self.lost_reason
        if self._released and self._handing_over() is not None:
            # Unreachable while the gate holds (commits are refused once a switchover
            # begins, and the lease is released only after the roll behind them): a
            # renewal here would take back the role being handed on.
            return LeaseLost(
                f"{self.database} on {self._node}: a commit reached the fence after the lease "
                "was released for a switchover; it is durable here but not acknowledged"
            )
        if self.held():
            return None
        return await self._renew_now()

    def refuse_without_lease(self) -> None:
        """Before anything is written: LeaseLost while renewals fail and the lease ran out,
        SwitchingOver while a switchover hands the role on."""
        if self.lost_reason is not None:
            raise type(self.lost_reason)(str(self.lost_reason))  # Deposed stays Deposed
        target = self._handing_over()
        if target is not None:
            raise SwitchingOver(f"{self.database} is being switched over to {target}; write there")
        if self.failing is not None and not self.held():
            raise LeaseLost(
                f"{self.database} on {self._node} cannot renew its lease on the active role "
                f"({self.failing}); no write is acknowledged until it does"
            )

    # ---- the renewal loop ----------------------------------------------------------------

    async def run(self) -> None:
        """Renew every ttl/3 until cancelled, or until the lease is lost (`lost` set)."""
        while True:
            await self._clock.sleep(self.ttl / 3 if self.failing is None else self.ttl / 10)
            if self._handing_over() is not None:
                continue
            failure = await self._renew_now()
            if isinstance(failure, Deposed):
                self._lose(failure)
                return
            if failure is not None and self._surely_expired():
                self._lose(
                    LeaseLost(
                        f"{self.database} on {self._node}: the lease on the active role has "
                        f"expired (not renewed for {self._since_grant():.1f}s: {self.failing})"
                    )
                )
                return

    async def release(self) -> None:
        """End the lease now (best effort: unreleased, it expires by itself)."""
        self.valid_until = None
        self._released = True
        try:
            await self._store.release_lease(self.database, self._node, self._epoch)
        except Exception as exc:
            logger.warning(
                "%s: could not release the lease (it expires in %gs by itself): %s",
                self.database,
                self.ttl,
                exc,
            )

    # ---- inside ----------------------------------------------------------------------------

    async def _renew_now(self) -> BaseException | None:
        """One renewal, bounded in time; None if granted, else why not."""
        asked = self._clock.monotonic()
        try:
            granted = await self._answer(
                self._store.renew_lease(self.database, self._node, self._epoch, self.ttl)
            )
        except Exception as exc:
            why = str(exc) or type(exc).__name__
            if self.failing is None:
                logger.warning("%s: cannot renew the active's lease: %s", self.database, why)
            self.failing = why
            return LeaseLost(
                f"{self.database} on {self._node} cannot renew its lease on the active role "
                f"({why}); the commit is durable here but not acknowledged"
            )
        if not granted:
            return Deposed(
                f"{self.database}: the cluster store no longer lets {self._node} hold the active "
                f"role at epoch {self._epoch} (another copy is active or holds the lease)"
            )
        if self.failing is not None:
            logger.warning("%s: the active's lease is renewed again", self.database)
        self.failing = None
        self._released = False
        self.valid_until = max(self.valid_until or 0.0, asked + self.ttl * SAFETY)
        self._granted_at = self._clock.monotonic()
        return None

    async def _answer(self, request: Coroutine[object, object, bool]) -> bool:
        """The store's answer to `request` within ttl/3 of sending it; TimeoutError if none
        came.  A deadline that fires late (the loop was held) gives the store as long again
        as the loop overran, up to ttl/3 more: the store's answer is judged, not the loop's
        delay, and a late grant is safe to take, the lease being counted from before the
        request.  (The loop's own time: it is the loop's lateness that is measured.)"""
        budget = self.ttl / 3
        loop = asyncio.get_running_loop()
        due = loop.time() + budget
        call = asyncio.ensure_future(request)
        try:
            await asyncio.wait({call}, timeout=budget)
            late = loop.time() - due
            if not call.done() and late > 0:
                await asyncio.wait({call}, timeout=min(late, budget))
            if not call.done():
                raise TimeoutError(f"no answer within {budget:g}s")
            return call.result()
        finally:
            call.cancel()  # nothing if answered; a grant still to come is counted by no one
            await asyncio.gather(call, return_exceptions=True)

    def _since_grant(self) -> float:
        return self._clock.monotonic() - (self._granted_at or 0.0)

    def _surely_expired(self) -> bool:
        """Expired by the store's clock as well, whatever its rate (within 1 / SAFETY)."""
        return self._granted_at is None or self._since_grant() > self.ttl / SAFETY

    def _lose(self, reason: BaseException) -> None:
        logger.critical("%s; writes are refused", reason)
        self.valid_until = None
        self.lost_reason = reason
        self.lost.set()
