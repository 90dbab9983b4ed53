"""The pure parts of reconcile: what to write again, how to cut it, when an epoch changed."""

from __future__ import annotations

import pytest

from mrs_client.errors import NeedsReconcile
from mrs_client.reconcile import EpochWatch, Side, cut_batches, plan_repair
from mrs_client.store_api import Item


def it(item_id, cn, body="b", folder="Inbox", deleted=False):
    return Item(item_id, folder, "s", body, cn, deleted)


SOURCE = [it("a", 3), it("b", 5), it("c", 9, deleted=True), it("d", 12), it("e", 7)]


@pytest.mark.parametrize(
    ("target", "puts", "deletes"),
    [
        ([], ["a", "b", "e", "d"], []),  # all, by the source's change order
        ([it("a", 1), it("b", 2), it("d", 3), it("e", 4)], [], []),  # equal: target numbers
        ([it("a", 1), it("b", 2), it("d", 3)], ["e"], []),  # lost on the target
        ([it("a", 1), it("b", 2, body="old"), it("d", 3), it("e", 4)], ["b"], []),
        ([it("a", 1), it("b", 2, folder="X"), it("d", 3), it("e", 4)], ["b"], []),
        ([it("a", 1), it("b", 2), it("c", 3), it("d", 4), it("e", 5)], [], ["c"]),  # deleted
        ([it("a", 1), it("b", 2), it("d", 3), it("e", 4), it("z", 5)], [], ["z"]),  # lost at src
        ([it("a", 1), it("b", 2), it("d", 3), it("e", 4), it("z", 5, deleted=True)], [], []),
    ],
)
def test_plan_repair(target, puts, deletes):
    plan = plan_repair(SOURCE, target)
    assert [i.item_id for i in plan.puts] == puts
    assert list(plan.deletes) == deletes
    assert plan.cursor == 12, "the highest change number of the source listing, tombstones too"
    assert bool(plan) is bool(puts or deletes)


def test_batches_are_cut_by_count_and_by_bytes():
    items = [it(f"i{n}", n, body="x" * 1000) for n in range(10)]
    assert [len(b) for b in cut_batches(items, max_items=4, max_bytes=10**6)] == [4, 4, 2]
    assert [len(b) for b in cut_batches(items, max_items=100, max_bytes=2500)] == [2] * 5
    assert [len(b) for b in cut_batches(items[:1], max_items=1, max_bytes=10)] == [1]


def test_an_epoch_watch_takes_the_first_epoch_and_refuses_another():
    watch = EpochWatch(source=4)
    watch.see(Side.TARGET, 7, "write")  # first sight
    watch.see(Side.TARGET, 0, "an older node says nothing")
    watch.see(Side.SOURCE, 4, "read")
    with pytest.raises(NeedsReconcile, match="source is at epoch 5") as caught:
        watch.see(Side.SOURCE, 5, "read")
    assert not caught.value.target_changed
    with pytest.raises(NeedsReconcile) as caught:
        watch.see(Side.TARGET, 8, "write")
    assert caught.value.target_changed
