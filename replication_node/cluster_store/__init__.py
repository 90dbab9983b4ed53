"""The cluster store: which copy of each database is active (with an epoch), the last log
generated per database, and the mailbox directory (which database holds a mailbox).

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


@dataclass(frozen=True, slots=True)
class ActiveRecord:
    """Which node holds the active copy of a database, since which epoch."""

    database: str
    node: str
    epoch: int
    last_log_generated: int
    updated: datetime


class ClusterStore(abc.ABC):
    """The shared state of the cluster; every method is safe to call from several processes."""

    @abc.abstractmethod
    async def active(self, database: str) -> ActiveRecord | None:
        """The active copy of `database`, or None if none was ever chosen."""

    @abc.abstractmethod
    async def set_active(
        self, database: str, node: str, *, expected_epoch: int
    ) -> ActiveRecord | None:
        """Make `node` active if the epoch is still `expected_epoch` (0: never set).
        Returns the new record, or None if someone else changed it first."""

    @abc.abstractmethod
    async def publish_last_log_generated(
        self, database: str, node: str, epoch: int, generation: int
    ) -> bool:
        """Record LastLogGenerated, only if `node` is still active at `epoch`."""

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
        from replication_node.cluster_store.embedded import EmbeddedClusterStore

        return EmbeddedClusterStore(config.cluster_store.path)
    from replication_node.cluster_store.etcd import EtcdClusterStore

    return EtcdClusterStore(config.cluster_store.endpoints, cluster=config.cluster)
