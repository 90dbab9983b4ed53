"""A FETCH's message bytes: read ahead a batch at a time through the node client, parsed
only when asked.

pymap writes a FETCH's answers one message at a time, loading each message's content
(`Message.load_content`) just before its line is written.  With one GET …/message each the
front waited for the node once per message (29% of a `UID FETCH 1:* (BODY.PEEK[])`,
bench/README.md), and with 8 of them in flight still made a request, and the node an answer,
per 4 KiB message.  A FETCH that needs bodies gives its messages a `Bodies` window: its
messages cut into batches of about `BATCH_BYTES` by the sizes the listing gave, each read
with one `POST …/items/messages` (`dag_common.message_batch`), the batch being written and
`AHEAD` more in flight.  A body is let go once handed over and a batch once all of its are,
so a command holds about `(AHEAD + 1) * BATCH_BYTES` of bodies whatever its range.  The
window starts at the first body asked for: a FETCH of FLAGS reads none.

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

BATCH_BYTES = 1024 * 1024  # message bytes one read asks for (by the listing's sizes)
BATCH_IDS = 256  # messages one read asks for, at most
AHEAD = 2  # batches in flight beside the one being written

Get = Callable[[str], Awaitable[bytes | None]]
# The messages of `ids` answered (None: gone), up to about `max_bytes` of them: views of the
# node's answer (`message_batch.parse_answer`).
GetMany = Callable[[Sequence[str], int], Awaitable[dict[str, memoryview | None]]]


def batches(items: Sequence[tuple[str, int]], batch_bytes: int, most: int) -> list[list[str]]:
    """`items` (item id, size) cut in order into runs of about `batch_bytes` (a run ends at
    the item that reaches it) and `most` items at most."""
    out: list[list[str]] = []
    run: list[str] = []
    size = 0
    for item, n in items:
        run.append(item)
        size += n
        if size >= batch_bytes or len(run) >= most:
            out.append(run)
            run, size = [], 0
    if run:
        out.append(run)
    return out


class Bodies:
    """The bodies of a FETCH's messages, in the order written, `AHEAD` batches read ahead."""

    def __init__(
        self, items: Sequence[tuple[str, int]], get_many: GetMany, get: Get, *,
        batch_bytes: int = BATCH_BYTES, most: int = BATCH_IDS, ahead: int = AHEAD,
    ) -> None:  # fmt: skip
        self._batches = batches(items, batch_bytes, most)
        self._batch_of = {item: b for b, run in enumerate(self._batches) for item in run}
        self._get_many = get_many
        self._get = get
        self._batch_bytes = batch_bytes
        self._ahead = ahead
        self._started = 0  # the reads started so far: of the first `_started` batches
        self._pending: dict[int, asyncio.Future[dict[str, memoryview | None]]] = {}

    async def get(self, item_id: str) -> bytes | memoryview | None:
        """`item_id`'s bytes (None: gone), the next batches' reads started meanwhile."""
        b = self._batch_of.get(item_id)
        if b is None:
            return await self._get(item_id)
        self._start(b + 1 + self._ahead)
        future = self._pending.get(b)
        if future is None:  # asked twice, or behind the window: read it now
            return await self._get(item_id)
        answered = await future
        if item_id not in answered:  # handed over already (asked twice)
            return await self._get(item_id)
        raw = answered.pop(item_id)
        if not answered:
            self._pending.pop(b, None)
        return raw

    @property
    def held(self) -> int:
        """Bytes of bodies read and not handed over yet (the reads answered)."""
        return sum(len(raw) for future in self._pending.values()
                   if future.done() and not future.cancelled() and future.exception() is None
                   for raw in future.result().values() if raw is not None)  # fmt: skip

    def close(self) -> None:
        """Every read in flight cancelled and every body held let go (the window left)."""
        for future in self._pending.values():
            future.cancel()
        self._pending.clear()
        self._started = len(self._batches)

    def _start(self, upto: int) -> None:
        while self._started < min(upto, len(self._batches)):
            b = self._started
            self._started += 1
            future = self._pending[b] = asyncio.ensure_future(self._read(self._batches[b]))
            future.add_done_callback(_retrieved)

    async def _read(self, run: list[str]) -> dict[str, memoryview | None]:
        """A batch's messages, asked again from where an answer stopped (its byte bound)."""
        answered: dict[str, memoryview | None] = {}
        left = run
        while left:
            got = await self._get_many(left, 2 * self._batch_bytes)
            if left[0] not in got:  # the node answers the first id asked for, at least
                raise RuntimeError(f"the node answered none of {len(left)} messages asked for")
            answered.update(got)
            left = [item for item in left if item not in answered]
        return answered


def _retrieved(future: asyncio.Future[Any]) -> None:
    """A read's failure is the command's (awaited by `get`); one never awaited (the answer
    was not written whole: the client went) is not logged as never retrieved."""
    if not future.cancelled():
        future.exception()


class RawLoaded(BaseLoadedMessage):
    """A message's content from its stored bytes, parsed on first need: the whole message
    and its size are the bytes themselves."""

    __slots__ = ["_raw"]

    def __init__(
        self, message: Any, requirement: FetchRequirement, raw: bytes | memoryview
    ) -> None:
        super().__init__(message, requirement, None)
        self._raw = raw if isinstance(raw, bytes) else bytes(raw)  # a view of a batch's answer

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
