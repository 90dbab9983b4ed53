"""The node API's answers about mailboxes as a whole, as the node writes them and the
`replication-node mailbox` commands read them: where the mailbox directory places a mailbox
(GET /v1/mailboxes/{mailbox}) and a database's soft-deleted copies (GET
…/soft-deleted-mailboxes).

Every field is written, null included (`wire`): a reader tells "no active chosen yet" from
an older node's silence by the null.  A reader is lenient about fields it does not know."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class _Answer(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore")

    def wire(self) -> dict[str, object]:
        """The answer as the node sends it: every field, null included, in this order."""
        return self.model_dump(mode="json")


class MovingTo(_Answer):
    """The unfinished move holding a mailbox, and the database it moves it to (None: its
    request was not found)."""

    move_id: str
    target_database: str | None = None


class MailboxPlace(_Answer):
    """Where the mailbox directory places a mailbox: its database, that database's active
    (node, url, epoch: None while none was chosen) and the move holding it."""

    mailbox: str
    database: str
    active_node: str | None = None
    active_url: str | None = None
    epoch: int | None = None
    moving: MovingTo | None = None


class SoftDeletedMailbox(_Answer):
    """A soft-deleted copy of a mailbox, and where the directory places that mailbox now
    (None: nowhere)."""

    mailbox: str
    display_name: str = ""
    change_number: int = 0
    directory_database: str | None = None


class SoftDeletedMailboxes(_Answer):
    """A database's soft-deleted mailboxes, as its copy at `epoch` answers them."""

    database: str = ""
    mailboxes: tuple[SoftDeletedMailbox, ...] = ()
    epoch: int = 0
