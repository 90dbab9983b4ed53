"""A node's stop while a reconcile is under way (an admin call's, or the config updater's,
as a failover's `reconcile` arrives while the node is being stopped): the stop waits for it,
then dismounts every copy it mounted, cleanly; a reconcile after the stop mounts nothing.
CI saw the other outcome: a copy mounted after the stop had dismounted the others, and a stop
that never ended."""

from __future__ import annotations

import asyncio

from dag_common.clock import SystemClock
from dag_common.cluster_store.embedded import EmbeddedClusterStore
from dag_common.config import parse_config
from replication_node.node import Node
from replication_node.storage.database import Database
from replication_node.storage.header import DatabaseState
from tests.cluster_harness import cluster_config, free_port, wait_until

TOKEN = "node-stop-token-0123456789"


def _config(tmp_path, databases):
    copies = [{"node": "n1", "activation_preference": 1}]
    return parse_config(
        cluster_config(
            [("n1", "s", f"http://127.0.0.1:{free_port()}")],
            [{"name": db, "copies": copies} for db in databases],
            cluster_store={"kind": "embedded", "path": "cluster.db"},
            defaults={"failover_after": None},
        ),
        base_dir=tmp_path,
    )


def _state(node: Node, database: str) -> DatabaseState:
    db = Database.open(node.paths(database).database)
    try:
        return db.header.state
    finally:
        db.close()


async def test_a_stop_during_a_reconcile_leaves_every_copy_dismounted_cleanly(tmp_path):
    store = EmbeddedClusterStore(tmp_path / "cluster.db")
    node = Node(
        config=_config(tmp_path, ["DB1"]),
        name="n1",
        token=TOKEN,
        clock=SystemClock(),
        cluster_store=store,
    )
    await node.start()
    try:
        node.config = _config(tmp_path, ["DB1", "DB2", "DB3"])  # as a config reload brings
        reconcile = asyncio.create_task(node.reconcile())
        # the stop comes while the reconcile holds its lock (it is mounting DB2)
        await wait_until("the reconcile under way", node._reconcile_lock.locked, every=0)
        await node.stop()
        await reconcile
        await node.reconcile()  # stopped: mounts nothing
    finally:
        store.close()
    for database in ("DB1", "DB2", "DB3"):
        assert _state(node, database) is DatabaseState.CLEAN_SHUTDOWN, database
