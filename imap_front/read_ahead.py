"""A session's read-ahead across FETCHes of one message's body each, in the folder's order.

`mbsync` (Debian isync) copies a folder by pipelining one `UID FETCH n (BODY.PEEK[])` per
message, every message's command sent before the first is answered (bench/README.md, "imap:
mbsync's pipelined FETCHes").  A FETCH's own read-ahead (`fetching.Bodies`) has one message
to read there, so each command waited for its own GET …/message: one round trip to the node
per message, the front and the node idle in turn.

Here a session that fetches the body of the message listed right after the one whose body it
fetched last (a sequential run) is given a window over the messages that follow in the
folder's UID order (`WINDOW_IDS` at most, each with the UID it is listed under), read as
`fetching.Bodies` reads a range: batches of about `BATCH_BYTES` by the listed sizes, `AHEAD`
more in flight beside the one being served.  The next commands take their body from it.

What it holds, and for how long, is bounded: at most `(AHEAD + 1)` batches of bodies
(`Bodies`' window: a batch is let go once all of its are handed over), the window's item ids
(pointers to the rows' strings), and it is dropped (its reads cancelled) as soon as the session
leaves the run: a body asked out of order, another folder, a FETCH of many messages, a SELECT,
a NOOP or an IDLE (`Session`).  A body is served only for the UID it was listed under when the
window was made (a message put again with other bytes gets another UID), so the bytes are the
node's for that message, exactly.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

from imap_front.fetching import Bodies, Get, GetMany

WINDOW_IDS = 1024  # messages a window covers, at most (the next one made as it runs out)
BATCH_BYTES = 256 * 1024  # message bytes one read asks for (by the listing's sizes)
BATCH_IDS = 128  # messages one read asks for, at most
AHEAD = 2  # batches in flight beside the one being served


@dataclass(frozen=True, slots=True)
class Read:
    """The command a connection is running: its number on the connection, and whether the
    client had sent the next command's line before this one was answered (pipelined)."""

    number: int
    pipelined: bool


NO_COMMAND = Read(0, False)  # outside a connection's command (frozen)
COMMAND: ContextVar[Read] = ContextVar("imap_front_command", default=NO_COMMAND)

# (uid, item id, size) of the messages from a UID on, in the folder's UID order, at most n.
Coming = Callable[[int], Sequence[tuple[int, str, int]]]


class ReadAhead:
    """One session's window (none until a sequential run is seen)."""

    def __init__(
        self, *, window_ids: int = WINDOW_IDS, batch_bytes: int = BATCH_BYTES,
        most: int = BATCH_IDS, ahead: int = AHEAD,
    ) -> None:  # fmt: skip
        self._window_ids = window_ids
        self._batch_bytes = batch_bytes
        self._most = most
        self._ahead = ahead
        self._key: Any = None  # the folder the run is in
        self._expect: int | None = None  # the UID listed after the last body served
        self._bodies: Bodies | None = None
        self._uids: dict[int, str] = {}  # the window's messages: UID -> item id
        self._ran = 0  # the number of the last command served from a window (`COMMAND`)

    @property
    def holding(self) -> bool:
        """Whether a window is open."""
        return self._bodies is not None

    def source(
        self, key: Any, uid: int, item_id: str, after: int | None, coming: Coming,
        get_many: GetMany, get: Get,
    ) -> Bodies | None:  # fmt: skip
        """The window to take `uid`'s body (`item_id`) from, or None (read it alone).
        `key`: the folder; `after`: the UID listed after `uid` (None: the last); `coming`:
        the messages from `uid` on, for a new window."""
        if key != self._key:
            self.leave()
            self._key = key
        sequential = self._expect is not None and self._expect == uid
        self._expect = after
        if self._bodies is not None and self._uids.get(uid) == item_id:
            self._ran = COMMAND.get().number
            return self._bodies
        self.drop()
        if not sequential:
            return None
        self._ran = COMMAND.get().number
        listed = coming(self._window_ids)
        if len(listed) < 2:
            return None
        self._uids = {u: item for u, item, _ in listed}
        self._bodies = Bodies(
            [(item, size) for _, item, size in listed], get_many, get,
            batch_bytes=self._batch_bytes, most=self._most, ahead=self._ahead,
        )  # fmt: skip
        return self._bodies

    def continues(self) -> bool:
        """Whether this command (a FETCH) continues a run in the same breath: the session's
        command right before it was served from the window, and the client sent the one
        after it before this one was answered.  Such a FETCH need not poll the change feed
        first: the client asked for it before it could have seen an update anyway, and the
        poll of the command that ends the run (its next command not sent yet), or any other
        command's, tells what changed meanwhile."""
        now = COMMAND.get()
        return (
            self._bodies is not None and now.pipelined and now.number > 0
            and self._ran == now.number - 1
        )  # fmt: skip

    def drop(self) -> None:
        """Leave the run: the window's reads cancelled, its bodies let go."""
        if self._bodies is not None:
            self._bodies.close()
        self._bodies = None
        self._uids = {}

    def leave(self) -> None:
        """The session did something else (SELECT, NOOP, IDLE): no run to continue."""
        self.drop()
        self._key = self._expect = None
        self._ran = 0
