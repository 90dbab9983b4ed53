"""Request bodies at the HTTP edge of a node and of the transport: what a request may
carry, reading it within that, and parsing it as JSON.

A write of items may be large (an item of up to its database's `max_item_size`, 36 MiB by
default), so a body is never taken at its word.  A Content-Length over the limit is refused
(413) before a byte of the body is read, and the bytes are counted as they arrive, so a
chunked body, or a compressed one (aiohttp inflates it, and its Content-Length counts the
compressed bytes), is refused as soon as it passes the limit.  A body that ends early (the
client went away mid-upload) is `BodyIncomplete`: nothing of it reaches the store.

What a write of items may carry: twice `max_item_size`, and 1 MiB.  An item's size is its
subject and body in UTF-8, but a client sends them as JSON, which escapes: a line break costs
2 bytes (about 3 % more for base64 MIME, whose lines are 76 characters), `<` written `\\u003c`
6 (Go's default), a CJK character written `\\uXXXX` 6 for its 3 (Python's default); twice
covers these at the limit, and the 1 MiB the other fields of up to 1000 items.  No factor
covers every spelling (`\\u0001` spends 6 bytes on one, Python's default 6 on a Cyrillic
letter's 2), so a client writing items near the limit sends its text as UTF-8 (orjson, or
`ensure_ascii=False`).  Once parsed, each item is held to `max_item_size`.  So
an over-large request costs the node at most its limit before it is refused.

A write of items whose bodies are large has them taken out of its JSON in place first, each
held once, as its bytes (`json_bodies.py`, `replication_node/http/items_body.py`).  Else an
item costs the node about twice its size here: the bytes are decoded to text and dropped,
then the text is parsed and dropped, so at most two copies live at once (the bytes and the
text, then the text and the item).  `request.json()` keeps the bytes while it decodes and
parses them: three copies; so does orjson, which copies its input before it parses (a 36 MiB
item's peak: three times its size with either, twice here, measured; orjson parses at about
700 MB/s, the stdlib's parser at 500).
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from aiohttp import web
from aiohttp.web_urldispatcher import _default_expect_handler  # aiohttp's 100 Continue

from dag_common.config import MIB, ClusterConfig
from dag_common.counted_text import CountedText
from dag_common.errors import BadRequest, BodyIncomplete, RequestTooLarge
from dag_common.json_bodies import LARGE, BadBody, TakenBody, take_out

logger = logging.getLogger(__name__)

# Every body but a write of items (names, reasons, targets): the largest valid one, a
# mailbox with 1000 folders of 256 characters each escaped as JSON, is under 3.1 MB.
SMALL_BODY_SIZE = 4 * MIB
# What a write of items carries besides its items' text: their other fields.
ITEMS_ENVELOPE = MIB


def bytes_and_mib(size: int) -> str:
    """A size as an error names it: `65536 bytes (0.0625 MiB)`."""
    return f"{size} bytes ({size / MIB:.4g} MiB)"


@dataclass(frozen=True)
class BodyLimit:
    """What a request may carry: `size` bytes, `what` the limit is (for the 413), and the
    database's max_item_size for a write of items."""

    size: int
    what: str
    max_item_size: int | None = None

    def details(self) -> dict[str, object]:
        """The limit as the 413 answer gives it besides its message."""
        out: dict[str, object] = {"limit": self.size}
        if self.max_item_size is not None:
            out["max_item_size"] = self.max_item_size
        return out


SMALL_BODY = BodyLimit(SMALL_BODY_SIZE, "of a request body other than a write of items")


def items_body_size(max_item_size: int) -> int:
    """The most bytes a write of items may carry, its items at most `max_item_size` each."""
    return 2 * max_item_size + ITEMS_ENVELOPE


def max_item_size_for(config: ClusterConfig, database: str) -> int:
    """`database`'s max_item_size; the default for a database the config does not name
    (the write is then refused as NotFound, not for its size)."""
    try:
        return config.max_item_size_of(config.database(database))
    except KeyError:
        return int(config.defaults.max_item_size)


def items_limit(database: str, max_item_size: int) -> BodyLimit:
    """What a write of items to `database`, whose max_item_size is given, may carry."""
    return BodyLimit(
        items_body_size(max_item_size),
        f"of a write of items to {database} (twice its max_item_size of "
        f"{bytes_and_mib(max_item_size)}, and 1 MiB, for JSON's escapes and the items' other "
        "fields)",
        max_item_size,
    )


def body_share(request: web.Request, limit: BodyLimit) -> int:
    """What reading the request's body may hold, for its share of a memory budget: its
    declared length, or as much as `limit` lets a body without one grow to."""
    return min(request.content_length or limit.size, limit.size)


