"""A large message written as its bytes (`message_upload.py`'s routes) read a part at a time
and staged into the log as it arrives (`active/message_staging.py`), never held whole on the
node (issue 52).

Which: a body whose Content-Length is over what a commit record carries inline (an eighth
of a log file, `item_writes.stage_plan`'s rule, so the log holds what it held before), or
that has none (chunked), or is compressed (its Content-Length does not bound it).  A
smaller one is read whole, as before (`message_upload.py`).

Its limits: a Content-Length over the database's max_item_size is refused (413) before a
byte is read (a message's body is at least its bytes); the bytes are counted as they
arrive, so a chunked or compressed body is refused as soon as it passes it; a plain body
that ends before its Content-Length (the client gone mid-upload) is `BodyIncomplete`, one
that would pass it is refused (aiohttp reads no more than declared: a check, not a path).
Every refusal aborts what was staged: nothing of it is committed, and the client's next
try starts afresh.  The memory budget counts the body's Content-Length as before.
"""

from __future__ import annotations

import logging

from aiohttp import web

from dag_common.errors import BadRequest, BodyIncomplete, RequestTooLarge
from dag_common.http_body import bytes_and_mib
from dag_common.message_body import digest_headers
from dag_common.store_api import ItemIn
from replication_node.http.context import store_for_write
from replication_node.http.store_routes import ItemWrite, overriding

logger = logging.getLogger(__name__)


def streams(request: web.Request) -> bool:
    """Whether the request's message is staged as it arrives (see the module)."""
    declared = request.content_length
    inline = store_for_write(request).copy.stream.log_file_size // 8
    return declared is None or declared > inline or "Content-Encoding" in request.headers


async def put_streamed(
    request: web.Request, fields: ItemIn, write: ItemWrite
) -> tuple[dict[str, object], dict[str, str]]:
    """Stage the request's message as it arrives and commit it as `fields`' item; the
    written answer and the headers naming the message's digests (`digest_headers`)."""
    declared = request.content_length
    if declared is not None and declared > write.max_item_size:
        raise RequestTooLarge(
            f"a message of {declared} bytes is over the max_item_size of {write.database}, "
            f"{bytes_and_mib(write.max_item_size)}; nothing read or written",
            {"max_item_size": write.max_item_size, "item_size": declared},
        )
    store = store_for_write(request)
    override_lock = overriding(request)
    mailbox = request.match_info["mailbox"]
    # Refused before a byte is read: a mailbox gone or locked, a folder it has not, a lease
    # not held (`put_items` checks them again once the body is staged).
    store.check_put(mailbox, [fields], override_lock=override_lock)
    await store.copy.admit()
    plain = declared is not None and "Content-Encoding" not in request.headers
    stager = store.message_stager(
        max_item_size=write.max_item_size,
        database=write.database,
        size=declared if plain else None,
    )
    read = 0
    try:
        try:
            while chunk := await request.content.readany():
                read += len(chunk)
                if plain and read > declared:  # type: ignore[operator]
                    raise BadRequest(f"request body is longer than its {declared} bytes")
                await stager.add(chunk)
        except ConnectionResetError as exc:  # aiohttp's "Connection lost" mid-upload
            raise BodyIncomplete(
                f"request body ended after {read} of {declared} bytes ({exc}); nothing written"
            ) from None
        except web.RequestPayloadError as exc:  # a compressed body that does not inflate
            request.content.feed_eof()
            raise BadRequest(f"request body cannot be read: {' '.join(str(exc).split())}") from None
        if plain and read < declared:  # type: ignore[operator]
            raise BodyIncomplete(
                f"request body ended after {read} of {declared} bytes; nothing written"
            )
        staged = await stager.finish()
        item = fields.model_copy(
            update={"body": staged.body, "format": staged.format, "subject": staged.subject}
        )
        result = await store.put_items(
            mailbox, [item], override_lock=override_lock, staged={0: staged.ref}
        )
    except BaseException as exc:
        logger.info("%s %s: refused after %d bytes: %r", request.method, request.path, read, exc)
        await stager.abort()
        raise
    return result.wire(), digest_headers(staged.sha256, staged.crc32c)
