"""A message as the transport takes it, the item it becomes in a mailbox, and the queue's
state as `GET /v1/queue` answers it (read by `transport status` without the service)."""

from __future__ import annotations

import codecs
import dataclasses
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cached_property
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, StrictStr, model_validator

from dag_common.api_types import Folder, Name, Text
from dag_common.mailbox_digest import utf8_size  # http_body's would bring aiohttp.web
from dag_common.rfc822 import (
    BodyFormat,
    Raw,
    message_head,
    message_pieces,
    message_size,
    message_slices,
    subject_of,
    subject_of_body,
)

# A message id is the sender's (RFC 5322 Message-ID or any unique text): printable, bounded.
MessageId = Annotated[StrictStr, Field(min_length=1, max_length=998, pattern=r"^[\x21-\x7e]+$")]
MAX_RECIPIENTS = 1000


class MessageIn(BaseModel):
    """POST /v1/messages: one message for one or more mailboxes."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    message_id: MessageId
    # the mailbox names and folders a node takes, and text UTF-8 can carry
    recipients: Annotated[list[Name], Field(min_length=1, max_length=MAX_RECIPIENTS)]
    folder: Folder = "Inbox"
    subject: Text = ""
    body: Text = ""
    # "message": the body is an RFC 5322 message (dag_common/rfc822.py), its subject read
    # from its headers; what the SMTP and LMTP listeners and `message/rfc822` submit.
    format: BodyFormat = BodyFormat.TEXT

    @model_validator(mode="after")
    def _subject_of_a_message(self) -> MessageIn:
        if self.format.is_message and self.subject and self.subject != self.stored_subject:
            raise ValueError("a message's subject is its Subject header: give none, or that one")
        return self

    @cached_property
    def stored_subject(self) -> str:
        """The subject the item carries: a message's is read from its headers."""
        if self.format.is_message:
            return subject_of_body(self.body, self.format)
        return self.subject

    @property
    def size(self) -> int:
        """The item's size as the node counts it against max_item_size: subject and body
        in UTF-8 (a message's subject counted as read from it: never less than the node's
        count)."""
        return utf8_size(self.stored_subject) + utf8_size(self.body)


# Bytes of a message checked at a time for UTF-8 (`message_format`): no text of it whole.
_SLICE = 1 << 20
# ... as views of it, each decoded into a text under the allocator's mmap threshold
# (`dag_common.memory`): from the heap, not a fresh mapping faulted in and dropped (a 1 MiB
# slice copied and decoded was two of them a message, ~1.2 ms of the transport's CPU a MiB).
_CHECK = 64 * 1024
_HIGH = bytes(range(0x80, 0x100))


def message_format(parts: tuple[bytes | bytearray, ...]) -> tuple[BodyFormat, int]:
    """The format that keeps the message `parts` (its bytes, in order) byte for byte, and
    the size in UTF-8 of the body that format gives (what a node counts): as
    `rfc822.body_of_message` decides, without a text of the message.  ASCII, as nearly all
    mail is, is told by `bytes.isascii`; other bytes are decoded a slice at a time and
    the text let go (a part all ASCII, and no character begun before it, is not: a large
    message's attachment, in base64, is ASCII whatever its text is)."""
    total = sum(map(len, parts))
    if all(p.isascii() for p in parts):
        return BodyFormat.MESSAGE, total
    decoder = codecs.getincrementaldecoder("utf-8")()
    try:
        for part in parts:
            if part.isascii() and not decoder.getstate()[0]:  # no character cut before it
                continue
            with memoryview(part) as view:  # its slices are views, not copies
                for start in range(0, len(part), _CHECK):
                    decoder.decode(view[start : start + _CHECK])
        decoder.decode(b"", final=True)
    except UnicodeDecodeError:  # read as Latin-1: each byte past 0x7f two bytes in UTF-8
        high = sum(
            len(s) - len(s.translate(None, _HIGH))
            for part in parts
            for s in (part[i : i + _SLICE] for i in range(0, len(part), _SLICE))
        )
        return BodyFormat.MESSAGE_8BIT, total + high
    return BodyFormat.MESSAGE, total


