"""Many messages' bytes in one answer: `POST …/mailboxes/{mailbox}/items/messages` (issue 50;
the format is `dag_common.message_batch`'s).

An IMAP front's `UID FETCH 1:* (BODY.PEEK[])` asks for a range's bodies a batch at a time
instead of one `GET …/items/{id}/message` each.  The answer is written as it is read: a
worker thread reads the file's rows a part at a time (`READ_BYTES` of messages, one message
at least) through the connection kept for reads apart from the loop's
(`Database.reading_apart`) into one buffer, records and bytes as `GET …/message` answers
them, and the loop writes it, one write a part, giving itself back after each (as
`items_stream` does: a lease renewal never waits behind a batch).  A message kept
apart in `bodies` (every body of 1 MiB or more) is read into the buffer a part at
a time through incremental BLOB I/O (`storage/body_reads.py`, in the part's read
transaction: SQLite never makes the whole value, nor Python a bytes of it); one kept as
UTF-8 in the `body` column is read as SQLite's bytes of it (`file_reads.message_stored`:
no str decoded to be encoded again) and copied once, into the buffer.  The part is one
chunk of the answer where it was two writes a message (a TLS record and a loop turn each:
most of the node's time per message, bench/README.md).  The node holds a part at a time:
`READ_BYTES` of its memory budget taken for the answer's life, more counted while a larger
message is written.

On the active, the ids the LLR overlay holds (its rows are immutable) are taken from it on
the loop before any file read (a large body it holds in the log is read into the buffer a
part at a time from the log files, checked as it comes: `active/logged_bodies.LogText`):
an item in neither the overlay then nor the file when it is read was created after the
request, or deleted; either way it is answered missing.  Any copy answers, as `GET
…/message` does.  A bad request is answered 400 before anything is read.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor

from aiohttp import web

from dag_common.credentials import Role
from dag_common.memory import MemoryBudget
from dag_common.message_batch import CONTENT_TYPE, END, MessagesIn, found_head, missing_record
from dag_common.rfc822 import BodyFormat, message_bytes, message_size, message_slices
from dag_common.route_roles import add_route
from replication_node.errors import NotFound
from replication_node.http.context import json_body, mailbox_name, node_of, reader_for
from replication_node.http.error_middleware import cut_short
from replication_node.http.models import parse
from replication_node.storage.body_reads import (
    BlobBody,
    BlobText,
    blob_head,
    message_parts,
    parts,
    text_parts,
)
from replication_node.storage.file_reads import FileReads, Held, message_stored

READ_BYTES = 1024 * 1024  # message bytes one read off the loop takes (one message at least)
# Batches read at once, at most; more wait their turn (never in the default executor, where
# the embedded cluster store's calls run).
READ_THREADS = 2
_reads = ThreadPoolExecutor(READ_THREADS, thread_name_prefix="messages")


def _read_part(
    db: FileReads, mailbox: str, ids: Sequence[str], start: int, held: Held, most: int
) -> tuple[bytearray, int, int]:
    """The records of `ids[start:]` up to `most` bytes of messages (one message at least), in
    one buffer: it, the index after the last, the message bytes in it.  Off the loop.  A
    message kept as UTF-8 is SQLite's bytes of it (`message_stored`), copied once, into the
    buffer."""
    out = bytearray()
    size = 0
    at = start
    with db.reading_apart() as conn:
        while at < len(ids) and (size < most or at == start):
            item = ids[at]
            at += 1
            blob = None if item in held else blob_head(conn, mailbox, item)
            if blob is not None:  # read a part at a time into the buffer: no whole value
                size += _parts_into(out, item, blob, functools.partial(parts, conn, blob))
                continue
            stored = held[item] if item in held else message_stored(conn, mailbox, item)
            if stored is None:
                out += missing_record(item)
                continue
            body, fmt, subject = stored
            if isinstance(body, BlobText):  # the overlay's, in the log (`LogText`): by parts
                size += _parts_into(out, item, body.head, body.parts)
                del body, stored
                continue
            if isinstance(body, bytes):  # the stored UTF-8, as it is
                n = len(body)
                out += found_head(item, n)
                out += body
            elif fmt.is_message:
                n = message_size(body, fmt)
                out += found_head(item, n)
                for part in message_slices(body, fmt):
                    out += part
            else:  # a text item, presented as mail (`GET …/message`)
                raw = message_bytes(body, fmt, subject)
                n = len(raw)
                out += found_head(item, n)
                out += raw
            del body, stored
            size += n
    return out, at, size


def _parts_into(
    out: bytearray, item: str, blob: BlobBody, read: Callable[[], Iterable[bytes]]
) -> int:
    """The record of a message read a part at a time (`read`: kept apart in `bodies`, read in
    the caller's read transaction; or held in the log, `LogText.parts`), appended to `out`
    as they come (no whole value, nor a bytes of it, besides the buffer); its size.  An
    8-bit message is read twice: counted, then copied.  A body read from the log is
    checked as it comes (`LogText`): one that does not verify raises before its last part
    is in `out`, which is then never sent."""
    if blob.format is BodyFormat.TEXT:  # a text item, presented as mail: built whole
        text = "".join(text_parts(read()))
        raw = message_bytes(text, blob.format, blob.subject)
        out += found_head(item, len(raw))
        out += raw
        return len(raw)
    n = blob.size
    if blob.format is not BodyFormat.MESSAGE:
        n = sum(len(p) for p in message_parts(read(), blob.format))
    out += found_head(item, n)
    for part in message_parts(read(), blob.format):
        out += part
    return n


async def post_messages(request: web.Request) -> web.StreamResponse:
    """The messages of the item ids asked for, in that order (`dag_common.message_batch`)."""
    name = mailbox_name(request)
    wanted = parse(MessagesIn, await json_body(request))
    reader = reader_for(request)
    if reader.mailbox(name) is None:
        raise NotFound(f"no mailbox {name!r}")
    memory = node_of(request).memory
    async with memory.share(READ_BYTES, f"a read of messages from {request.match_info['db']}"):
        db, held = reader.bodies_apart(name, wanted.item_ids)
        response = web.StreamResponse(headers={"Content-Type": CONTENT_TYPE})
        response.enable_chunked_encoding()
        await response.prepare(request)
        try:
            await _write(response, db, name, wanted, held, memory)
        except Exception as exc:  # the status is sent: no end record, the connection closed
            cut_short(request, exc, "answer")
    return response


async def _write(
    response: web.StreamResponse, db: FileReads, mailbox: str, wanted: MessagesIn,
    held: Held, memory: MemoryBudget,
) -> None:  # fmt: skip
    loop = asyncio.get_running_loop()
    ids = wanted.item_ids
    sent = at = 0
    while at < len(ids) and sent < wanted.max_bytes:
        most = min(READ_BYTES, wanted.max_bytes - sent)
        read = functools.partial(_read_part, db, mailbox, ids, at, held, most)
        part, at, size = await loop.run_in_executor(_reads, read)
        over = max(0, size - READ_BYTES)  # a message larger than a part: counted while held
        memory.take(over)
        try:
            # One write a part (one chunk, TLS records of 16 KiB), not two a message: the
            # answer's writes were most of the node's time per message (bench/README.md).
            # A part past READ_BYTES (a large message) is written READ_BYTES at a time, as
            # views of it: aiohttp makes each chunk a new bytes (its size line, the data,
            # CRLF), and the transport keeps what the socket did not take, so one write of
            # a 30 MiB part was the message twice more beside the part.
            view = memoryview(part)
            for start in range(0, len(part), READ_BYTES):
                await response.write(view[start : start + READ_BYTES])
                await asyncio.sleep(0)  # a write yields only once the socket's buffer is full
            view.release()
            del part
        finally:
            memory.release(over)
        sent += size
    await response.write(END)
    await response.write_eof()


def add_message_read_routes(app: web.Application) -> None:
    """The batch read of messages (see the module)."""
    items = "/v1/databases/{db}/mailboxes/{mailbox}/items"
    add_route(app, "POST", items + "/messages", post_messages, Role.STORE)
