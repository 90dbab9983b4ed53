"""How a sync's items are cut into writes, each one transaction of the target (pure: no I/O).

Small items are gathered into a write of at most `sync_batch` items and about
`sync_batch_bytes` (half a log file, from the CLI), never past the target's max_item_size; a
larger item goes alone.  The cost of an item is counted without building the write.
"""

from __future__ import annotations

from collections.abc import Iterable

from dag_common.store_api import Item, utf8_len
from mrs_client.policy import MoveSettings


def write_size(item: Item) -> int:
    """About what an item costs in the target's log record: its real size (subject and body
    in UTF-8, `Item.size`), its id and folder, and the framing around them.  Called for
    every item of a sync: it counts without building the write's entry."""
    return item.size + utf8_len(item.item_id) + utf8_len(item.folder) + 200


def write_cut(settings: MoveSettings, max_item_size: int) -> int:
    """Where writes of small items are cut: `sync_batch_bytes` (half a log file, from the
    CLI), and never past the target's max_item_size, so that a write's body stays within
    what the target's HTTP edge takes (twice max_item_size, and 1 MiB, for JSON's escapes)
    however small the target's limit is beside its log file."""
    return min(settings.sync_batch_bytes, max_item_size)


class BatchCutter:
    """Cuts the items a sync writes into writes (one write is one transaction): at most
    `max_items` items and about `max_bytes` each, by `write_size`.  An item larger than
    `max_bytes` goes alone, in its own write: small items are cut so that a transaction of
    them fits in one generation of the target's log (the CLI cuts at half a log file), and
    a large one is a transaction the target's log continues across generations."""

    def __init__(self, *, max_items: int, max_bytes: int) -> None:
        self.max_items = max_items
        self.max_bytes = max_bytes
        self.batch: list[Item] = []
        self.size = 0

    def add(self, item: Item) -> list[Item] | None:
        """Take `item`; the write it closes (to be written before it), if any."""
        cost = write_size(item)
        closed = None
        # A batch holding one item larger than the cut is closed by whatever comes next.
        if self.batch and (len(self.batch) >= self.max_items or self.size + cost > self.max_bytes):
            closed = self.take()
        self.batch.append(item)
        self.size += cost
        return closed

    @property
    def full(self) -> bool:
        """The write being gathered takes nothing more (its one item larger than the cut, or
        `max_items` items): whatever comes next would close it, so it may go now."""
        return len(self.batch) >= self.max_items or self.size > self.max_bytes

    def take(self) -> list[Item]:
        """The write being gathered (perhaps empty), and start another."""
        batch, self.batch, self.size = self.batch, [], 0
        return batch


def cut_batches(items: Iterable[Item], *, max_items: int, max_bytes: int) -> list[list[Item]]:
    """All of `items` cut into writes (`BatchCutter`)."""
    cutter = BatchCutter(max_items=max_items, max_bytes=max_bytes)
    out = [batch for item in items if (batch := cutter.add(item))]
    if last := cutter.take():
        out.append(last)
    return out
