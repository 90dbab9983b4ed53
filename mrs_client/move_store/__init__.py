"""The move store: move requests and batches in the cluster store, as Exchange keeps move
requests in the database rather than with the MRS instance that runs them.

One abstract store (`interface.py`), one module per engine, as the cluster store has:
`embedded.py` keeps them in the cluster store's SQLite file (one host), `etcd.py` under the
cluster's prefix in etcd (workers on many hosts), each with what the cluster store's engines
share (`dag_common.cluster_store.engine`).  The records and the store are the interface's,
imported from it by the engines and the mover alike; this package only chooses the engine
(`open_move_store`).  `mrs` list, show, stats, suspend,
resume and cancel read and write the same records from any host that has the config.

**Who runs a move.** A move runs only under a *move lease* (`claim`): a worker's id and a
token, live for a ttl by the store's clock, renewed by its holder (`renew`), ended by
`release` or by expiry.  Every save of a move record is fenced by the lease
(`save(..., lease=)`): the store refuses it with `LeaseLost` (nothing written) unless that
lease is the live one, so a worker cut off from the store, or paused past its lease, cannot
overwrite what the worker that took the move over wrote.  The holder counts its lease from
*before* it asked for it, by its own monotonic clock, and stops the move when that runs out
(`lease.LeaseKeeper`): it always believes it holds the lease for less time than the store
does, so it stops before another worker can take the move.

A mailbox is in one unfinished move only: `create` claims each mailbox of the requests it
records, all or none, and a move's claims are released when it is saved Completed or
Cancelled.

An operator's request to stop a move (`mrs suspend`, `mrs cancel`, `mrs batch suspend`) is a
row of its own (`request_stop`), read by the running mover at its safe points, as before.
"""

from __future__ import annotations

from dag_common.config import ClusterConfig
from dag_common.config_store import EmbeddedStore
from mrs_client.move_store.interface import MoveStore


def open_move_store(config: ClusterConfig) -> MoveStore:
    """The move store in the cluster store the config names."""
    # Imported here so that a process loads only the engine it runs on.
    if isinstance(config.cluster_store, EmbeddedStore):
        from mrs_client.move_store.embedded import EmbeddedMoveStore

        return EmbeddedMoveStore(config.cluster_store.path)
    from dag_common.cluster_store.etcd_gateway import open_gateway
    from mrs_client.move_store.etcd import EtcdMoveStore

    return EtcdMoveStore(open_gateway(config.cluster_store), cluster=config.cluster)
