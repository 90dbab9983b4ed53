"""A message as the transport takes it, the item it becomes in a mailbox, and the queue's
state as `GET /v1/queue` answers it (read by `transport status` without the service)."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, StrictStr, model_validator

from dag_common.api_types import Folder, Name, Text
from dag_common.mailbox_digest import utf8_size  # http_body's would bring aiohttp.web
from dag_common.rfc822 import BodyFormat, subject_of_body

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
