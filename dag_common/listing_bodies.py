"""A page of an items listing read with its large bodies as their bytes (issue 52): the
answer read into one buffer, each large body unescaped in place there
(`dag_common.json_bodies`, as the node reads a write) and carried as its UTF-8 bytes
(`counted_text.bytes_only`), the rest of the JSON, small, parsed as before.  A write sends
such a body a slice at a time (`items_payload`), so the mover holds a large item once on its
way from the source to the target.

Before, a page was held twice at its parse: its bytes decoded to text, then the text parsed
(and `StreamReader.read` joins the answer's chunks, the answer twice over once more).  A page
that cannot be read so (a large body the node wrote with a lone surrogate, which is not UTF-8
text, or a large `"body"` that is not an item's) is `NotTaken`: its buffer was changed in
place, so the caller asks for the page again and reads it as text, where the item it cannot
carry comes back unreadable.  Pure but for the read.

Any other answer over `LARGE_ANSWER` (a page read as text) is decoded to text and its bytes
let go before the text is parsed: orjson reads a copy of what it parses (the answer three
times over at once), the standard library parses text (twice over at most).
"""

from __future__ import annotations

import asyncio
from typing import Any

from aiohttp import StreamReader

from dag_common.counted_text import bytes_only
from dag_common.json_bodies import BadBody, take_out
from dag_common.store_answers import json_or_none, std_json_or_none, text_or_none

LARGE_ANSWER = 1024 * 1024  # bytes of an answer past which it is parsed from text


class NotTaken(Exception):
    """A page whose large bodies cannot be taken out as bytes: ask for it again as text."""


async def read_all(content: StreamReader) -> bytearray:
    """The rest of `content` in one buffer, a chunk at a time (`StreamReader.read` keeps the
    chunks and joins them: the answer twice at once)."""
    out = bytearray()
    while chunk := await content.readany():
        out += chunk
    return out


def parsed(raw: bytearray) -> Any:
    """The JSON document `raw` holds (None if none), each large body of its `items` a
    bytes-only counted text; NotTaken if a large body cannot be read so.  `raw` is changed."""
    try:
        taken = take_out(raw)
    except BadBody as exc:
        raise NotTaken(str(exc)) from None
    if taken is None:
        return json_or_none(raw)
    del raw  # the last body's buffer now
    data = json_or_none(taken.json)
    which = dict(zip(taken.placeholders, taken.bodies, strict=True))
    entries = data.get("items") if isinstance(data, dict) else None
    for entry in entries if isinstance(entries, list) else []:
        body = entry.get("body") if isinstance(entry, dict) else None
        got = which.pop(body, None) if isinstance(body, str) else None
        if got is not None:
            entry["body"] = bytes_only(got.utf8, got.sha256)
    if which:
        raise NotTaken(f"{len(which)} large body strings are not an item's body")
    return data


async def answer_json(held: list[bytes | bytearray], take_bodies: bool) -> Any:
    """The JSON document of the answer `held` holds (None if none), taken out of the list so
    that its bytes are let go here; `take_bodies`: a large page's bodies as bytes (`parsed`,
    in a thread; NotTaken)."""
    answer = held.pop()
    if take_bodies and len(answer) > LARGE_ANSWER:
        return await asyncio.to_thread(parsed, answer)  # type: ignore[arg-type]
    if len(answer) <= LARGE_ANSWER:
        return json_or_none(answer)
    text = text_or_none(answer)
    del answer
    return None if text is None else std_json_or_none(text)
