"""Large and bad items: what a move skips, and when skipping fails it (pure, no I/O).

As Exchange's `-LargeItemLimit` and `-BadItemLimit`:

- a **large item** is a live source item larger (subject and body in UTF-8, `Item.size`)
  than the target database's `max_item_size`, read from the cluster config: the mover
  decides from the config, never by trying the write;
- a **bad item** is a source change the mover cannot read: its node answers an error for
  it (`source_reader`), or what came back is not an item (`node_client`).

A move skips up to `large_item_limit` large and `bad_item_limit` bad items (both 0 by
default) and lists them (`mrs stats`); one more fails the move, naming them, before step 8
and with the source untouched.  The limits are checked whenever the skipped set grows (each
page of a sync, a reconcile), when a move is resumed, and again before step 8.

Safety invariant: a move never reaches step 8 with more skipped items of a kind than its
limit, and the verification before step 8 compares the target with the source less exactly
the skipped items (`less_skipped`), so a skipped item excuses that item only: anything else
that differs still fails the verification.  A skipped item is absent from the target: a
sync that skips a new version of an item deletes the target's older one.

The skipped set follows the source: an item written again small enough, or deleted, is no
longer skipped; a reconcile's full listing of a mailbox replaces that mailbox's set.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import TYPE_CHECKING, NotRequired, TypedDict

from dag_common.mailbox_digest import MODULUS, to_hex

if TYPE_CHECKING:
    # the store API's models (pydantic, ~20 ms to build): a move's record holds skipped
    # items, and reading records (`mrs list`) needs none of them (issue 48)
    from dag_common.store_api import Digest, Item

# How many skipped items a failure sentence names; `mrs stats` lists them all.
NAMED = 20


class SkipReason(StrEnum):
    LARGE = "large"
    BAD = "bad"


class SkippedItemFields(TypedDict):
    """A skipped item as a move's record stores it and `mrs record` prints it."""

    mailbox: str
    item_id: str
    change_number: int
    reason: str  # a SkipReason
    size: int | None
    limit: int | None
    detail: str
    term: NotRequired[str]  # absent from records written before it was kept


@dataclass(frozen=True, slots=True)
class SkippedItem:
    """One source item a move did not copy, and why."""

    mailbox: str
    item_id: str  # "": the source could not say which item (a change it cannot read)
    change_number: int
    reason: SkipReason
    size: int | None  # subject and body in UTF-8; None: not known (a bad item)
    limit: int | None  # the target's max_item_size it was over (large items)
    detail: str  # why, in words
    # The item's term in the mailbox digest (hex), so that the verification can take it out
    # of the source's digest; "": not known (a bad item), the source is then summed by the
    # mover itself from a listing.
    term: str = ""

    @property
    def key(self) -> tuple[str, str]:
        """Which item this is: its id, or, not known, its change number."""
        return (self.mailbox, self.item_id or f"#{self.change_number}")

    def describe(self) -> str:
        """`alice/m7 (change 42): 100,000 bytes, over the target's max_item_size of 65,536`."""
        which = f"{self.mailbox}/{self.item_id}" if self.item_id else f"{self.mailbox}/?"
        return f"{which} (change {self.change_number}): {self.detail}"

    def as_dict(self) -> SkippedItemFields:
        return {
            "mailbox": self.mailbox,
            "item_id": self.item_id,
            "change_number": self.change_number,
            "reason": str(self.reason),
            "size": self.size,
            "limit": self.limit,
            "detail": self.detail,
            "term": self.term,
        }

    @classmethod
    def from_dict(cls, data: SkippedItemFields) -> SkippedItem:
        return cls(**{**data, "reason": SkipReason(data["reason"])})


def classify(item: Item, *, mailbox: str, max_item_size: int) -> SkippedItem | None:
    """Whether a live source item is skipped (large or bad), and how it is reported."""
    if item.unreadable:
        return SkippedItem(
            mailbox,
            item.item_id,
            item.change_number,
            SkipReason.BAD,
            None,
            None,
            item.unreadable,
        )
    size = item.size
    if size <= max_item_size:
        return None
    return SkippedItem(
        mailbox,
        item.item_id,
        item.change_number,
        SkipReason.LARGE,
        size,
        max_item_size,
        f"{size:,} bytes, over the target's max_item_size of {max_item_size:,}",
        f"{item.term(mailbox):064x}",
    )


def sort_out(
    items: Iterable[Item], *, mailbox: str, max_item_size: int
) -> tuple[list[Item], list[SkippedItem]]:
    """A full listing of a source mailbox split into what the target is to hold (live items
    that are copied, and tombstones) and what is skipped."""
    kept: list[Item] = []
    skipped: list[SkippedItem] = []
    for item in items:
        skip = None
        if not item.deleted:
            skip = classify(item, mailbox=mailbox, max_item_size=max_item_size)
        if skip is None:
            kept.append(item)
        else:
            skipped.append(skip)
    return kept, skipped


