"""Many messages' bytes in one answer: `POST …/mailboxes/{mailbox}/items/messages` (issue 50).

An IMAP front's `UID FETCH 1:* (BODY.PEEK[])` read each body with its own HTTPS request
(`GET …/items/{id}/message`): a request's round trip and the node's work around it for
every 4 KiB message.  This route answers a list of item ids with their messages in one
answer, in the order asked, each as the bytes `GET …/message` answers (`rfc822.message_bytes`).

The request (JSON): `{"item_ids": [...], "max_bytes": n}`: 1 to `MAX_IDS` item ids, and the
most message bytes the answer should carry (at most `MAX_ANSWER_BYTES`, that by default).
The node stops after the message that reaches `max_bytes` (one message at least, however
large): the ids after it are not answered, and the caller asks for them again.

The answer (`CONTENT_TYPE`), records one after another, then the end:

    +<item_id> <size>\\n<size bytes>     a message, its bytes as stored
    -<item_id>\\n                        no such item (or deleted): the caller's "gone"
    .\\n                                 the end: every record before it is whole

An answer cut before `.` (the node failed once it had begun) is an error, never a shorter
batch.  Item ids are `[A-Za-z0-9_-]{1,64}` (`api_types.ITEM_ID_PATTERN`), so a record's
head needs no escaping.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

from dag_common.api_types import ItemId

CONTENT_TYPE = "application/x-dag-messages"
MAX_IDS = 1000  # item ids one request may ask for
MAX_ANSWER_BYTES = 16 * 1024 * 1024  # message bytes one answer carries, at most (and default)
END = b".\n"


class MessagesIn(BaseModel):
    """A request for messages' bytes: the ids in the order answered, the answer's bound."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    item_ids: Annotated[tuple[ItemId, ...], Field(min_length=1, max_length=MAX_IDS)]
    max_bytes: Annotated[int, Field(strict=True, ge=1, le=MAX_ANSWER_BYTES)] = MAX_ANSWER_BYTES


def found_head(item_id: str, size: int) -> bytes:
    """The head of a message's record; its `size` bytes follow."""
    return b"+%s %d\n" % (item_id.encode("ascii"), size)


def missing_record(item_id: str) -> bytes:
    """The record of an id with no message (no such item, or deleted)."""
    return b"-%s\n" % item_id.encode("ascii")


class BatchError(ValueError):
    """An answer that is not a whole batch (cut short, or not of this format)."""


def parse_answer(data: bytes) -> dict[str, memoryview | None]:
    """The messages of an answer by item id, in the order answered (None: missing), each a
    view of `data` (no copy: the answer is held once, until its last view is let go); the
    ids asked for and absent here were not reached (the answer's byte bound).  BatchError if
    the answer is cut or malformed."""
    view = memoryview(data)
    out: dict[str, memoryview | None] = {}
    at = 0
    end = len(data)
    while True:
        nl = data.find(b"\n", at)
        if nl < 0:
            raise BatchError(f"the answer is cut at byte {at} of {end}: no end record")
        head = data[at:nl]
        at = nl + 1
        if head == b".":
            if at != end:
                raise BatchError(f"{end - at} bytes after the end record")
            return out
        kind, rest = head[:1], head[1:]
        if kind == b"-":
            out[rest.decode("ascii")] = None
            continue
        item, _, size_text = rest.partition(b" ")
        if kind != b"+" or not size_text.isdigit():
            raise BatchError(f"a record head that is not one: {bytes(head[:80])!r}")
        size = int(size_text)
        if at + size > end:
            raise BatchError(f"the answer is cut in {item.decode('ascii', 'replace')}'s bytes")
        out[item.decode("ascii")] = view[at : at + size]
        at += size
