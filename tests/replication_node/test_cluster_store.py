"""The cluster store's contract, run against each engine: the embedded SQLite file and a
real etcd server (Debian's etcd-server, which `make test` installs) on free ports."""

from __future__ import annotations

import asyncio
import time

import pytest

from replication_node.cluster_store.embedded import EmbeddedClusterStore
from replication_node.cluster_store.etcd import EtcdClusterStore
from replication_node.errors import ClusterStoreError
from tests.cluster_harness import free_port, start_etcd


@pytest.fixture(scope="module")
def etcd(tmp_path_factory):
    url, proc = start_etcd(tmp_path_factory.mktemp("etcd"))
    yield url
    proc.terminate()
    proc.wait(timeout=10)


@pytest.fixture(params=["embedded", "etcd"])
async def store(request, tmp_path):
    if request.param == "embedded":
        s = EmbeddedClusterStore(tmp_path / "cluster.db")
    else:
        # a cluster name of its own per test: the module's etcd is shared
        s = EtcdClusterStore([request.getfixturevalue("etcd")], cluster=f"t{time.time_ns()}")
    yield s
    s.close()
    await asyncio.sleep(0)


async def test_the_active_moves_only_by_compare_and_set_on_the_epoch(store):
    assert await store.active("DB1") is None
    first = await store.set_active("DB1", "mbx1", expected_epoch=0)
    assert (first.node, first.epoch) == ("mbx1", 1)
    assert await store.set_active("DB1", "mbx2", expected_epoch=0) is None, "stale epoch"
    assert (await store.active("DB1")).node == "mbx1"
    second = await store.set_active("DB1", "mbx2", expected_epoch=1)
    assert (second.node, second.epoch) == ("mbx2", 2)
    assert await store.active("DB2") is None


async def test_two_activations_from_the_same_epoch_one_wins(store):
    await store.set_active("DB1", "mbx1", expected_epoch=0)
    results = await asyncio.gather(
        *(store.set_active("DB1", n, expected_epoch=1) for n in ("mbx2", "mbx3", "mbx2", "mbx3"))
    )
    winners = [r for r in results if r is not None]
    assert len(winners) == 1 and winners[0].epoch == 2
    assert (await store.active("DB1")).node == winners[0].node


async def test_last_log_generated_only_from_the_active_at_its_epoch_and_only_up(store):
    await store.set_active("DB1", "mbx1", expected_epoch=0)
    assert await store.publish_last_log_generated("DB1", "mbx1", 1, 7)
    assert await store.publish_last_log_generated("DB1", "mbx1", 1, 5)  # never goes back
    assert (await store.active("DB1")).last_log_generated == 7
    assert not await store.publish_last_log_generated("DB1", "mbx2", 1, 9), "not the active"
    assert not await store.publish_last_log_generated("DB1", "mbx1", 2, 9), "wrong epoch"
    moved = await store.set_active("DB1", "mbx2", expected_epoch=1)
    assert moved.last_log_generated == 7, "a new epoch keeps what was generated"
    assert not await store.publish_last_log_generated("DB1", "mbx1", 1, 9), "deposed"


async def test_the_mailbox_directory_changes_only_from_what_was_expected(store):
    assert await store.mailbox_database("alice") is None
    assert await store.set_mailbox_database("alice", "DB1", expected=None)
    assert not await store.set_mailbox_database("alice", "DB3", expected=None), "exists"
    assert not await store.set_mailbox_database("alice", "DB3", expected="DB2"), "not in DB2"
    assert await store.set_mailbox_database("alice", "DB2", expected="DB1")
    assert await store.set_mailbox_database("bob", "DB1", expected=None)
    assert await store.mailboxes() == {"alice": "DB2", "bob": "DB1"}


async def test_an_unreachable_etcd_is_a_clear_error():
    s = EtcdClusterStore([f"http://127.0.0.1:{free_port()}"], cluster="x", timeout=1)
    with pytest.raises(ClusterStoreError, match="no etcd endpoint answered"):
        await s.active("DB1")
    s.close()
