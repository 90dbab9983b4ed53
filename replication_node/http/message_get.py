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

A body the LLR overlay holds in the log (on the active; its place taken on the loop first,
as the batch read does) is written the same way, a part at a time from the log files
(`active/logged_bodies.LogText`), once a first read has checked it whole (each record's
CRC32C, the parts' size and CRC32C, the SHA-256 it was written with): a body whose
generation is damaged is answered 503 naming it, never sent.  The parts are checked again
as they are sent, the last held back until the body verifies (a file damaged between the
two reads cuts the answer).

A body in the old `body` column (files from before the column, small bodies) and a text
item presented as mail (built whole: `rfc822.message_bytes`) are read whole, as before.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import logging
from collections.abc import Callable, Iterable, Iterator
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
from replication_node.http.error_middleware import cut_short
from replication_node.storage.body_reads import (
    BlobBody,
    BlobText,
    blob_head,
    message_parts,
    parts_apart,
    text_parts,
)
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


# A body's UTF-8 a part at a time, read when called (`parts_apart`, `LogText.parts`).
Parts = Callable[[], Iterable[bytes | memoryview]]


def _hash_message(body: BlobBody, parts: Parts) -> tuple[str, int]:
    """The SHA-256 and size of the message `body` is, its parts read a first time."""
    h, size = hashlib.sha256(), 0
    for part in message_parts(parts(), body.format):  # type: ignore[arg-type]
        h.update(part)
        size += len(part)
    return h.hexdigest(), size


def _text_message(body: BlobBody, parts: Parts) -> bytes:
    """A text item kept a part at a time, presented as mail (`message_bytes`: whole)."""
    text = "".join(text_parts(parts()))  # type: ignore[arg-type]
    return message_bytes(text, body.format, body.subject)


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
        return await _write_blob(request, stored, functools.partial(parts_apart, db, stored))
    body, fmt, subject = stored
    del stored
    if isinstance(body, BlobText):  # the overlay's, in the log (`LogText`): read by parts
        return await _write_blob(request, body.head, body.parts, checked=True)
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


async def _write_blob(
    request: web.Request, body: BlobBody, parts: Parts, *, checked: bool = False
) -> web.StreamResponse:
    """`body`'s message, each part read off the loop (`parts`) and written before the next
    is read.  `checked`: read whole a first time before the answer begins (the parts check
    themselves: a body that does not verify is an error answer, not a cut one)."""
    loop = asyncio.get_running_loop()
    if body.format is BodyFormat.TEXT:  # presented as mail: built whole, as `_answer` does
        raw = await loop.run_in_executor(_reads, _text_message, body, parts)
        return web.Response(
            body=raw,
            content_type="message/rfc822",
            headers={"X-Message-SHA256": hashlib.sha256(raw).hexdigest()},
        )
    if body.format is BodyFormat.MESSAGE and not checked:
        digest, size = body.body_hash, body.size
    else:
        digest, size = await loop.run_in_executor(_reads, _hash_message, body, parts)
    response = web.StreamResponse(
        headers={"Content-Type": "message/rfc822", "X-Message-SHA256": digest}
    )
    response.content_length = size
    await response.prepare(request)
    sent = message_parts(parts(), body.format)  # type: ignore[arg-type]
    try:
        while (part := await loop.run_in_executor(_reads, next, sent, None)) is not None:
            await response.write(part)
            del part
    except Exception as exc:  # the status and length are sent (a row replaced: BodyChanged)
        cut_short(request, exc, "message")
        return response
    await response.write_eof()
    return response
