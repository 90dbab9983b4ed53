"""Automatic failover: each node watches the actives of the passive copies it hosts.

When a passive copy has not reached its active for `failover_after`, the node asks every
copy of the database for its status.  If the active is really gone (its node does not report
it Mounted) and `activation.best_copy` names this node's copy (it has inspected the most;
ties go to the lower activation preference), the node activates it through the same path an
operator's `activate` takes: AutoDatabaseMountDial bounds the logs lost, and the cluster
store's compare-and-set on the epoch lets only one activation win.  Every pass returns the
sentences of what it decided, and logs them.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import aiohttp

from dag_common.clock import Clock
from dag_common.config import ClusterConfig
from dag_common.model import CopyStatus
from replication_node.cluster.activation import (
    MOUNTABLE,
    activate_copy,
    best_copy,
    copy_reports,
)
from replication_node.cluster.store import ClusterStore
from replication_node.errors import MountRefused, ReplicationError
from replication_node.passive.copy import PassiveCopy

logger = logging.getLogger(__name__)


class FailoverMonitor:
    """Runs the failover checks of one node every `interval` seconds."""

    def __init__(
        self,
        *,
        node: str,
        config: Callable[[], ClusterConfig],
        passive_copies: Callable[[], dict[str, PassiveCopy]],
        following: Callable[[str], str | None],
        cluster_store: ClusterStore,
        session: aiohttp.ClientSession,
        token: str,
        clock: Clock,
        interval: float = 1.0,
    ) -> None:
        self._node = node
        self._config = config
        self._passive_copies = passive_copies
        self._following = following  # the active node a passive copy of `database` follows
        self._cluster_store = cluster_store
        self._session = session
        self._token = token
        self._clock = clock
        self._interval = interval
        self.errors = 0
        self._said: set[str] = set()

    async def run(self) -> None:
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
        config = self._config()
        after = config.defaults.failover_after
        if after is None:
            return []
        decisions = []
        for database, copy in self._passive_copies().items():
            if copy.status().status not in MOUNTABLE:
                continue  # suspended, failed or seeding: not a copy to mount
            since = copy.markers.disconnected_since
            if since is None:
                copy.awaiting_last_logs_from = None  # its active is back and mounted
                continue
            if self._clock.monotonic() - since < after.total_seconds():
                continue
            decisions.append(await self._consider(config, database))
        return decisions

    async def _consider(self, config: ClusterConfig, database: str) -> str:
        record = await self._cluster_store.active(database)
        if record is None or record.node == self._node:
            return f"{database}: no active to replace"
        following = self._following(database)
        if record.node != following:
            # Another copy was activated since this one lost its active: the lost one is
            # replaced already.  The new active may still be mounting; this copy follows it
            # at its next reconcile, and only a loss of *that* active, for failover_after,
            # is a reason to fail over again.
            return (
                f"{database}: {following} was lost and {record.node} is active now (epoch "
                f"{record.epoch}); this copy follows it, no failover"
            )
        reports = await copy_reports(self._session, config, self._token, database)
        old = reports.get(record.node)
        if old is not None and old.status is CopyStatus.MOUNTED:
            return f"{database}: the active on {record.node} answers its peers; no failover"
        if old is not None and old.status is CopyStatus.DISMOUNTED and old.held_for is None:
            # An operator's dismount is maintenance, not a failure (Exchange does not fail
            # over an administrative dismount either); `db mount` or an activation ends it.
            # A copy back after a crash that holds its last logs for a copy is not that.
            return f"{database}: dismounted on {record.node} by an operator; no failover"
        copy = self._passive_copies().get(database)
        lost = (
            f"{record.node} is lost"
            if old is None
            else f"the active on {record.node} is {old.status}"
        )
        chosen, why = best_copy([r for r in reports.values() if r is not None])
        if chosen != self._node:
            if copy is not None:
                copy.awaiting_last_logs_from = None
            return f"{database}: {lost}; {why}: not this node's to mount"
        try:
            result = await activate_copy(
                config=config,
                cluster_store=self._cluster_store,
                session=self._session,
                token=self._token,
                database=database,
                node=self._node,
            )
        except MountRefused as exc:
            # Too much would be lost: wait for the lost active's last logs.  Said in this
            # copy's status, so that its node, coming back, holds them for this copy.
            if copy is not None:
                copy.awaiting_last_logs_from = record.node if old is None else None
            return f"{database}: {lost}; not mounted here: {exc}"
        except ReplicationError as exc:
            return f"{database}: {lost}; not mounted here: {exc}"
        if copy is not None:
            copy.awaiting_last_logs_from = None
        return (
            f"{database}: {lost}; mounted on {self._node} at epoch "
            f"{result['epoch']}: {result['reason']}"
        )
