"""A folder's UID listing built off the node's event loop (issue 50).

An IMAP front's SELECT lists the folder's messages without bodies (`folder_routes.folder_uids`).
Built whole on the loop, a 10,000-message folder held it 0.3-0.8 s (the file's rows read and
made, the LLR overlay's merged and hashed, the answer encoded), and eight of them at a time
kept the active's lease renewal waiting for 6-7 s: the lease expired and the database was
dismounted, a failover caused by read load (bench/imap.py).

Here the reader gives a function to read the listing in a worker thread
(`MailboxReader.listing_apart`), which the thread runs and encodes the answer.  On the
active, the loop only takes a snapshot of what the overlay holds for the mailbox, and the
thread reads the file's rows through a connection of their own and merges the snapshot over
them (`active/listing.py`: where that cannot be trusted, the listing is made on the loop as
before).  A passive's file is read the same way (it has no overlay).

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

from dag_common.rfc822 import BodyFormat
from replication_node.storage.reader import ItemRow, MailboxReader

T = TypeVar("T")

# Listings built at once, at most; more wait their turn (never in the default executor).
LISTING_THREADS = 2
_listings = ThreadPoolExecutor(LISTING_THREADS, thread_name_prefix="listing")


async def _off_loop(fn: Callable[[], T]) -> T:
    return await asyncio.get_running_loop().run_in_executor(_listings, fn)


def message_rows(items: list[ItemRow]) -> list[list[Any]]:
    """The listing's `messages`: `[uid, item_id, flags, modseq, size, received,
    message_size]` each.  `size` is the stored body's, in UTF-8; `message_size` the length
    of the bytes GET …/message serves (IMAP's RFC822.SIZE) where the row alone tells it: a
    message kept as UTF-8 (`BodyFormat.MESSAGE`) is its body's bytes, so `size`.  Null for
    the others: a message kept as Latin-1 is served as fewer bytes than its body's UTF-8
    when it has 8-bit bytes, and a text item is served as a message made of it."""
    return [
        [
            r.uid,
            r.item_id,
            list(r.flags),
            r.modseq,
            r.size,
            r.received,
            r.size if r.format is BodyFormat.MESSAGE else None,
        ]
        for r in items
        if not r.deleted
    ]


Encode = Callable[[list[ItemRow]], bytes]


async def folder_listing(
    reader: MailboxReader, mailbox: str, folder: str, since_modseq: int, encode: Encode
) -> bytes:
    """`encode(reader.folder_items(mailbox, folder, since_modseq))`, made off the loop
    where the reader can (`MailboxReader.listing_apart`)."""
    build = reader.listing_apart(mailbox, folder, since_modseq)
    if build is not None:

        def made() -> bytes | None:
            rows = build()
            return encode(rows) if rows is not None else None

        body = await _off_loop(made)
        if body is not None:
            return body
    return encode(reader.folder_items(mailbox, folder, since_modseq))


def dumps(value: Any) -> bytes:
    return orjson.dumps(value)
