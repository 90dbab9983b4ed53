"""The cluster store: which copy of each database is active (with an epoch), the history of
epochs (where each one began its stream), the last log generated per database and the open
log at risk, and the mailbox directory (which database holds a mailbox).

One abstract store, one module per engine (as patroni's dcs/): `embedded.py` is a SQLite
file on this machine (the default: every local node process opens the same file); an etcd
engine (`etcd.py`, over etcd's v3 JSON gateway) serves nodes on several hosts.

Every write that decides something is a compare-and-set on an epoch or on the previous
value, so two nodes can never both believe they won.
"""

from __future__ import annotations

import abc
from dataclasses import dataclass
from datetime import datetime

from dag_common.config import ClusterConfig, EmbeddedStore
from dag_common.incarnation import EpochRecord

__all__ = ["ActiveRecord", "ClusterStore", "EpochRecord", "open_cluster_store"]


@dataclass(frozen=True, slots=True)
class ActiveRecord:
    """Which node holds the active copy of a database, since which epoch.

    `last_log_generated` is the last closed generation the active announced.  `open_generation`
    is the generation of the active's open log once it holds an acknowledged commit (0: none
    announced at this epoch): the active writes it before it acknowledges the first commit of
    each generation, so a copy can count the open log as lost after the active is gone.
    `change_number_ceiling` bounds every change number the active may have handed out (it is
    announced with `open_generation`); a new active numbers above it, so no change number is
    ever used twice across a failover.
    """

    database: str
    node: str
    epoch: int
    last_log_generated: int
    updated: datetime
    open_generation: int = 0
    change_number_ceiling: int = 0

    @property
    def generated_at_risk(self) -> int:
        """The highest generation holding acknowledged commits that the active announced:
        LastLogGenerated counting the open log once it holds an acknowledged commit."""
        return max(self.last_log_generated, self.open_generation)


class ClusterStore(abc.ABC):
    """The shared state of the cluster; every method is safe to call from several processes."""

    @abc.abstractmethod
    async def active(self, database: str) -> ActiveRecord | None:
        """The active copy of `database`, or None if none was ever chosen."""

    @abc.abstractmethod
    async def set_active(
        self,
        database: str,
        node: str,
        *,
        expected_epoch: int,
        start_generation: int | None = None,
    ) -> ActiveRecord | None:
        """Make `node` active if the epoch is still `expected_epoch` (0: never set).

        In the same atomic step, the new epoch's `EpochRecord` is added to the history: its
        stream begins at `start_generation` (None: not known, recorded as 1, so that no write
        of an earlier epoch is ever taken for surviving).  A known start also begins the new
        record's LastLogGenerated at `start_generation - 1`; the open log at risk starts
        empty; the change-number ceiling carries over.  Returns the new record, or None if
        someone else changed it first."""

    @abc.abstractmethod
    async def history(self, database: str) -> list[EpochRecord]:
        """Every epoch of `database` recorded by `set_active`, oldest first."""

    @abc.abstractmethod
    async def publish_last_log_generated(
        self, database: str, node: str, epoch: int, generation: int
    ) -> bool:
        """Record LastLogGenerated, only if `node` is still active at `epoch`."""

    @abc.abstractmethod
    async def publish_open_generation(
        self, database: str, node: str, epoch: int, generation: int, change_number_ceiling: int
    ) -> bool:
        """Announce that the open log `generation` holds an acknowledged commit, with the
        change-number ceiling, only if `node` is still active at `epoch`; never lowers either.
        False if `node` is not the active at `epoch` (it must not acknowledge)."""

    @abc.abstractmethod
    async def mailbox_database(self, mailbox: str) -> str | None:
        """The database holding `mailbox` in the mailbox directory."""

    @abc.abstractmethod
    async def set_mailbox_database(
        self, mailbox: str, database: str, *, expected: str | None
    ) -> bool:
        """Point `mailbox` at `database` if it still points at `expected` (None: absent)."""

    @abc.abstractmethod
    async def mailboxes(self) -> dict[str, str]:
        """The whole mailbox directory."""

    @abc.abstractmethod
    def close(self) -> None:
        """Release the store."""


def open_cluster_store(config: ClusterConfig) -> ClusterStore:
    """The store the config names."""
    if isinstance(config.cluster_store, EmbeddedStore):
        from replication_node.cluster.store.embedded import EmbeddedClusterStore

        return EmbeddedClusterStore(config.cluster_store.path)
    from replication_node.cluster.store.etcd import EtcdClusterStore

    return EtcdClusterStore(config.cluster_store.endpoints, cluster=config.cluster)
