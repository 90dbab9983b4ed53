"""The items listing (GET …/mailboxes/{mailbox}/items) written as it is read: a mailbox of
gigabytes is answered with no more than one item's body in the node's memory.

A listing used to be built whole: its rows, then their dicts, then the JSON text, then its
bytes; 300 MB of items peaked the node at 1.3 GB (bench/README.md, memory).  Here the rows
are read a few MiB at a time (`STREAM_READ_BYTES`, one item at least: `items_page`'s cut),
each item is written as JSON as soon as it is read, and its body is escaped a slice at a
time (`BODY_SLICE` characters), so the largest thing held is the one row being written.

A body kept apart in `bodies` (every body of 1 MiB or more) is not read with
its row: the row carries a `BlobText`, and the body is read a part at a time (1 MiB,
`storage/body_reads.py`) as it is written, each part in a read transaction of its own after
finding the row with the same body again: SQLite never makes the whole value, nor Python a
str of it.  A row replaced meanwhile raises `BodyChanged`, and the answer is cut, as any
read failing mid-answer is: never two versions of a body mixed.  On the active, a body the
LLR overlay holds in the log is such a body too (`active/logged_bodies.LogText`), read a
part at a time from the log files and checked as it is written (a body that does not
verify cuts the answer before its last part).

Listed without bodies (`bodies` false: what the mover's reconcile compares), each row carries
its body's hash and size instead of the body (`ItemRow`), and a page is cut by the rows'
size as listed.

The JSON is the same as the built answer's (`ItemsAnswer.wire()`), its keys in another order:
`items` first, the rest after them, once the last page says where the listing ends.  The
answer is sent chunked.  A read that fails once the answer has begun cannot change its
status: the connection is closed mid-answer, so the client sees a truncated body, never a
complete-looking listing missing items.

The listing gives the event loop back after every part it writes (`_write`): a client that
reads as fast as the node writes never fills the socket's buffer, so aiohttp's write never
waits, and a listing of 360 MB held the node's loop for 2.5 s (5 s in a 1 GiB pod), long
enough for the active's lease renewal to time out and the database to be dismounted
(tests/image, CI of 2026-11-29).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from aiohttp import web

from dag_common.items_query import ItemsQuery
from dag_common.rfc822 import BodyFormat
from dag_common.store_api import ItemsAnswer
from replication_node.http.error_middleware import cut_short
from replication_node.storage.body_reads import BlobText, text_parts
from replication_node.storage.reader import ItemRow, ItemsPage, MailboxReader

# How much of the mailbox's bodies one read takes (the rows held at once): one item at least.
STREAM_READ_BYTES = 4 * 1024 * 1024
# Characters of a body escaped and written at a time.
BODY_SLICE = 1024 * 1024


def _json(value: object) -> str:
    """JSON with text as UTF-8 rather than `\\uXXXX` (the answer is UTF-8): a letter past
    ASCII costs its 2 to 4 bytes, not 6 or 12, so a mailbox in another script is not three
    times its size on the wire and in the client that reads it.  Stored text is valid UTF-8
    (the API takes no other), so the encoding cannot fail."""
    return json.dumps(value, ensure_ascii=False)


def item_chunks(row: ItemRow, bodies: bool = True) -> Iterator[bytes]:
    """`row` as its JSON object in the answer, in parts: its fields but the body, then the
    body a slice at a time (escaped as `json.dumps` escapes it, so the bytes are those of
    the whole object dumped at once).  Without `bodies`: its fields, the body's hash in the
    body's place, in one part.  An item that is not text says its `format`.  Each part is
    made as it is asked for: a list of them was the body once more, in JSON, beside it."""
    fields = row._asdict()
    body = fields.pop("body")
    if row.format is BodyFormat.TEXT:
        del fields["format"]  # absent means text: a text item is listed as it always was
    else:
        fields["format"] = row.format.value
    if not bodies:
        yield _json(fields).encode()
        return
    del fields["body_hash"]  # "" when read with the body: not said
    yield (_json(fields)[:-1] + ', "body": "').encode()
    if isinstance(body, BlobText):  # read a part at a time as it is written (`body_reads`)
        for text in text_parts(body.parts()):
            yield _json(text)[1:-1].encode()
            del text
    else:
        for start in range(0, len(body), BODY_SLICE):
            yield _json(body[start : start + BODY_SLICE])[1:-1].encode()
    yield b'"}'


@dataclass(frozen=True, slots=True)
class Listing:
    """A listing of `mailbox`'s changes after `since`: every one (`limit` None), or a page
    of at most `limit` changes whose bodies (`ItemRow.listed_size`) stop once they reach
    `page_bytes` (one change at least), as `MailboxReader.items_page` cuts one.  `answer`
    makes the answer's other fields from the page as a whole (its items unused); without
    `bodies`, each row is listed with its body's hash instead of the body."""

    reader: MailboxReader
    mailbox: str
    since: int
    limit: int | None
    page_bytes: int | None
    answer: Callable[[ItemsPage], ItemsAnswer]
    bodies: bool = True

    async def write(self, response: web.StreamResponse) -> None:
        limit, page_bytes, bodies = self.limit, self.page_bytes, self.bodies
        await response.write(b'{"items": [')
        count, held, after = 0, 0, self.since
        first = True
        while True:
            read_bytes = STREAM_READ_BYTES
            if page_bytes is not None:
                read_bytes = min(read_bytes, page_bytes - held)
            want = MAX_READ if limit is None else limit - count
            query = ItemsQuery(after, want, page_bytes=read_bytes, bodies=bodies)
            page = self.reader.items_page(self.mailbox, query, blobs=True)
            rows, after, complete = page.items, page.through, page.complete
            # Each row let go of once written, and all before the next read: a page held
            # while the next was read was its bodies beside the next ones' (a move's source
            # at 3 times an item over rest: bench/README.md, memflush).
            del page
            count += len(rows)
            rows.reverse()
            while rows:
                row = rows.pop()
                if not first:
                    await response.write(b", ")
                first = False
                for part in item_chunks(row, bodies):
                    await _write(response, part)
                held += row.listed_size(bodies)
                del row
            full = (limit is not None and count >= limit) or (
                page_bytes is not None and held >= page_bytes
            )
            if complete or full:
                break
        rest = self.answer(ItemsPage([], after, complete)).wire()
        rest.pop("items", None)
        await response.write(b"], " + json.dumps(rest)[1:].encode() if rest else b"]}")
        await response.write_eof()


async def stream_items(request: web.Request, listing: Listing) -> web.StreamResponse:
    """Write `listing` as it is read."""
    response = web.StreamResponse(headers={"Content-Type": "application/json; charset=utf-8"})
    response.enable_chunked_encoding()
    await response.prepare(request)
    try:
        await listing.write(response)
    except Exception as exc:  # the status is sent (aiohttp's write_eof then meets a close)
        cut_short(request, exc, "listing")
    return response


async def _write(response: web.StreamResponse, part: bytes) -> None:
    """Write `part`, then let the loop run what waits (a lease renewal, a status call, a
    passive's notifications): the write itself yields only when the socket's buffer is full."""
    await response.write(part)
    await asyncio.sleep(0)


# The changes one read asks for when the listing counts none (`limit` unset): the reads are
# cut by bytes, this only keeps a read of tiny items within one statement's worth of rows.
MAX_READ = 10_000
