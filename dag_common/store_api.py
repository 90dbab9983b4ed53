"""What the mover needs from the nodes' store API: a Protocol and its frozen answers.

`node_client.NodeStoreClient` implements it over HTTP; tests pass a small in-memory fake.
Every answer names the epoch (stream incarnation) of the copy that gave it: a write is only
as durable as the incarnation that acknowledged it, and a read only describes that
incarnation.  0 means the node did not say (an older node): no check is possible then.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from dag_common.mailbox_digest import content_hash, utf8_size


def utf8_len(text: str) -> int:
    """The length of `text` in UTF-8: none of it copied when it is ASCII, a slice at a time
    otherwise (a 36 MiB body is not encoded whole to be counted)."""
    return utf8_size(text)


@dataclass(frozen=True, slots=True)
class Item:
    """One item of a mailbox, or its tombstone (`deleted`).

    `unreadable`: the source could not give this change (why, in words): its row answers an
    error, or what came back is not an item; `item_id` is "" when not even that is known.
    The mover skips it as a bad item (`item_limits`)."""

    item_id: str
    folder: str
    subject: str
    body: str
    change_number: int
    deleted: bool = False
    unreadable: str = ""

    @classmethod
    def unreadable_at(cls, change_number: int, why: str, item_id: str = "") -> Item:
        """A change of the source that could not be read."""
        return cls(item_id, "", "", "", change_number, unreadable=why)

    @property
    def size(self) -> int:
        """The item's size as a node's max_item_size counts it: subject and body in UTF-8."""
        return utf8_len(self.subject) + utf8_len(self.body)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Item:
        return cls(
            item_id=data["item_id"],
            folder=data["folder"],
            subject=data["subject"],
            body=data["body"],
            change_number=int(data["change_number"]),
            deleted=bool(data["deleted"]),
        )

    def entry(self) -> dict[str, str]:
        """The item as a write carries it (the target numbers it itself)."""
        return {
            "item_id": self.item_id,
            "folder": self.folder,
            "subject": self.subject,
            "body": self.body,
        }

    def same_content(self, other: Item) -> bool:
        """Same folder and content: what the mailbox digest compares."""
        return (self.folder, content_hash(self.subject, self.body)) == (
            other.folder,
            content_hash(other.subject, other.body),
        )


@dataclass(frozen=True, slots=True)
class Mailbox:
    """A mailbox as one copy serves it."""

    name: str
    display_name: str
    folders: tuple[str, ...]
    locked: bool
    soft_deleted: bool
    epoch: int = 0


@dataclass(frozen=True, slots=True)
class Items:
    """Items changed after a change number, by change number, tombstones included."""

    items: tuple[Item, ...]
    last_change_number: int  # every change up to it is in `items` (or superseded)
    epoch: int = 0
    more: bool = False  # a page: the changes after last_change_number are not in it
    live: int | None = None  # asked with `count`: live items after since_change, all pages


@dataclass(frozen=True, slots=True)
class Written:
    """A write's acknowledgement: the incarnation that made it durable."""

    epoch: int = 0
    change_number: int = 0
    generation: int = 0


@dataclass(frozen=True, slots=True)
class LogPosition:
    """Where a database's log stands on its active copy: every commit answered before the
    question lies below (`open_generation`, `durable`), and who follows it in block mode."""

    open_generation: int
    durable: int  # bytes of the open generation durable on the active
    open_records: bool  # False: the open generation holds only its header
    block_followers: tuple[str, ...]  # nodes whose copies follow the log in block mode
    passive_copies: tuple[str, ...]  # the database's other copies
    epoch: int = 0


@dataclass(frozen=True, slots=True)
class Rolled:
    """The target's log rolled: the generation closed, in which incarnation."""

    generation: int
    epoch: int = 0


@dataclass(frozen=True, slots=True)
class Digest:
    """A mailbox digest as a node computed it (dag_common.mailbox_digest)."""

    mailbox: str
    item_count: int
    digest: str
    last_change_number: int
    epoch: int = 0

    def matches(self, other: Digest) -> bool:
        """The same live items: ids, folders and contents."""
        return (self.item_count, self.digest) == (other.item_count, other.digest)


class NodeStore(Protocol):
    """The store calls a move makes, each to the active copy of a database.

    Raises `NodeCallError` when a node cannot answer or refuses (its HTTP status, if any)."""

    async def mailbox(self, database: str, mailbox: str) -> Mailbox | None: ...

    async def create_mailbox(
        self, database: str, mailbox: str, *, display_name: str, folders: list[str], locked: bool
    ) -> Written: ...

    async def create_folder(self, database: str, mailbox: str, folder: str) -> Written: ...

    async def items(
        self,
        database: str,
        mailbox: str,
        since_change: int,
        limit: int | None = None,
        *,
        count: bool = False,
    ) -> Items:
        """Changes after `since_change`; with `limit`, a page of about that many; with
        `count`, how many live items all the pages hold (`Items.live`)."""
        ...

    async def put_items(self, database: str, mailbox: str, items: list[Item]) -> Written: ...

    async def delete_item(self, database: str, mailbox: str, item_id: str) -> Written | None:
        """None: the item was not there (nothing to delete)."""
        ...

    async def delete_mailbox(self, database: str, mailbox: str) -> bool:
        """Remove a mailbox with its items (a cancelled move's target copy); False: it was
        not there."""
        ...

    async def set_state(self, database: str, mailbox: str, action: str) -> Written:
        """`action`: lock, unlock or soft-delete."""
        ...

    async def roll_log(self, database: str) -> Rolled: ...

    async def log_position(self, database: str) -> LogPosition: ...

    async def digest(self, database: str, mailbox: str) -> Digest | None:
        """None: no such mailbox on the active copy."""
        ...
