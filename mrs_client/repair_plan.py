"""What a reconcile by content plans, and what it found (pure: no I/O; the reads and writes
are `reconcile.Reconciler`'s, the reasons in `reconcile`'s docstring).

- `plan_repair`: from full listings of both ends, the puts and deletes that make the target
  hold exactly the source's live items; `latest` folds a listing read in several pages.
- `PutsFromPages`: which items of the source's pages, read again with their bodies, those
  puts are.
- `imap_differences`: what a client would see differ (UIDVALIDITY, counters, UIDs, flags).
- `Reconciled`, `Compared`: one mailbox's outcome, each with a sentence.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from dag_common.store_api import Digest, Item, Items, Mailbox
from mrs_client.item_limits import SkippedItem, SkipReason, classify

Held = tuple[int, tuple[str, ...]]  # a message's UID and flags


def imap_differences(
    source: Mailbox,
    target: Mailbox,
    held: dict[str, tuple[dict[str, Held], dict[str, Held]]],
) -> list[str]:
    """How the target's IMAP state differs from the source's (empty: none a client would
    see): each folder's UIDVALIDITY, its UIDNEXT, HIGHESTMODSEQ and modseq floor not behind
    the source's, and each message's UID and flags (`held`: by folder, the source's and
    the target's, by item id)."""
    found = []
    theirs = {f.folder: f for f in target.folder_status}
    for mine in source.folder_status:
        other = theirs.get(mine.folder)
        if other is None:
            found.append(f"folder {mine.folder!r} missing")
            continue
        if other.uidvalidity != mine.uidvalidity:
            found.append(
                f"folder {mine.folder!r}: UIDVALIDITY {other.uidvalidity}, "
                f"the source's {mine.uidvalidity}"
            )
        if other.uid_next < mine.uid_next or other.highest_modseq < mine.highest_modseq:
            found.append(
                f"folder {mine.folder!r}: UIDNEXT {other.uid_next} and HIGHESTMODSEQ "
                f"{other.highest_modseq}, behind the source's {mine.uid_next} and "
                f"{mine.highest_modseq}"
            )
        if other.modseq_floor < mine.modseq_floor:
            found.append(
                f"folder {mine.folder!r}: modseq floor {other.modseq_floor}, behind the "
                f"source's {mine.modseq_floor} (its items reported at lower modseqs)"
            )
    for folder, (want, have) in sorted(held.items()):
        wrong = sorted(i for i in want.keys() | have.keys() if want.get(i) != have.get(i))
        if wrong:
            i = wrong[0]
            found.append(
                f"folder {folder!r}: {len(wrong)} messages differ in UID or flags (e.g. item "
                f"{i}: {have.get(i)} on the target, {want.get(i)} on the source)"
            )
    return found


def latest(items: Iterable[Item]) -> list[Item]:
    """The last state of each item of a listing read in several pages (an item changed
    between two pages shows in both), by change number."""
    by_id: dict[str, Item] = {}
    unnamed: list[Item] = []
    for item in items:
        if not item.item_id:
            unnamed.append(item)
        elif item.item_id not in by_id or by_id[item.item_id].change_number < item.change_number:
            by_id[item.item_id] = item
    return sorted([*by_id.values(), *unnamed], key=lambda i: i.change_number)


@dataclass(frozen=True, slots=True)
class RepairPlan:
    """What makes the target hold exactly the source's live items."""

    puts: tuple[Item, ...]  # missing on the target, or held differently
    deletes: tuple[str, ...]  # on the target, not live on the source
    cursor: int  # the highest change number of the source listing
    missing: int = 0
    different: int = 0

    def __bool__(self) -> bool:
        return bool(self.puts or self.deletes)

    def describe(self) -> str:
        ids = [i.item_id for i in self.puts[:3]] + list(self.deletes[:3])
        return f"{self.missing} missing, {self.different} different, {len(self.deletes)} extra" + (
            f" (e.g. {', '.join(ids)})" if ids else ""
        )


def plan_repair(source: Iterable[Item], target: Iterable[Item]) -> RepairPlan:
    """Compare full listings of both ends (tombstones included), with or without their
    bodies (`Item.content`), and say what to write."""
    cursor = 0
    live: dict[str, Item] = {}
    for item in source:
        cursor = max(cursor, item.change_number)
        if not item.deleted:
            live[item.item_id] = item
    held = {i.item_id: (i.content(), i.imap_state()) for i in target if not i.deleted}
    missing = [i for k, i in live.items() if k not in held]
    different = [i for k, i in live.items() if k in held and _differs(i, held[k])]
    deletes = tuple(sorted(k for k in held if k not in live))
    puts = sorted(missing + different, key=lambda i: i.change_number)
    return RepairPlan(tuple(puts), deletes, cursor, len(missing), len(different))


def _differs(item: Item, held: tuple[tuple[str, str, str, str], Held]) -> bool:
    """The target's version (`held`: content, UID and flags) is not the source's `item`;
    UID and flags compared when the source has them (a node before them has none)."""
    content, imap = held
    return item.content() != content or (item.uid != 0 and item.imap_state() != imap)


class PutsFromPages:
    """Which items of the source's pages, read with their bodies, a repair writes: each of
    the plan's puts (listed without bodies) once, when its id comes by live.  The reads
    begin at the first put's change (`since`) and may stop once every put came by (`done`).

    - A put changed since the plan is written as it is now (the next sync, from the plan's
      cursor, copies it again anyway); one deleted, or grown past the target's
      max_item_size, since the plan is not (the next sync deletes it, or skips it).
    - A change the source cannot read stands for every change after the one before it in
      its page (`source_reader` steps over a run of them as one), and for the item it names,
      if it names one: a put whose change is among them, and which does not come by later
      (changed since the plan), is a bad item (`bad`), with its id and its term in the digest
      from the plan's listing: a body that cannot be read lists well without it, so the
      digest, which counts it by the hash kept beside it, can still be compared less it."""

    def __init__(self, puts: Iterable[Item], *, mailbox: str, max_item_size: int) -> None:
        self.wanted = {item.item_id: item for item in puts}
        self.mailbox = mailbox
        self.max_item_size = max_item_size
        self.since = min((i.change_number for i in self.wanted.values()), default=1) - 1
        self._unread: dict[str, SkippedItem] = {}  # puts whose change could not be read

    @property
    def done(self) -> bool:
        """Every put came by (one whose change could not be read may come by yet)."""
        return not self.wanted

    @property
    def bad(self) -> list[SkippedItem]:
        """The puts the source could not read (once the pages are all read)."""
        return list(self._unread.values())

    def take(self, item: Item, after: int) -> bool:
        """Whether to write `item`, which came after change `after` in its page (the change
        before it, or what the page was asked after)."""
        if item.unreadable:
            for put in self.wanted.values():
                if put.item_id == item.item_id or after < put.change_number <= item.change_number:
                    self._unread[put.item_id] = SkippedItem(
                        self.mailbox,
                        put.item_id,
                        put.change_number,
                        SkipReason.BAD,
                        None,
                        None,
                        item.unreadable,
                        f"{put.term(self.mailbox):064x}",
                    )
            return False
        if self.wanted.pop(item.item_id, None) is None:
            return False
        self._unread.pop(item.item_id, None)
        return (
            not item.deleted
            and classify(item, mailbox=self.mailbox, max_item_size=self.max_item_size) is None
        )


@dataclass(frozen=True, slots=True)
class Reconciled:
    """One mailbox reconciled: where its cursor goes on from, and what was repaired."""

    mailbox: str
    cursor: int
    plan: RepairPlan | None  # None: the digests were equal, nothing was listed
    created: bool = False  # the target had lost the mailbox itself
    # What the mailbox skips, found afresh by a listing (None: not listed, unchanged).
    skipped: tuple[SkippedItem, ...] | None = None

    @property
    def repaired(self) -> int:
        return len(self.plan.puts) + len(self.plan.deletes) if self.plan else 0

    def describe(self) -> str:
        skips = f", {len(self.skipped)} items skipped" if self.skipped else ""
        if self.plan is None or not self.plan:
            return f"{self.mailbox}: target equal to source{skips}, cursor {self.cursor}"
        return (
            f"{self.mailbox}: repaired {self.plan.describe()}"
            + (" (mailbox re-created)" if self.created else "")
            + f"{skips}, cursor {self.cursor}"
        )


@dataclass(frozen=True, slots=True)
class Compared:
    """One mailbox's two ends, as the verification compares them."""

    source: Digest  # the source's digest less its skipped items: what the target must hold
    target: Digest | None  # None: no such mailbox on the target
    left_out: int = 0  # skipped items left out of the source's digest
    skipped: tuple[SkippedItem, ...] | None = None  # found afresh by a listing, if listed
    listed: Items | None = None  # that listing of the source, if it was listed

    @property
    def equal(self) -> bool:
        return self.target is not None and self.source.matches(self.target)

    def describe(self) -> str:
        t = self.target
        held = f"{t.item_count} items ({t.digest[:12]})" if t else "none"
        n = self.left_out
        less = f" ({n} skipped item{'s' if n != 1 else ''} left out)" if n else ""
        return (
            f"{self.source.mailbox}: source {self.source.item_count} items "
            f"({self.source.digest[:12]}){less}, target {held}"
        )