def still_bad(
    skipped: Iterable[SkippedItem], mailbox: str, listed: Iterable[Item]
) -> list[SkippedItem]:
    """The bad items of `mailbox` in `skipped` that a listing without bodies shows readable
    and unchanged (a live item at the same change, of the same id if one was known): their
    bodies, which that listing does not read, are what could not be read, so they stay
    skipped, named and with their terms from the listing."""
    bad = {
        s.change_number: s for s in skipped if s.mailbox == mailbox and s.reason is SkipReason.BAD
    }
    out = []
    for item in listed:
        s = bad.get(item.change_number)
        if s is None or item.deleted or item.unreadable or s.item_id not in ("", item.item_id):
            continue
        out.append(replace(s, item_id=item.item_id, term=f"{item.term(mailbox):064x}"))
    return out


def _ordered(skipped: Iterable[SkippedItem]) -> tuple[SkippedItem, ...]:
    return tuple(sorted(skipped, key=lambda s: (s.mailbox, s.change_number, s.item_id)))


def with_skipped(
    skipped: tuple[SkippedItem, ...], found: Iterable[SkippedItem]
) -> tuple[SkippedItem, ...]:
    """`skipped` with `found` added, an item found again replacing what was said of it."""
    by_key = {s.key: s for s in skipped}
    for s in found:
        by_key[s.key] = s
    return _ordered(by_key.values())


def without(
    skipped: tuple[SkippedItem, ...], mailbox: str, item_ids: Iterable[str]
) -> tuple[SkippedItem, ...]:
    """`skipped` less the items of `mailbox` named (written again small, or deleted)."""
    gone = {(mailbox, i) for i in item_ids}
    return tuple(s for s in skipped if s.key not in gone)


def for_mailbox(
    skipped: tuple[SkippedItem, ...], mailbox: str, found: Iterable[SkippedItem]
) -> tuple[SkippedItem, ...]:
    """`skipped` with `mailbox`'s items replaced by `found` (a full listing of it)."""
    return _ordered([s for s in skipped if s.mailbox != mailbox] + list(found))


def now_fitting(skipped: tuple[SkippedItem, ...], max_item_size: int) -> list[SkippedItem]:
    """The large items that fit the target's max_item_size now (it was raised)."""
    return [
        s
        for s in skipped
        if s.reason is SkipReason.LARGE and s.size is not None and s.size <= max_item_size
    ]


def over_limits(
    skipped: tuple[SkippedItem, ...], *, large_item_limit: int, bad_item_limit: int
) -> str | None:
    """Why a move with these skipped items must fail (None: within its limits), naming them."""
    parts = []
    for reason, limit, flag in (
        (SkipReason.LARGE, large_item_limit, "--large-item-limit"),
        (SkipReason.BAD, bad_item_limit, "--bad-item-limit"),
    ):
        found = [s for s in skipped if s.reason is reason]
        if len(found) <= limit:
            continue
        named = "; ".join(s.describe() for s in found[:NAMED])
        more = f"; and {len(found) - NAMED} more" if len(found) > NAMED else ""
        items = "item" if len(found) == 1 else "items"
        parts.append(f"{len(found)} {reason} {items}, more than {flag} {limit}: {named}{more}")
    return " and ".join(parts) or None


def counts(skipped: Iterable[SkippedItem]) -> dict[SkipReason, int]:
    """How many items of each kind were skipped."""
    out = dict.fromkeys(SkipReason, 0)
    for s in skipped:
        out[s.reason] += 1
    return out


def all_terms_known(skipped: Iterable[SkippedItem]) -> bool:
    """Whether the source's digest less these items can be worked out from the node's
    digest (every term known), rather than summed from a listing."""
    return all(s.term for s in skipped)


def less_skipped(digest: Digest, skipped: Iterable[SkippedItem]) -> Digest:
    """The source's mailbox digest less the skipped items: what the target must hold.
    Every skipped item must have its term (`all_terms_known`)."""
    items = list(skipped)
    if not items:
        return digest
    total = int(digest.digest, 16) - sum(int(s.term, 16) for s in items)
    return digest.model_copy(
        update={"item_count": digest.item_count - len(items), "digest": to_hex(total)}
    )


def summed(mailbox: str, items: Iterable[Item], *, epoch: int = 0) -> Digest:
    """The digest of the live readable items of a listing, with or without their bodies
    (the mover's own sum, as the node computes it: dag_common.mailbox_digest)."""
    from dag_common.store_api import Digest  # see the imports above

    total, count, last = 0, 0, 0
    for item in items:
        last = max(last, item.change_number)
        if item.deleted or item.unreadable:
            continue
        count += 1
        total += item.term(mailbox)
    return Digest(
        mailbox=mailbox,
        item_count=count,
        digest=to_hex(total % MODULUS),
        last_change_number=last,
        epoch=epoch,
    )
