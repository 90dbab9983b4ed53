"""The JSON body of a write of items (POST …/mailboxes/{mailbox}/items), read with its large
bodies taken out in place (`dag_common.json_bodies`): each carried as its UTF-8 bytes, as a
raw message's are (`counted_text.bytes_only`), so the request's bytes are the only copy of
a large item on the node until it is staged into the log.  A request without a large body
is read and parsed whole, as before (`http_body.py`).
"""

from __future__ import annotations

from collections.abc import Sequence

from aiohttp import web

from dag_common.counted_text import bytes_only
from dag_common.http_body import BodyLimit, read_json_taking_out
from dag_common.json_bodies import TakenBody, header_section, past_latin_1
from dag_common.json_object import JsonObject
from dag_common.rfc822 import BodyFormat
from dag_common.store_api import ItemIn
from replication_node.errors import BadRequest

_MESSAGES = {BodyFormat.MESSAGE.value, BodyFormat.MESSAGE_8BIT.value}


async def items_json(
    request: web.Request, limit: BodyLimit
) -> tuple[JsonObject, list[TakenBody | None]]:
    """The request's JSON object, and by entry (the items of `{"items": [...]}`, or the one
    item the object is) the body taken out of it, if large.  An entry's body taken out reads,
    in the object, "" for a text item and its header section for a message (what the item's
    checks read); `with_bodies` gives the parsed items theirs.  BadRequest if it is not a
    JSON object (or a large body not a JSON string of UTF-8), RequestTooLarge past `limit`."""
    if not request.can_read_body:
        return {}, []
    data, which = await read_json_taking_out(request, limit, "an item's body")
    if not isinstance(data, dict):
        raise BadRequest("request body must be a JSON object")
    if not which:
        return data, []
    entries = data.get("items") if "items" in data else [data]
    found: list[TakenBody | None] = []
    for entry in entries if isinstance(entries, list) else []:
        body = entry.get("body") if isinstance(entry, dict) else None
        got = which.pop(body, None) if isinstance(body, str) else None
        if got is not None:
            assert isinstance(entry, dict)
            fmt = entry.get("format")
            message = isinstance(fmt, str) and fmt in _MESSAGES  # else its check refuses it
            entry["body"] = header_section(got.utf8) if message else ""
        found.append(got)
    return data, found


def with_bodies(items: Sequence[ItemIn], taken: list[TakenBody | None]) -> list[ItemIn]:
    """`items` (parsed from `items_json`'s object) given the bodies taken out of it, as
    bytes (BadRequest for a message_8bit body past Latin-1, which its check did not read)."""
    out = list(items)
    for n, got in enumerate(taken):
        if got is None:
            continue
        item = out[n]
        if item.format is BodyFormat.MESSAGE_8BIT:
            at = past_latin_1(got.utf8)
            if at is not None:
                raise BadRequest(
                    f"items.{n}.body: a {item.format.value} body holds bytes as Latin-1 "
                    f"characters: the character at byte {at} of its UTF-8 is none"
                )
        # frozen: set where it is built, as the route's counted text is
        object.__setattr__(item, "body", bytes_only(got.utf8, got.sha256))
    return out
