"""The pure parts of reconcile: what to write again, how to cut it, when an epoch changed."""

from __future__ import annotations

import dataclasses
import hashlib

import pytest

from dag_common.rfc822 import BodyFormat
from dag_common.store_api import Item
from mrs_client.batching import cut_batches, write_cut, write_size
from mrs_client.epoch_watch import EpochWatch, Side
from mrs_client.errors import NeedsReconcile
from mrs_client.item_limits import SkipReason, sort_out
from mrs_client.policy import MoveSettings
from mrs_client.repair_plan import PutsFromPages, latest, plan_repair


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


KB = 1000


def sized(name: str, size: int) -> Item:
    """An item of `size` bytes of body (write_size adds its id, folder, and 200)."""
    return Item(name, "Inbox", "", "x" * size, 1)


@pytest.mark.parametrize(
    ("sizes", "max_items", "max_bytes", "batches"),
    [
        # small items cut by bytes (each costs its size + id + folder + 200)
        ([1 * KB] * 6, 100, 2500, [[0, 1], [2, 3], [4, 5]]),
        ([1 * KB] * 6, 4, 10**6, [[0, 1, 2, 3], [4, 5]]),  # and by count
        # an item larger than the cut goes alone, in its own write, wherever it stands
        ([1 * KB, 1 * KB, 9 * KB, 1 * KB], 100, 2500, [[0, 1], [2], [3]]),
        ([9 * KB, 1 * KB, 1 * KB], 100, 2500, [[0], [1, 2]]),
        ([1 * KB, 9 * KB], 100, 2500, [[0], [1]]),
        ([9 * KB, 9 * KB, 9 * KB], 100, 2500, [[0], [1], [2]]),
        ([9 * KB], 1, 10, [[0]]),
        # one that just fits the room left joins the write (1,207 + 1,293 bytes); one byte
        # more starts the next
        ([1 * KB, 1086], 100, 2500, [[0, 1]]),
        ([1 * KB, 1087], 100, 2500, [[0], [1]]),
    ],
)
def test_writes_are_cut_by_bytes_and_a_larger_item_goes_alone(sizes, max_items, max_bytes, batches):
    items = [sized(f"i{n}", size) for n, size in enumerate(sizes)]
    cut = cut_batches(items, max_items=max_items, max_bytes=max_bytes)
    assert [[int(i.item_id[1:]) for i in batch] for batch in cut] == batches
    assert [i for batch in cut for i in batch] == items, "every item once, in order"


def test_the_bytes_counted_are_the_items_real_size_in_utf8():
    ascii_item = Item("m1", "Inbox", "subject", "x" * 1000, 1)
    accented = Item("m1", "Inbox", "sujet été", "é" * 1000, 1)  # 2 bytes a character
    assert ascii_item.size == 1007
    assert accented.size == len("sujet été".encode()) + 2000
    assert write_size(accented) == accented.size + len("m1") + len("Inbox") + 200
    # 600 "é" are 1,200 bytes: two of them no longer fit a 2,500-byte cut with the framing
    two = [Item(f"m{n}", "Inbox", "", "é" * 600, n) for n in range(2)]
    assert [len(b) for b in cut_batches(two, max_items=10, max_bytes=2500)] == [1, 1]


@pytest.mark.parametrize(
    ("half_a_log_file", "max_item_size", "cut"),
    [
        (512 * 1024, 36 * 1024 * 1024, 512 * 1024),  # the defaults: half a log file
        (32 * 1024 * 1024, 64 * 1024, 64 * 1024),  # a small max_item_size beside a large log
        (8 * 1024, 8 * 1024, 8 * 1024),
    ],
)
def test_small_items_are_cut_at_half_a_log_file_never_past_the_max_item_size(
    half_a_log_file, max_item_size, cut
):
    assert write_cut(MoveSettings(sync_batch_bytes=half_a_log_file), max_item_size) == cut


def test_a_listing_read_in_pages_keeps_each_items_last_state():
    pages = [it("a", 3), it("b", 5), it("a", 9, body="new"), it("b", 11, deleted=True)]
    assert [(i.item_id, i.change_number) for i in latest(pages)] == [("a", 9), ("b", 11)]
    bad = Item.unreadable_at(7, "500")
    assert latest([it("a", 3), bad]) == [it("a", 3), bad], "an unnamed change is kept as it is"