async def read_body(request: web.Request, limit: BodyLimit) -> bytearray:
    """The request's body, read whole but never past `limit`: RequestTooLarge for a
    Content-Length over it, before a byte is read, or as soon as the bytes pass it;
    BodyIncomplete if the body ends before its end, BadRequest if it does not inflate."""
    declared = request.content_length
    if declared is not None and declared > limit.size:
        logger.info(
            "%s %s: refused a body of %d bytes, over the %d-byte limit, unread",
            request.method,
            request.path,
            declared,
            limit.size,
        )
        raise RequestTooLarge(
            f"request body of {declared} bytes is over the limit of "
            f"{bytes_and_mib(limit.size)} {limit.what}; nothing read or written",
            limit.details(),
        )
    # Filled in place when its length is known (and is what is read: no Content-Encoding):
    # a buffer grown chunk by chunk is copied as it grows, which held a 30 MiB body about
    # twice at its last growth (issue 52).
    plain = declared is not None and "Content-Encoding" not in request.headers
    body = bytearray(declared) if plain and declared else bytearray()
    filled = 0
    try:
        while chunk := await request.content.readany():
            end = filled + len(chunk)
            if end <= len(body):
                body[filled:end] = chunk
            else:
                del body[filled:]
                body += chunk
            filled = end
            if filled > limit.size:
                logger.info(
                    "%s %s: refused a body past the %d-byte limit after %d bytes",
                    request.method,
                    request.path,
                    limit.size,
                    filled,
                )
                raise RequestTooLarge(
                    f"request body is over the limit of {bytes_and_mib(limit.size)} "
                    f"{limit.what} (refused after {filled} bytes); nothing written",
                    limit.details(),
                )
        del body[filled:]  # ended short of its length: aiohttp said so, or it is all
    except ConnectionResetError as exc:
        # aiohttp's "Connection lost": the client closed (or half-closed) mid-upload.  The
        # answer goes nowhere; what matters is that nothing is written.
        expected = f"of {declared} " if declared is not None else ""
        logger.info(
            "%s %s: the body ended after %d %sbytes (%s); nothing written",
            request.method,
            request.path,
            filled,
            expected,
            exc,
        )
        raise BodyIncomplete(
            f"request body ended after {filled} {expected}bytes ({exc}); nothing written"
        ) from None
    except web.RequestPayloadError as exc:  # a compressed body that does not inflate
        # Nothing more can be read of it: so that aiohttp, after the answer, does not try
        # to drain it and log its error again as unhandled (the connection is closed).
        request.content.feed_eof()
        why = " ".join(str(exc).split())  # aiohttp's "400, message:\n  Can not decode …"
        raise BadRequest(f"request body cannot be read: {why}") from None
    return body


def body_text(raw: bytearray) -> str:
    """The body as text (the caller drops the bytes right after); BadRequest if it is not
    UTF-8."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BadRequest(f"request body is not JSON: not UTF-8 ({exc})") from None


async def read_json_taking_out(
    request: web.Request, limit: BodyLimit, whose: str
) -> tuple[Any, dict[str, TakenBody]]:
    """The request's JSON parsed, each body of `LARGE` bytes or more taken out in place
    (`json_bodies.take_out`: held once, as its UTF-8 bytes) and standing in the parsed value
    as its placeholder, which the dict answered maps to it (empty: none was taken out).
    BadRequest naming `whose` for a large body that is not a JSON string of UTF-8."""
    raw = await read_body(request, limit)
    taken = None
    if len(raw) >= LARGE:
        try:
            taken = await asyncio.to_thread(take_out, raw)
        except BadBody as exc:
            raise BadRequest(f"request body is not JSON: {whose} is {exc}") from None
    if taken is None:
        return parse_json(body_text(raw)), {}
    del raw  # the last body's buffer now, held by `taken`
    data = parse_json(body_text(bytearray(taken.json)))
    return data, dict(zip(taken.placeholders, taken.bodies, strict=True))


def parse_json(text: str) -> Any:
    """JSON from text; BadRequest if it is not JSON."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise BadRequest(f"request body is not JSON: {exc}") from exc
    except RecursionError as exc:
        raise BadRequest("request body is nested too deeply") from exc


def utf8_size(text: str) -> int:
    """The bytes of `text` in UTF-8 (an ASCII str is not copied to count them, a counted
    one not counted again: `counted_text`)."""
    if type(text) is CountedText:
        return text.utf8_size
    return len(text) if text.isascii() else len(text.encode("utf-8"))


class SizedItem(Protocol):
    """An item as its size is counted: its subject and body (and its id, to name it)."""

    @property
    def subject(self) -> str: ...
    @property
    def body(self) -> str: ...
    @property
    def item_id(self) -> str | None: ...


def check_item_sizes(
    items: Sequence[SizedItem], *, database: str, max_item_size: int, batch: bool
) -> None:
    """RequestTooLarge naming the first item whose subject and body are over
    `max_item_size` bytes in UTF-8 (`items.N` in a batch)."""
    for index, item in enumerate(items):
        size = utf8_size(item.subject) + utf8_size(item.body)
        if size <= max_item_size:
            continue
        which = f"items.{index}" if batch else "the item"
        if item.item_id is not None:
            which += f" (item_id {item.item_id!r})"
        details: dict[str, object] = {"max_item_size": max_item_size, "item_size": size}
        if batch:
            details["item"] = index
        if item.item_id is not None:
            details["item_id"] = item.item_id
        raise RequestTooLarge(
            f"{which} is {size} bytes (its subject and body in UTF-8), over the "
            f"max_item_size of {database}, {bytes_and_mib(max_item_size)}; nothing written",
            details,
        )


def expect_within(
    limit_of: Callable[[web.Request], BodyLimit],
) -> Callable[[web.Request], Awaitable[web.StreamResponse | None]]:
    """A route's `Expect: 100-continue` handler that asks for the body only when its
    Content-Length is within the limit.  Over it, no 100 is sent and the handler answers
    413 at once (a final status instead of 100, as RFC 9110 allows), so a client such as
    curl never uploads it.  (Expect handlers run before the middlewares: the 413 itself
    comes from the handler, after the token check.)"""

    async def handler(request: web.Request) -> web.StreamResponse | None:
        declared = request.content_length
        if declared is not None and declared > limit_of(request).size:
            return None
        return await _default_expect_handler(request)

    return handler
