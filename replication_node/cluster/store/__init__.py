"""The cluster store: which copy of each database is active (with an epoch), the history of
epochs (where each one began its stream), the last log generated per database and the open
log at risk, and the mailbox directory (which database holds a mailbox).

One abstract store, one module per engine (as patroni's dcs/): `embedded.py` is a SQLite
file on this machine (the default: every local node process opens the same file); an etcd
engine (`etcd.py`, over etcd's v3 JSON gateway: `etcd_gateway.py`, with TLS and etcd's
authentication) serves nodes on several hosts.

Every write that decides something is a compare-and-set on an epoch or on the previous
value, so two nodes can never both believe they won.

The active holds a lease on its role (`renew_lease`): while another node's lease is live,
`set_active` refuses with LeaseHeld, so that a copy is never activated while the old active
may still acknowledge writes.  An engine's lease expires by its own clock: etcd's leases by
the etcd leader's, the embedded store's by this machine's monotonic clock (with its boot, so
that a lease written before a reboot is not taken for live).  The holder counts its lease
from *before* it asked to renew, by its own monotonic clock, so it always believes it holds
the lease for less time than the store does.

Automatic failover can be paused for maintenance (`pause_failover`, patronictl's pause): one
flag for the whole cluster, with who paused it, when and why.  While it stands, `set_active`
refuses an automatic failover (FailoverPaused) in the same atomic step that would move the
role, so a pause taken while a failover is being decided still stops it; an operator's
activation and a switchover go on.
"""

from __future__ import annotations

import abc
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import TypeVar

from dag_common.config import ClusterConfig, EmbeddedStore
from dag_common.incarnation import ActivationCause, EpochRecord
from dag_common.model import AutoDatabaseMountDial, FailoverPause

__all__ = [
    "ActivationCause",
    "ActiveRecord",
    "ClusterStore",
    "EpochRecord",
    "FailoverPause",
    "LeaseRecord",
    "known_member",
    "open_cluster_store",
]

_E = TypeVar("_E", bound=StrEnum)


def known_member(kind: type[_E], value: str | None) -> _E | None:
    """A stored `value` as a member of `kind`; None for a value not recorded (a record from
    before it was kept), or one this version does not know (written by a newer node)."""
    try:
        return kind(value) if value is not None else None
    except ValueError:
        return None


@dataclass(frozen=True, slots=True)
class LeaseRecord:
    """A live lease on the active role of `database`: held by `node` at `epoch`, for
    `expires_in` more seconds by the store's clock when it was read."""

    database: str
    node: str
    epoch: int
    expires_in: float


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
        kept_through: int | None = None,
        cause: ActivationCause | None = None,
        mount_dial: AutoDatabaseMountDial | None = None,
        lost_logs: int | None = None,
    ) -> ActiveRecord | None:
        """Make `node` active if the epoch is still `expected_epoch` (0: never set).

        In the same atomic step, the new epoch's `EpochRecord` is added to the history: its
        stream begins at `start_generation` (None: not known, recorded as 1, so that no write
        of an earlier epoch is ever taken for surviving).  A known start also begins the new
        record's LastLogGenerated at `start_generation - 1`; the open log at risk starts
        empty; the change-number ceiling carries over.  `kept_through`: the generation
        before the start was kept only through this byte (a block-mode buffer).  `cause`,
        `mount_dial` and `lost_logs` are recorded with it as said (None: unknown), and the
        store's time as its `began`.  Returns the new record, or None if someone else
        changed it first.  LeaseHeld (nothing changed) while a node other than `node` holds
        a live lease on the role; FailoverPaused (nothing changed) for an automatic
        failover while automatic failover is paused."""

    @abc.abstractmethod
    async def renew_lease(self, database: str, node: str, epoch: int, ttl: float) -> bool:
        """Grant or extend `node`'s lease on the active role of `database` for `ttl` seconds
        from now, only if `node` is the active at `epoch` and no other node holds a live
        lease; False otherwise (the caller must stop acknowledging)."""

    @abc.abstractmethod
    async def release_lease(self, database: str, node: str, epoch: int) -> None:
        """End `node`'s lease at `epoch` now (a switchover, a clean dismount); nothing if it
        holds none."""

    @abc.abstractmethod
    async def lease(self, database: str) -> LeaseRecord | None:
        """The live lease on the active role of `database`, or None."""

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
    async def failover_pause(self) -> FailoverPause | None:
        """The pause of automatic failover in force, or None."""

    @abc.abstractmethod
    async def pause_failover(self, pause: FailoverPause) -> bool:
        """Pause automatic failover as `pause` says; False (nothing changed) if it is
        paused already."""

    @abc.abstractmethod
    async def resume_failover(self) -> FailoverPause | None:
        """End the pause of automatic failover: the pause ended, or None if there was none."""

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

    async def aclose(self) -> None:
        """Release the store from async code, waiting for what close() can only schedule
        (etcd's HTTP session)."""
        self.close()


def open_cluster_store(config: ClusterConfig) -> ClusterStore:
    """The store the config names; ConfigError if a file it names (etcd's CA, client
    certificate, password) is missing or unusable."""
    if isinstance(config.cluster_store, EmbeddedStore):
        from replication_node.cluster.store.embedded import EmbeddedClusterStore

        return EmbeddedClusterStore(config.cluster_store.path)
    from replication_node.cluster.store.etcd import EtcdClusterStore
    from replication_node.cluster.store.etcd_gateway import open_gateway

    return EtcdClusterStore(open_gateway(config.cluster_store), cluster=config.cluster)
