"""One item as the message it is: `GET …/mailboxes/{mailbox}/items/{item_id}/message`.

A message whose body is kept apart in `bodies` (every body of 1 MiB or more) is
written as it is read, a part at a time (`storage/body_reads.py`, issue 52): the node holds a
part of it, where a read of the row held SQLite's value and Python's bytes of it, twice the
message.  Each part is read off the loop in a read transaction of its own, the row found
again with the same body first: a row replaced while its message is written is not mixed
into the answer; the answer, whose status and length are sent, is cut (the connection
closed), so the client sees a short body, never a whole-looking mix.

`X-Message-SHA256` is sent before the body: for a message kept as UTF-8 it is the hash the
row keeps of those bytes (taken when they were written: a body damaged on disk since then
fails the client's check rather than being hashed as it now reads); an 8-bit message's bytes
are not the row's UTF-8, so they are read a first time to be hashed and counted.

The LLR overlay's bodies (on the active, taken on the loop first, as the batch read does),
a body in the old `body` column (files from before the column, small bodies) and a text item
presented as mail are read whole, as before.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

from aiohttp import web

from dag_common.rfc822 import (
    BodyFormat,
    message_bytes,
    message_sha256,
    message_size,
    message_slices,
)
from replication_node.errors import BodyChanged, NotFound
from replication_node.http.context import mailbox_name, reader_for
from replication_node.storage.body_reads import BlobBody, blob_head, message_parts, parts_apart
from replication_node.storage.file_reads import FileReads, StoredBytes, message_stored
from replication_node.storage.reader import MailboxReader

logger = logging.getLogger(__name__)

# Reads of one message at a time each, off the loop (never the default executor, where the
# embedded cluster store's calls run).
_reads = ThreadPoolExecutor(2, thread_name_prefix="message")
ATTEMPTS = 3  # reads of an item replaced while hashed, before its answer begins


def _head(db: FileReads, mailbox: str, item_id: str) -> BlobBody | StoredBytes | None:
    """The item's head if its body is read a part at a time, else its body read whole."""
    with db.reading_apart() as conn:
        return blob_head(conn, mailbox, item_id) or message_stored(conn, mailbox, item_id)


def _hash_8bit(db: FileReads, body: BlobBody) -> tuple[str, int]:
    """The SHA-256 and size of an 8-bit message kept apart, read a part at a time."""
    h, size = hashlib.sha256(), 0
    for part in message_parts(parts_apart(db, body), body.format):
        h.update(part)
        size += len(part)
    return h.hexdigest(), size


async def get_message(request: web.Request) -> web.StreamResponse:
    """An item as the message it is (`dag_common.rfc822`): a message's bytes as they were
    written, or a text item presented as a text/plain message; the SHA-256 of those bytes in
    `X-Message-SHA256`.  Any copy answers, as the listing does.  An item replaced while its
    8-bit message was hashed, before the answer began, is read again (`BodyChanged` past
    `ATTEMPTS`: 409)."""
    name = mailbox_name(request)
    item_id = request.match_info["item_id"]
    reader = reader_for(request)
    if reader.mailbox(name) is None:
        raise NotFound(f"no mailbox {name!r}")
    for attempt in range(1, ATTEMPTS + 1):
        try:
            return await _answer(request, reader, name, item_id)
        except BodyChanged:
            if attempt == ATTEMPTS:
                raise
            logger.info("%s %s: the item changed while read; read again", request.method,
                        request.path)  # fmt: skip
    raise AssertionError("unreachable")


async def _answer(
    request: web.Request, reader: MailboxReader, name: str, item_id: str
) -> web.StreamResponse:
    db, held = reader.bodies_apart(name, [item_id])
    loop = asyncio.get_running_loop()
    if item_id in held:
        stored: BlobBody | StoredBytes | None = held[item_id]
    else:
        stored = await loop.run_in_executor(_reads, _head, db, name, item_id)
    del held
    if stored is None:
        raise NotFound(f"mailbox {name!r} has no item {item_id!r}")
    if isinstance(stored, BlobBody):
        return await _write_blob(request, db, stored)
    body, fmt, subject = stored
    del stored
    if isinstance(body, bytes):  # a message kept as UTF-8, its bytes as stored
        digest = await asyncio.to_thread(lambda: hashlib.sha256(body).hexdigest())
        return await _write(request, digest, len(body), _views(body))
    if not fmt.is_message:  # a text item, presented as mail (built whole: rfc822.py)
        raw = await asyncio.to_thread(message_bytes, body, fmt, subject)
        return web.Response(
            body=raw,
            content_type="message/rfc822",
            headers={"X-Message-SHA256": hashlib.sha256(raw).hexdigest()},
        )
    digest = await asyncio.to_thread(message_sha256, body, fmt)
    return await _write(request, digest, message_size(body, fmt), message_slices(body, fmt))


def _views(data: bytes) -> Iterator[memoryview]:
    view = memoryview(data)
    for start in range(0, len(data), 1024 * 1024):
        yield view[start : start + 1024 * 1024]


async def _write(
    request: web.Request, digest: str, size: int, parts: Iterator[bytes | memoryview]
) -> web.StreamResponse:
    response = web.StreamResponse(
        headers={"Content-Type": "message/rfc822", "X-Message-SHA256": digest}
    )
    response.content_length = size
    await response.prepare(request)
    for part in parts:
        await response.write(part)
        await asyncio.sleep(0)  # a write yields only once the socket's buffer is full
    await response.write_eof()
    return response


async def _write_blob(request: web.Request, db: FileReads, body: BlobBody) -> web.StreamResponse:
    """`body`'s message, each part read off the loop and written before the next is read."""
    loop = asyncio.get_running_loop()
    if body.format is BodyFormat.MESSAGE:
        digest, size = body.body_hash, body.size
    else:
        digest, size = await loop.run_in_executor(_reads, _hash_8bit, db, body)
    response = web.StreamResponse(
        headers={"Content-Type": "message/rfc822", "X-Message-SHA256": digest}
    )
    response.content_length = size
    await response.prepare(request)
    parts = message_parts(parts_apart(db, body), body.format)
    try:
        while (part := await loop.run_in_executor(_reads, next, parts, None)) is not None:
            await response.write(part)
            del part
    except ConnectionError:  # the client went away: nothing to answer
        logger.info("%s %s: the client left before the message's end", request.method,
                    request.path)  # fmt: skip
        return response
    except Exception:
        # The status and length are sent: close mid-answer, so the client cannot take a
        # cut message (the row replaced meanwhile: BodyChanged) for a whole one.
        logger.exception("%s %s: the read failed after it began", request.method, request.path)
        if request.transport is not None:
            request.transport.close()
        return response
    await response.write_eof()
    return response
