"""A message written as its bytes: `PUT …/mailboxes/{mailbox}/items/{item_id}/message` (an
item created or replaced by its id, as a JSON put with that id is) and `POST
…/items/message` (the node gives it an id), Content-Type `message/rfc822`.

Why a route beside the JSON write: a message item's body came as bytes (SMTP, LMTP, an IMAP
APPEND), and as JSON it was escaped into text by the sender, held as bytes and text by the
node, parsed, then encoded to UTF-8 again by each stage that counted or hashed it (issues 49
and 52: a 1 MiB 8-bit message cost the active ~30 ms of CPU, and its write peaked at about
five times itself).  Here the body is read as bytes within the same limits as the JSON write,
counted and hashed once, and its bytes staged in the log as they came
(`MailboxStore._stage_bodies`): a large one is never decoded into text on the active
(`rfc822.counted_message_bytes`; the LLR overlay then holds its place in the log, not it), a
small one once (`rfc822.counted_message`).  What the log, the database and every copy hold
is what a JSON write of the same message would have written, byte for byte.  A large one is
not read whole: it is staged as it arrives (`message_streaming.py`).

The same roles, memory budget, max_item_size and answers as the JSON write (400 a bad
request, nothing written; 409 a locked mailbox; 413 over the limit; 503 past the budget),
and the message's SHA-256 in `X-Message-SHA256`, as `GET …/message` gives it back, with its
CRC32C in `X-Message-CRC32C`, which the writer checks against what it sent
(`dag_common/message_body.py`).
Query: `folder` (Inbox), `flags` (IMAP flags, space separated), `received` (ISO 8601 with
its offset: IMAP's INTERNALDATE), `override_lock` (a move's, the mover's only).
"""

from __future__ import annotations

import asyncio

import crc32c
from aiohttp import web

from dag_common.credentials import Role
from dag_common.http_body import (
    body_share,
    check_item_sizes,
    expect_within,
    read_body,
)
from dag_common.message_body import digest_headers
from dag_common.rfc822 import counted_message, counted_message_bytes, is_message, subject_of
from dag_common.route_roles import add_route
from dag_common.store_api import ItemIn
from replication_node.errors import BadRequest
from replication_node.http.context import node_of, store_for_write
from replication_node.http.message_streaming import put_streamed, streams
from replication_node.http.models import parse
from replication_node.http.store_routes import _items_limit, item_write, overriding

CONTENT_TYPE = "message/rfc822"
# Past this many bytes a message is decoded and hashed off the event loop (a 1 MiB one is
# ~2-3 ms of CPU; a small one costs less than the thread's hand-over).
_OFF_LOOP = 256 * 1024


def _item_fields(request: web.Request) -> ItemIn:
    """The item's fields but its body, from the path and the query, validated as a JSON
    write's are (BadRequest naming the first that is wrong)."""
    fields: dict[str, object] = {"folder": request.query.get("folder", "Inbox")}
    if "item_id" in request.match_info:
        fields["item_id"] = request.match_info["item_id"]
    if "flags" in request.query:
        fields["flags"] = request.query["flags"].split()
    if "received" in request.query:
        fields["received"] = request.query["received"]
    return parse(ItemIn, fields)


async def put_message(request: web.Request) -> web.Response:
    """Write one message item from the request's bytes (see the module)."""
    if request.content_type != CONTENT_TYPE:
        raise BadRequest(
            f"a message is written as {CONTENT_TYPE}, not {request.content_type or 'nothing'}"
        )
    fields = _item_fields(request)  # before a byte is read: a bad id or folder reads nothing
    write = item_write(request)
    size = body_share(request, write.limit)
    async with node_of(request).memory.share(size, f"a message written to {write.database}"):
        if streams(request):  # a large one: staged as it arrives (`message_streaming.py`)
            answer, digests = await put_streamed(request, fields, write)
            return web.json_response(answer, status=201, headers=digests)
        raw = await read_body(request, write.limit)
        if not is_message(raw):
            raise BadRequest(
                "the body is not an RFC 5322 message: it does not begin with a header field"
            )
        subject = subject_of(raw)
        crc = crc32c.crc32c(raw)
        if len(raw) > _OFF_LOOP:
            # Carried as its bytes alone (no text of it made, issue 52): staged into the log
            # as they came, or decoded there if the store writes it inline after all.
            body, fmt, sha256 = await asyncio.to_thread(counted_message_bytes, raw)
        else:
            body, fmt, sha256 = counted_message(raw)
        del raw  # the body holds its bytes until they are staged (`counted_text`)
        # Not validated again: the body was decoded here (so it is valid text, and an 8-bit
        # one Latin-1 by construction), and its subject is the message's own.
        item = fields.model_copy(update={"body": body, "format": fmt, "subject": subject})
        check_item_sizes(
            [item], database=write.database, max_item_size=write.max_item_size, batch=False
        )
        result = await store_for_write(request).put_items(
            request.match_info["mailbox"], [item], override_lock=overriding(request)
        )
    return web.json_response(result.wire(), status=201, headers=digest_headers(sha256, crc))


def add_message_upload_routes(app: web.Application) -> None:
    """The raw message writes (see the module)."""
    items = "/v1/databases/{db}/mailboxes/{mailbox}/items"
    expect = expect_within(_items_limit)
    add_route(app, "PUT", items + "/{item_id}/message", put_message, Role.STORE,
              expect_handler=expect)  # fmt: skip
    add_route(app, "POST", items + "/message", put_message, Role.STORE, expect_handler=expect)
