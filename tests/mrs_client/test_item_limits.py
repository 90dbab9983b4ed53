"""The pure rules of large and bad items: which items a move skips, when skipping fails it,
and what the target must hold once they are left out."""

from __future__ import annotations

import hashlib

import pytest

from dag_common.mailbox_digest import mailbox_digest
from dag_common.store_api import Digest, Item
from mrs_client.item_limits import (
    SkippedItem,
    SkipReason,
    all_terms_known,
    classify,
    for_mailbox,
    less_skipped,
    now_fitting,
    over_limits,
    sort_out,
    still_bad,
    summed,
    with_skipped,
    without,
)

KIB = 1024


def it(item_id, cn, *, subject="s", body="b", deleted=False, folder="Inbox"):
    return Item(item_id, folder, subject, body, cn, deleted)


@pytest.mark.parametrize(
    ("item", "reason", "size"),
    [
        (it("a", 1, subject="", body="x" * 64 * KIB), None, None),  # exactly the limit fits
        (it("a", 1, subject="", body="x" * (64 * KIB + 1)), SkipReason.LARGE, 64 * KIB + 1),
        (it("a", 1, subject="s" * 10, body="x" * (64 * KIB - 9)), SkipReason.LARGE, 64 * KIB + 1),
        # the size is UTF-8's: 40,000 characters of "é" are 80,000 bytes
        (it("a", 1, body="é" * 40_000, subject=""), SkipReason.LARGE, 80_000),
        (it("a", 1, body="é" * 30_000, subject=""), None, None),
        (Item.unreadable_at(7, "the source answered HTTP 500"), SkipReason.BAD, None),
        (Item.unreadable_at(7, "not an item", item_id="m7"), SkipReason.BAD, None),
    ],
)
def test_classify(item, reason, size):
    skip = classify(item, mailbox="alice", max_item_size=64 * KIB)
    if reason is None:
        assert skip is None
        return
    assert skip is not None and skip.reason is reason and skip.size == size
    assert skip.change_number == item.change_number and skip.mailbox == "alice"
    if reason is SkipReason.LARGE:
        assert skip.limit == 64 * KIB and skip.term, "a large item's term is known"
        assert f"{size:,} bytes" in skip.describe() and "65,536" in skip.describe()
    else:
        assert skip.limit is None and not skip.term, "nobody knows a bad item's content"


def large(item_id, cn=1, mailbox="alice"):
    return SkippedItem(mailbox, item_id, cn, SkipReason.LARGE, 100, 50, "large", "ab")


def bad(item_id="", cn=1, mailbox="alice"):
    return SkippedItem(mailbox, item_id, cn, SkipReason.BAD, None, None, "bad", "")


@pytest.mark.parametrize(
    ("skipped", "large_limit", "bad_limit", "fails_naming"),
    [
        ((), 0, 0, None),
        ((large("m1"),), 0, 0, ["1 large item, more than --large-item-limit 0", "alice/m1"]),
        ((large("m1"),), 1, 0, None),
        (
            (large("m1"), large("m2")),
            1,
            5,
            ["2 large items, more than --large-item-limit 1", "alice/m1", "alice/m2"],
        ),
        ((large("m1"), bad(cn=9)), 1, 0, ["1 bad item, more than --bad-item-limit 0", "alice/?"]),
        ((large("m1"), bad(cn=9)), 1, 1, None),
        ((large("m1"), large("m2"), bad("m3")), 0, 0, ["2 large items", " and 1 bad item"]),
        (tuple(large(f"m{i}", i) for i in range(25)), 3, 0, ["25 large", "and 5 more"]),
    ],
)
def test_over_limits(skipped, large_limit, bad_limit, fails_naming):
    why = over_limits(skipped, large_item_limit=large_limit, bad_item_limit=bad_limit)
    if fails_naming is None:
        assert why is None
        return
    assert why is not None
    for words in fails_naming:
        assert words in why, why


def test_the_skipped_set_follows_the_source():
    found = with_skipped((), [large("m1", 3), bad(cn=5), large("m1", 3, mailbox="bob")])
    assert [s.key for s in found] == [("alice", "m1"), ("alice", "#5"), ("bob", "m1")]
    again = with_skipped(found, [large("m1", 8)])  # m1 written again, still too large
    assert [(s.key, s.change_number) for s in again][:2] == [
        (("alice", "#5"), 5),
        (("alice", "m1"), 8),
    ]
    assert [s.key for s in without(again, "alice", ["m1"])] == [("alice", "#5"), ("bob", "m1")]
    assert [s.key for s in for_mailbox(again, "alice", [])] == [("bob", "m1")]
    assert all_terms_known([large("m1")]) and not all_terms_known([large("m1"), bad()])
    assert now_fitting((large("m1"), bad()), 100) == [large("m1")]
    assert now_fitting((large("m1"), bad()), 99) == []


