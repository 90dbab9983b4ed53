"""A folder's UID listing built off the node's event loop (issue 50).

An IMAP front's SELECT lists the folder's messages without bodies (`folder_routes.folder_uids`).
Built whole on the loop, a 10,000-message folder held it 0.3-0.8 s (the file's rows read and
made, the LLR overlay's merged and hashed, the answer encoded), and eight of them at a time
kept the active's lease renewal waiting for 6-7 s: the lease expired and the database was
dismounted, a failover caused by read load (bench/imap.py).

Here the loop only takes a snapshot of what the overlay holds for the mailbox (its rows are
immutable), and a worker thread reads the file's rows through a connection of its own
(`Database.folder_items_apart`), merges the snapshot over them and encodes the answer.  The
file read is taken at a waypoint in the same read transaction: if a generation the snapshot
did not hold whole was flushed into the file meanwhile (the snapshot's rows would then be
older than the file's), or the overlay renames the mailbox's folders or numbers its items
(the file's names and UIDs are not yet final), the listing is made on the loop as before.  A
passive's file is read the same way (it has no overlay).

The listings have worker threads of their own (`LISTING_THREADS`): in the default executor,
eight of them queued the cluster store's calls (the embedded store runs each in that executor),
the lease renewal among them, and the lease still expired.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

import orjson

from replication_node.active.copy import ActiveCopy
from replication_node.storage.database import Database
from replication_node.storage.ops import floored, folder_floor
from replication_node.storage.reader import ItemRow, MailboxReader

T = TypeVar("T")

# Listings built at once, at most; more wait their turn (never in the default executor).
LISTING_THREADS = 2
_listings = ThreadPoolExecutor(LISTING_THREADS, thread_name_prefix="listing")


async def _off_loop(fn: Callable[[], T]) -> T:
    return await asyncio.get_running_loop().run_in_executor(_listings, fn)


def message_rows(items: list[ItemRow]) -> list[list[Any]]:
    """The listing's `messages`: `[uid, item_id, flags, modseq, size, received]` each."""
    return [
        [r.uid, r.item_id, list(r.flags), r.modseq, r.size, r.received]
        for r in items
        if not r.deleted
    ]


Encode = Callable[[list[ItemRow]], bytes]


async def folder_listing(
    reader: MailboxReader, mailbox: str, folder: str, since_modseq: int, encode: Encode
) -> bytes:
    """`encode(reader.folder_items(mailbox, folder, since_modseq))`, made off the loop
    where it can be."""
    tombstones = since_modseq > 0
    if isinstance(reader, Database):
        return await _off_loop(
            lambda: encode(
                reader.folder_items_apart(mailbox, folder, since_modseq, tombstones=tombstones)[1]
            )
        )
    if not isinstance(reader, ActiveCopy):
        return encode(reader.folder_items(mailbox, folder, since_modseq))
    overlay = reader.overlay
    if overlay.hides(mailbox) or overlay.assigned or overlay.renames.get(mailbox):
        return encode(reader.folder_items(mailbox, folder, since_modseq))
    # the folder's floor as the overlay has it (it may hold a ReserveLost the file has not):
    # below it, every row of the file is read and each reported at it (`ops.floored`)
    floor = folder_floor(reader.folder_rows(mailbox), folder)
    file_since = 0 if floor > since_modseq else since_modseq
    generations = overlay.generations
    # The file may be read at a waypoint below the newest generation the snapshot holds (that
    # one may be open: more of it may come); with no overlay, only at the waypoint it has now.
    highest = generations[-1] - 1 if generations else reader.db.header.waypoint
    held = [row for (m, _), (_, row) in overlay.items.items() if m == mailbox]

    def build() -> tuple[int, bytes]:
        waypoint, stored = reader.db.folder_items_apart(
            mailbox, folder, file_since, tombstones=tombstones
        )
        rows = {r.item_id: r for r in stored if r.folder == folder}
        for row in held:
            rows.pop(row.item_id, None)
            if row.folder == folder:
                rows[row.item_id] = row._replace(body="")
        listed = [
            r
            for r in (floored(r, floor) for r in rows.values())
            if (since_modseq == 0 and not r.deleted)
            or (since_modseq > 0 and r.modseq > since_modseq)
        ]
        listed.sort(key=lambda r: (r.uid, r.item_id))
        return waypoint, encode(listed)

    waypoint, body = await _off_loop(build)
    if waypoint > highest:  # flushed meanwhile: what the snapshot held may be older
        return encode(reader.folder_items(mailbox, folder, since_modseq))
    return body


def dumps(value: Any) -> bytes:
    return orjson.dumps(value)
