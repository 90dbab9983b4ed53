"""Automatic failover: each node watches the actives of the passive copies it hosts.

When a passive copy has lost its active and the active's lease has expired in the cluster
store, or it has not reached its active for `failover_after` (`failover_due`), the node
reads the cluster store's active record, asks every copy of the database for its status,
and decides (`failover_policy.decide_failover`, pure): only if the active is really gone and
this node's copy is the best one does it activate it, through the same path an operator's
`activate` takes: AutoDatabaseMountDial bounds the logs lost, the cluster store refuses
while the old active's lease is live, and its compare-and-set on the epoch lets only one
activation win.  Every pass returns the sentences of what it decided, and logs them.

Each pass first reads whether an operator paused automatic failover (`cluster pause`): a
paused cluster decides nothing automatically (`failover_policy.FailoverVerdict.PAUSED`), and
the node's status says the pause as it last read it (`pause`).

The monitor sees the copies it watches as `WatchedCopy` (a `PassiveCopy` is one), asks the
other nodes through a `Peers`, activates through an `Activation`, and reads time from the
injected clock: a test drives it with fakes and a manual clock, pass by pass (`check_once`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Protocol

from dag_common.clock import Clock
from dag_common.cluster_store.interface import ActivationCause, ClusterStore, FailoverPause
from dag_common.config import ClusterConfig
from dag_common.errors import ClusterStoreError, RequestError, StoreConflict
from dag_common.model import CopyStatusReport
from replication_node.cluster.activation import Activation
from replication_node.cluster.failover_policy import (
    FailoverVerdict,
    decide_failover,
    failover_due,
    needs_lease_check,
)
from replication_node.cluster.mount_policy import MOUNTABLE
from replication_node.cluster.peers import Peers
from replication_node.errors import LeaseHeld, MountRefused, ReplicationError
from replication_node.passive.markers import Markers

logger = logging.getLogger(__name__)

CHECK_INTERVAL = 1.0
"""Seconds between two failover passes of a node (each reads the pause and decides)."""


class WatchedCopy(Protocol):
    """What the monitor reads of a passive copy (`PassiveCopy`), and the one thing it
    sets: the lost active whose last logs the copy waits for, said in its status."""

    markers: Markers
    awaiting_last_logs_from: str | None

    def status(self) -> CopyStatusReport: ...


class FailoverMonitor:
    """Runs the failover checks of one node every `interval` seconds."""

    def __init__(
        self,
        *,
        node: str,
        config: Callable[[], ClusterConfig],
        passive_copies: Callable[[], dict[str, WatchedCopy]],
        following: Callable[[str], str | None],
        cluster_store: ClusterStore,
        peers: Peers,
        activation: Activation,
        clock: Clock,
        interval: float = CHECK_INTERVAL,
    ) -> None:
        self._node = node
        self._config = config
        self._passive_copies = passive_copies
        self._following = following  # the active node a passive copy of `database` follows
        self._cluster_store = cluster_store
        self._peers = peers
        self._activation = activation
        self._clock = clock
        self._interval = interval
        self.errors = 0
        self._said: set[str] = set()
        # The pause of automatic failover as last read (None: not paused, or not read yet).
        self.pause: FailoverPause | None = None

    async def run(self) -> None:
        """A failover pass every `interval` seconds on the clock, until cancelled."""
        while True:
            await self._clock.sleep(self._interval)
            try:
                decisions = await self.check_once()
                # Each decision is logged when it is first taken, not again every pass while
                # it stands (a Lossless wait can last hours).
                for decision in decisions:
                    if decision not in self._said:
                        logger.warning("failover: %s", decision)
                self._said = set(decisions)
            except Exception:
                self.errors += 1
                logger.exception("failover check failed (%d so far)", self.errors)

    async def check_once(self) -> list[str]:
        """One pass over this node's passive copies; what was decided, as sentences."""
        # Read every pass, whether or not a failover is due, for the node's status.  A store
        # that cannot be read leaves the last reading: no activation gets past it then, and
        # the store's own check refuses an automatic one while paused.
        try:
            self.pause = await self._cluster_store.failover_pause()
        except Exception as exc:
            logger.debug("cannot read whether automatic failover is paused: %s", exc)
        config = self._config()
        after = config.defaults.failover_after
        if after is None:
            return []
        decisions = []
        for database, copy in self._passive_copies().items():
            status, since = copy.status().status, copy.markers.disconnected_since
            if since is None and status in MOUNTABLE:
                copy.awaiting_last_logs_from = None  # its active is back and mounted
            lease_live = True
            if copy.markers.reached and needs_lease_check(
                status=status, disconnected_since=since, after=after
            ):
                lease_live = await self._lease_live(database)
            if failover_due(
                status=status,
                disconnected_since=since,
                now=self._clock.monotonic(),
                after=after,
                lease_live=lease_live,
            ):
                decisions.append(await self._consider(database))
        return decisions

    async def _lease_live(self, database: str) -> bool:
        """Whether the active this node follows still holds a live lease (True when the
        store cannot say: then `failover_after` decides)."""
        try:
            lease = await self._cluster_store.lease(database)
        except Exception as exc:
            logger.debug("%s: cannot read the active's lease: %s", database, exc)
            return True
        return lease is not None and lease.node == self._following(database)

    async def _consider(self, database: str) -> str:
        record = await self._cluster_store.active(database)
        following = self._following(database)
        reports = {}
        if record is not None and record.node != self._node and record.node == following:
            reports = await self._peers.copy_reports(database)
        decision = decide_failover(
            database=database,
            node=self._node,
            active_node=record.node if record else None,
            active_epoch=record.epoch if record else 0,
            following=following,
            reports=reports,
            paused=self.pause,
        )
        copy = self._passive_copies().get(database)
        if decision.verdict is FailoverVerdict.NOT_BEST and copy is not None:
            copy.awaiting_last_logs_from = None
        if decision.verdict is not FailoverVerdict.ACTIVATE:
            return decision.sentence
        assert record is not None
        try:
            result = await self._activation.activate(
                database, self._node, reports=reports, cause=ActivationCause.AUTOMATIC_FAILOVER
            )
        except MountRefused as exc:
            # Too much would be lost: wait for the lost active's last logs.  Said in this
            # copy's status, so that its node, coming back, holds them for this copy.
            if copy is not None:
                copy.awaiting_last_logs_from = record.node if decision.active_unreachable else None
            return f"{database}: {decision.lost}; not mounted here: {exc}"
        except LeaseHeld as exc:
            # Said without the seconds left, so that the sentence stands while it holds.
            return (
                f"{database}: {decision.lost}; not mounted here: {exc.holder} still holds the "
                "active's lease in the cluster store (it may still acknowledge writes)"
            )
        except (ReplicationError, RequestError, ClusterStoreError, StoreConflict) as exc:
            return f"{database}: {decision.lost}; not mounted here: {exc}"
        if copy is not None:
            copy.awaiting_last_logs_from = None
        return (
            f"{database}: {decision.lost}; mounted on {self._node} at epoch "
            f"{result.epoch}: {result.reason}"
        )
