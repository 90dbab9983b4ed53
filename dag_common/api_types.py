"""The field types of the store API, shared by the node that serves it and every client
that speaks it (the mover, the transport): what a mailbox name, a folder, an item id and a
text are, checked the same way on both sides."""

from __future__ import annotations

import hashlib
from typing import Annotated

from pydantic import AfterValidator, Field, StrictStr

NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.@+-]{0,127}$"
FOLDER_PATTERN = r"^[^\x00-\x1f/\\][^\x00-\x1f]{0,255}$"
ITEM_ID_PATTERN = r"^[A-Za-z0-9_-]{1,64}$"
# An IMAP flag a message keeps (RFC 3501's flag, less \Recent, which no server stores): a
# system flag as RFC 3501 spells it, or a keyword (an atom: no space, control, "(){%*\"]\").
FLAG_PATTERN = r'^(\\(Answered|Flagged|Deleted|Seen|Draft)|[^\x00-\x20\x7f(){%*"\\\]]{1,64})$'
MAX_FLAGS = 64  # flags per message


def _utf8(value: str) -> str:
    if value.isascii():  # nothing to check, and no copy of a 36 MiB body to find that out
        return value
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ValueError(f"not valid UTF-8 text ({exc.reason} at {exc.start})") from None
    return value


Text = Annotated[StrictStr, AfterValidator(_utf8)]
Name = Annotated[StrictStr, Field(pattern=NAME_PATTERN)]
Folder = Annotated[Text, Field(pattern=FOLDER_PATTERN)]
ItemId = Annotated[StrictStr, Field(pattern=ITEM_ID_PATTERN)]
Flag = Annotated[StrictStr, Field(pattern=FLAG_PATTERN)]


def item_id_for(message_id: str) -> str:
    """The id of the item `message_id` becomes in every mailbox it is delivered to: the same
    for every delivery of it, so a second delivery replaces the first with the same content.
    A node's item id is at most 64 of [A-Za-z0-9_-], so it is a digest of the message id
    (SHA-256, 40 hex digits: 160 bits, no collision among any number of messages a
    mailbox will ever hold), prefixed so it is never taken for a mover's or a client's id."""
    return "m-" + hashlib.sha256(message_id.encode()).hexdigest()[:40]