@dataclass(frozen=True)
class Queued:
    """A message as the queue keeps it: its body as bytes (a message's own bytes, a text
    item's body in UTF-8), in `parts` that are written one after the other and never joined
    for a large one (or, posted as JSON, its `text`); the fields a delivery needs computed
    once, from its headers only."""

    message_id: str
    recipients: tuple[str, ...]
    folder: str
    subject: str  # a message's is read from its headers (what the node reads too)
    parts: tuple[bytes | bytearray, ...]
    format: BodyFormat
    size: int  # the item's size as the node counts it (subject and body in UTF-8)
    # A body posted as JSON comes as text: kept so, encoded a slice at a time as it is
    # written (`chunks`), never whole beside it (`parts` is then empty).
    text: str | None = None

    @property
    def length(self) -> int:
        """Bytes of the body."""
        if self.text is None:
            return sum(map(len, self.parts))
        if self.format.is_message:
            return message_size(self.text, self.format)
        return utf8_size(self.text)

    def chunks(self) -> Iterator[bytes | bytearray]:
        """The body's bytes, in order: the parts, or the text's encoded a slice at a time."""
        text = self.text
        if text is None:
            yield from self.parts
        elif self.format.is_message:
            yield from message_slices(text, self.format)
        else:
            for start in range(0, len(text), _SLICE):
                yield text[start : start + _SLICE].encode("utf-8", "surrogatepass")

    @classmethod
    def of_message(
        cls,
        head: bytes,
        raw: Raw,
        *,
        message_id: str,
        recipients: list[str],
        folder: str,
    ) -> Queued:
        """A message as it came (`raw`: whole, or a DATA's pieces) behind the header fields
        the transport puts in front (`head`: its trace, a Message-ID; never a Subject), its
        subject read from its header section alone.  ValidationError: an envelope
        `MessageIn` would refuse (the message id, a recipient's or the folder's name)."""
        MessageIn(message_id=message_id, recipients=recipients, folder=folder)
        parts = (head, *message_pieces(raw)) if head else message_pieces(raw)
        fmt, body_size = message_format(parts)
        subject = subject_of(message_head(raw))
        return cls(message_id, tuple(recipients), folder, subject, parts, fmt,
                   utf8_size(subject) + body_size)  # fmt: skip

    @classmethod
    def of(cls, message: MessageIn) -> Queued:
        """A message posted as JSON (`MessageIn`): a text item's body in UTF-8, a
        message's as the bytes its format says."""
        return cls(message.message_id, tuple(message.recipients), message.folder,
                   message.stored_subject, (), message.format, message.size,
                   message.body)  # fmt: skip

    def replace(self, *, recipients: list[str]) -> Queued:
        return dataclasses.replace(self, recipients=tuple(recipients))


@dataclass(frozen=True)
class Delivery:
    """One recipient's copy of a queued message: what the delivery loop works on.  Its body
    is not here: it stays in the queue's file until the delivery is tried (`QueueStore.items`),
    so a queue of thousands of large messages, waiting out a failover, costs the transport
    their ids, not their bodies."""

    id: int
    message_id: str
    recipient: str
    folder: str
    size: int  # the item's size as the node counts it (subject and body in UTF-8)
    tries: int
    failures: int
    queued: float  # wall time (epoch seconds) it was first queued: message_expiration


class DumpsterState(BaseModel):
    """One database's transport dumpster: the delivered messages it keeps."""

    database: str
    messages: int
    bytes: int


class QueueState(BaseModel):
    """`GET /v1/queue`: deliveries by state, those waiting now, and the dumpsters."""

    transport: str
    deliveries: dict[str, int]
    waiting: int
    dumpsters: list[DumpsterState]
