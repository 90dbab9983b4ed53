"""The cluster store: which copy of each database is active (with an epoch), the history of
epochs (where each one began its stream), the last log generated per database and the open
log at risk, and the mailbox directory (which database holds a mailbox).

One abstract store (`interface.py`), one module per engine (as patroni's dcs/):
`embedded.py` is a SQLite file on this machine (the default: every local node process opens
the same file); an etcd engine (`etcd.py`, over etcd's v3 JSON gateway: `etcd_gateway.py`,
with TLS and etcd's authentication) serves nodes on several hosts.  What a store kept beside
them shares (the mover's move store) is public in `engine.py`.  The stores and
records are the interface's, imported from it by the engines and the store's users alike;
this package only chooses the engine (`open_cluster_store`).

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

The mailbox directory is read with the move holding each mailbox (`mailbox_entry`): the move
store keeps its claims beside the cluster store's records (the same SQLite file, the same etcd
prefix), and the cluster store reads them, never writes them, by the layout named below.

After a lossy activation the new active asks every transport to resubmit, from its transport
dumpster, what it delivered to the database over the window the lost logs may have held
(Exchange's DumpsterRedelivery* properties of the database, kept in the cluster database):
one `RedeliveryRecord` per database, its rules pure (`redelivery_required`,
`redelivery_answered`, `redelivery_ended`), each change one atomic read-modify-write of the
engine (`_change_redelivery`, as patroni's dcs/ keeps its public methods over private
per-engine writes; `set_active` likewise over the engine's `_activate`).
"""

from __future__ import annotations

from dag_common.cluster_store.interface import ClusterStore
from dag_common.config import ClusterConfig
from dag_common.config_store import EmbeddedStore


def open_cluster_store(config: ClusterConfig) -> ClusterStore:
    """The store the config names; ConfigError if a file it names (etcd's CA, client
    certificate, password) is missing or unusable."""
    # Imported here so that a process loads only the engine it runs on.
    if isinstance(config.cluster_store, EmbeddedStore):
        from dag_common.cluster_store.embedded import EmbeddedClusterStore

        return EmbeddedClusterStore(config.cluster_store.path)
    from dag_common.cluster_store.etcd import EtcdClusterStore
    from dag_common.cluster_store.etcd_gateway import open_gateway

    return EtcdClusterStore(open_gateway(config.cluster_store), cluster=config.cluster)