ITEMS = [
    it("a", 1),
    it("big", 2, body="x" * 200),
    it("c", 3, folder="Projects"),
    it("gone", 4, deleted=True),
    Item.unreadable_at(5, "500"),
    it("big2", 6, body="y" * 300),
]


def node_digest(rows) -> Digest:
    """What a node answers for a mailbox holding `rows`."""
    d = mailbox_digest("alice", rows)
    return Digest(
        mailbox="alice",
        item_count=d.item_count,
        digest=d.digest,
        last_change_number=d.last_change_number,
    )


def row(i: Item) -> dict:
    return {
        "item_id": i.item_id,
        "folder": i.folder,
        "subject": i.subject,
        "body": i.body,
        "deleted": i.deleted,
        "change_number": i.change_number,
    }


def test_the_source_less_its_skipped_items_is_what_the_target_holds():
    readable = [i for i in ITEMS if not i.unreadable]
    kept, skipped = sort_out(ITEMS, mailbox="alice", max_item_size=100)
    assert [i.item_id for i in kept] == ["a", "c", "gone"]
    assert [(s.item_id, s.reason) for s in skipped] == [
        ("big", SkipReason.LARGE),
        ("", SkipReason.BAD),
        ("big2", SkipReason.LARGE),
    ]
    target = node_digest([row(i) for i in kept])
    # from the node's digest of the readable source, less the large items' terms
    larges = [s for s in skipped if s.reason is SkipReason.LARGE]
    less = less_skipped(node_digest([row(i) for i in readable]), larges)
    assert less.matches(target) and less.item_count == 2
    # from the mover's own sum of a listing (a bad item: the node cannot hash the mailbox)
    assert summed("alice", kept).matches(target)
    # anything else that differs still shows
    other = node_digest([row(i) for i in kept] + [row(it("z", 9))])
    assert not less.matches(other) and not summed("alice", kept).matches(other)
    changed = node_digest([row(it("a", 1, body="other")), row(ITEMS[2])])
    assert not less.matches(changed)


def head(i: Item) -> Item:
    """`i` as a listing without bodies gives it."""
    hashed = "" if i.deleted else hashlib.sha256(i.body.encode()).hexdigest()
    return Item(
        i.item_id, i.folder, i.subject, "", i.change_number, i.deleted, body_hash=hashed,
        body_size=len(i.body.encode()),
    )  # fmt: skip


def test_items_listed_without_bodies_are_classified_and_summed_as_with_them():
    """A reconcile lists without bodies: the size and the hash stand for the body."""
    readable = [i for i in ITEMS if not i.unreadable]
    heads = [head(i) if not i.unreadable else i for i in ITEMS]
    assert (
        sort_out(heads, mailbox="alice", max_item_size=100)[1]
        == (sort_out(ITEMS, mailbox="alice", max_item_size=100)[1])
    ), "the same skipped items, with the same sizes and terms"
    assert summed("alice", heads) == summed("alice", ITEMS)
    assert summed("alice", heads).matches(node_digest([row(i) for i in readable]))
    with pytest.raises(ValueError, match="without its body"):
        head(ITEMS[0]).entry()


def test_a_bad_item_whose_row_lists_well_without_its_body_stays_bad_while_unchanged():
    """A body the source cannot read lists well without it: the bad item found by a read
    with bodies stays skipped (named, with its term) while its change is still there."""
    heads = [head(i) for i in ITEMS if not i.unreadable]  # change 2 is "big"
    found = [bad(cn=2), bad(cn=3, item_id="c"), bad(cn=4), bad(cn=7), bad(cn=1, item_id="zz")]
    kept = still_bad([*found, large("big2", 6), bad(cn=3, mailbox="bob")], "alice", heads)
    assert [(s.item_id, s.change_number) for s in kept] == [("big", 2), ("c", 3)]
    assert kept[0].term == f"{heads[1].term('alice'):064x}" and all_terms_known(kept)
    # cn 4 is a tombstone now, cn 7 is no change of the listing, zz is not at cn 1
