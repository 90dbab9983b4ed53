"""A FETCH's message bytes: read ahead through the node client, parsed only when asked.

pymap writes a FETCH's answers one message at a time, loading each message's content
(`Message.load_content`) just before its line is written; with one GET …/message each, in
turn, the front waited for the node once per message (29% of a `UID FETCH 1:*
(BODY.PEEK[])`, bench/README.md).  A FETCH that needs bodies gives its messages a `Bodies`
window: the GETs of the next `AHEAD` messages are in flight while one is written, and a
body is let go once handed over, so a command holds at most `AHEAD` bodies whatever its range.
The window starts at the first body asked for: a FETCH of FLAGS reads none.

And a body is MIME-parsed only when an item needs its structure (`RawLoaded`): `BODY[]`,
`BODY.PEEK[]`, `RFC822` and their partials are the stored bytes, and `RFC822.SIZE` their
length, where pymap parsed every header of every message through the `email` package
(27% of the same fetch).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from pymap.bytes import Writeable
from pymap.message import BaseLoadedMessage
from pymap.mime import MessageContent
from pymap.parsing.specials import FetchRequirement

AHEAD = 8  # message bodies one FETCH has in flight, at most

Get = Callable[[str], Awaitable[bytes | None]]


class Bodies:
    """The bodies of a FETCH's messages, in the order written, `AHEAD` read ahead."""

    def __init__(self, item_ids: Sequence[str], get: Get, *, ahead: int = AHEAD) -> None:
        self._ids = list(item_ids)
        self._at = {item: i for i, item in enumerate(self._ids)}
        self._get = get
        self._ahead = ahead
        self._started = 0  # the GETs started so far: the first `_started` ids
        self._pending: dict[str, asyncio.Future[bytes | None]] = {}

    async def get(self, item_id: str) -> bytes | None:
        """`item_id`'s bytes (None: gone), the next ones' GETs started meanwhile."""
        at = self._at.get(item_id)
        if at is None:
            return await self._get(item_id)
        self._start(at + self._ahead)
        future = self._pending.pop(item_id, None)
        if future is None:  # asked twice, or behind the window: read it now
            return await self._get(item_id)
        return await future

    def _start(self, upto: int) -> None:
        while self._started < min(upto, len(self._ids)):
            item = self._ids[self._started]
            self._started += 1
            if item not in self._pending:
                future = self._pending[item] = asyncio.ensure_future(self._get(item))
                future.add_done_callback(_retrieved)


def _retrieved(future: asyncio.Future[Any]) -> None:
    """A GET's failure is the command's (awaited by `get`); one never awaited (the answer
    was not written whole: the client went) is not logged as never retrieved."""
    if not future.cancelled():
        future.exception()


class RawLoaded(BaseLoadedMessage):
    """A message's content from its stored bytes, parsed on first need: the whole message
    and its size are the bytes themselves."""

    __slots__ = ["_raw"]

    def __init__(self, message: Any, requirement: FetchRequirement, raw: bytes) -> None:
        super().__init__(message, requirement, None)
        self._raw = raw

    @property
    def content(self) -> MessageContent:
        if self._content is None:
            self._content = MessageContent.parse(self._raw)
        return self._content

    def __bytes__(self) -> bytes:
        return self._raw

    def get_body(self, section: Sequence[int] | None = None, binary: bool = False) -> Writeable:
        if not section and not binary:
            return Writeable.wrap(self._raw)
        return super().get_body(section, binary)

    def get_size(self, section: Sequence[int] | None = None) -> int:
        if not section:
            return len(self._raw)
        return super().get_size(section)
