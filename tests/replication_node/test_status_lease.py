"""`replication-node status` says who holds each database's lease, and until when."""

from __future__ import annotations

from datetime import UTC, datetime

from dag_common.cluster_store.interface import ActiveRecord, LeaseRecord
from replication_node.cli.status import StoreView, lease_line

NOW = datetime(2026, 11, 23, tzinfo=UTC)


def record(node="mbx1", epoch=3):
    return ActiveRecord(database="DB1", node=node, epoch=epoch, last_log_generated=7, updated=NOW)


def test_a_live_lease_names_its_holder_epoch_and_expiry():
    view = StoreView({"DB1": record()}, {"DB1": LeaseRecord("DB1", "mbx1", 3, 4.26)})
    assert lease_line("DB1", view) == (
        "DB1: lease held by mbx1 at epoch 3, expires in 4.3s unless renewed"
    )


def test_no_live_lease_says_the_active_acknowledges_nothing():
    view = StoreView({"DB1": record()}, {"DB1": None})
    assert "no live lease: mbx1 (active at epoch 3) acknowledges no write" in lease_line(
        "DB1", view
    )


def test_an_unreadable_store_is_said_not_guessed():
    assert lease_line("DB1", None) == "DB1: lease unknown (the cluster store could not be read)"
    assert "no active chosen yet" in lease_line("DB1", StoreView({"DB1": None}, {"DB1": None}))