def test_a_repair_never_puts_a_skipped_item_and_removes_its_older_version():
    source = [it("a", 3), it("big", 8, body="x" * 500), Item.unreadable_at(9, "500"), it("d", 12)]
    kept, skipped = sort_out(source, mailbox="alice", max_item_size=100)
    target = [it("a", 1), it("big", 2)]  # an older, smaller version of big
    plan = plan_repair(kept, target)
    assert [i.item_id for i in plan.puts] == ["d"]
    assert plan.deletes == ("big",)
    assert plan.cursor == 12
    assert [s.item_id for s in skipped] == ["big", ""]


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


def head(item_id, cn, body="b", deleted=False):
    """An item as a listing without bodies gives it (the plan's puts are such items)."""
    return Item(
        item_id, "Inbox", "s", "", cn, deleted,
        body_hash="" if deleted else hashlib.sha256(body.encode()).hexdigest(),
        body_size=len(body),
    )  # fmt: skip


PUTS = [head("a", 5), head("b", 9), head("c", 14)]


@pytest.mark.parametrize(
    ("pages", "written", "bad"),
    [
        # (items, asked after): what comes by, page by page
        ([([it("a", 5), it("x", 7), it("b", 9), it("c", 14)], 4)], ["a", "b", "c"], []),
        # changed since the plan: written as it is now; deleted or grown large: not
        ([([it("a", 5), it("b", 20, body="new"), it("c", 21, deleted=True)], 4)], ["a", "b"], []),
        ([([it("a", 5), it("b", 20, body="x" * 500)], 4)], ["a"], []),
        # each put once, even if it comes by twice (changed between two pages)
        ([([it("a", 5)], 4), ([it("b", 9), it("a", 16, body="again")], 9)], ["a", "b"], []),
        # a change the source cannot read stands for every change since the one before it
        ([([Item.unreadable_at(9, "500")], 4), ([it("c", 14)], 9)], ["c"], ["a", "b"]),
        ([([it("a", 5), Item.unreadable_at(9, "500"), it("c", 14)], 4)], ["a", "c"], ["b"]),
        ([([it("a", 5), Item.unreadable_at(7, "500"), it("b", 9)], 4)], ["a", "b"], []),
        # ... and for the item it names, if the source said which; a put among them that
        # comes by later changed since the plan, and is written as it is now
        (
            [([it("a", 5), Item.unreadable_at(15, "?", "c")], 4), ([it("b", 20)], 15)],
            ["a", "b"],
            ["c"],
        ),
    ],
)
def test_a_repair_writes_each_put_once_from_the_pages_with_bodies(pages, written, bad):
    puts = PutsFromPages(PUTS, mailbox="alice", max_item_size=100)
    assert puts.since == 4, "read from the first put on"
    out = []
    for items, after in pages:
        for i in items:
            if puts.take(i, after):
                out.append(i.item_id)
            after = i.change_number or after  # as Reconciler.put walks a page
    assert out == written
    assert [(s.item_id, s.reason) for s in puts.bad] == [(i, SkipReason.BAD) for i in bad]
    for s in puts.bad:  # known from the plan's listing: the digests stay comparable
        put = next(p for p in PUTS if p.item_id == s.item_id)
        assert (s.change_number, s.term) == (put.change_number, f"{put.term('alice'):064x}")


def test_a_plan_made_without_bodies_is_the_plan_made_with_them():
    target = [it("a", 1), it("b", 2, body="old"), it("d", 3), it("z", 5)]
    with_bodies = plan_repair(SOURCE, target)
    heads = plan_repair(
        [head(i.item_id, i.change_number, i.body, i.deleted) for i in SOURCE],
        [head(i.item_id, i.change_number, i.body, i.deleted) for i in target],
    )
    assert [i.item_id for i in heads.puts] == [i.item_id for i in with_bodies.puts] == ["b", "e"]
    assert heads.deletes == with_bodies.deletes == ("z",)
    assert heads.cursor == with_bodies.cursor


def test_an_item_whose_only_difference_is_its_format_is_repaired_listed_or_not():
    """The same body and subject, a message at the source and text on the target (issue
    49): different content, with bodies or by hashes, and the put carries the format."""
    message = Item("b", "Inbox", "s", "b", 5, format=BodyFormat.MESSAGE)
    source = [it("a", 3), message]
    target = [it("a", 1), it("b", 2)]
    plan = plan_repair(source, target)
    assert [(i.item_id, i.format) for i in plan.puts] == [("b", BodyFormat.MESSAGE)]
    assert plan.puts[0].entry()["format"] == "message"
    heads = plan_repair(
        [head("a", 3), dataclasses.replace(head("b", 5), format=BodyFormat.MESSAGE)],
        [head("a", 1), head("b", 2)],
    )
    assert [i.item_id for i in heads.puts] == ["b"]
    assert plan_repair(source, [it("a", 1), message]).puts == ()
