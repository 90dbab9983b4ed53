"""A message posted as JSON (`POST /v1/messages`, `MessageIn`), its large body taken out of
the request's bytes in place (`dag_common.json_bodies`, as a node's write of items does) and
queued as those bytes (`Queued.parts`), never as text (issue 52).

Why: parsed whole, a submission held its bytes, their text and the body's str at once,
about three times the body.  Here the request's buffer is the body's only copy: its JSON
string unescaped into it a slice at a time, then, for a `message-8bit` body (a message's
bytes as Latin-1 characters), those characters' UTF-8 turned back into the message's bytes
in the same buffer (a Latin-1 character is never more bytes than its UTF-8).  The rest of
the JSON, small, is parsed and validated as before, the body's place holding nothing (a
text item) or its header section (a message: its subject is read from it, and checked
against a subject given, as `MessageIn` does).  A body under `json_bodies.LARGE` is parsed
with the rest, as before.

Why not refuse large JSON bodies and send them to `message/rfc822`: a text item (a subject
and a body, no headers) has only this route, and the unescaping is the node's, tested there.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from aiohttp import web

from dag_common.errors import BadRequest
from dag_common.http_body import BodyLimit, read_json_taking_out
from dag_common.json_bodies import header_section, past_latin_1
from dag_common.mailbox_digest import utf8_size
from dag_common.rfc822 import BodyFormat
from transport.messages import MessageIn, Queued

SLICE = 1 << 20  # bytes of UTF-8 turned into Latin-1 at a time


def latin_1_in_place(utf8: bytearray) -> None:
    """Turn UTF-8 text whose characters are all Latin-1 into their Latin-1 bytes, in place
    (a slice at a time, cut between characters)."""
    at = out = 0
    end_of = len(utf8)
    while at < end_of:
        end = min(end_of, at + SLICE)
        while end < end_of and utf8[end] & 0xC0 == 0x80:  # not inside a character
            end -= 1
        data = utf8[at:end].decode("utf-8").encode("latin-1")
        utf8[out : out + len(data)] = data
        out += len(data)
        at = end
    del utf8[out:]


async def json_message(
    request: web.Request, limit: BodyLimit, parse: Callable[[Any], MessageIn]
) -> MessageIn | Queued:
    """The request's message (`parse` validates a `MessageIn`, BadRequest if it is not
    one): as `Queued` when its body was large, else as `MessageIn`."""
    data, which = await read_json_taking_out(request, limit, "the message's body")
    if not which:
        return parse(data)
    body = data.get("body") if isinstance(data, dict) else None
    got = which.get(body) if isinstance(body, str) else None
    if got is None:  # no large "body" field (what was taken out is refused as it reads)
        return parse(data)
    fmt = data.get("format")
    message = fmt in (BodyFormat.MESSAGE.value, BodyFormat.MESSAGE_8BIT.value)
    data["body"] = header_section(got.utf8) if message else ""
    checked = parse(data)
    utf8 = got.utf8
    size = utf8_size(checked.stored_subject) + len(utf8)  # the body's UTF-8: the node's count
    if checked.format is BodyFormat.MESSAGE_8BIT:
        at = past_latin_1(utf8)
        if at is not None:
            raise BadRequest(
                f"bad request: body: a {checked.format.value} body holds bytes as Latin-1 "
                f"characters: the character at byte {at} of its UTF-8 is none"
            )
        await asyncio.to_thread(latin_1_in_place, utf8)
    return Queued(checked.message_id, tuple(checked.recipients), checked.folder,
                  checked.stored_subject, (utf8,), checked.format, size)  # fmt: skip
