"""The read side of a copy's store, as the API's GET routes see it: the active copy (its LLR
overlay merged in) or a passive copy's database file.  Its rows are typed (frozen named
tuples, the tables' columns); the routes turn them into JSON.  A folder's STATUS is the
store API's own `FolderStatus`, which the route answers as it is."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, NamedTuple, Protocol

from dag_common.items_query import ItemsQuery
from dag_common.mailbox_digest import DigestRow
from dag_common.rfc822 import BodyFormat
from dag_common.store_api import FolderStatus

if TYPE_CHECKING:
    from replication_node.storage.file_reads import FileReads, Held


class MailboxRow(NamedTuple):
    """A mailbox as its copy holds it (a `mailboxes` row)."""

    mailbox: str
    display_name: str
    locked: bool
    soft_deleted: bool
    change_number: int
    uidvalidity_next: int = 0  # the UIDVALIDITY the next folder created gets (0: not numbered)


class FolderRow(NamedTuple):
    """A folder as its copy holds it (a `folders` row): its IMAP counters.  `uidvalidity`
    0: a folder of a file from before them, not numbered yet (`AssignUids`).
    `modseq_floor`: the modseq below which none of its items is reported (`ReserveLost`
    sets it: `ops.floored`)."""

    mailbox: str
    folder: str
    change_number: int
    uidvalidity: int = 0
    uid_next: int = 1
    highest_modseq: int = 0
    modseq_floor: int = 0

    def status(self, messages: int, unseen: int) -> FolderStatus:
        """The folder's STATUS as the store API answers it: the row's counters (its mailbox
        and change number are not the answer's, which leaves them out), with what it holds:
        live items, and those of them without `\\Seen`."""
        return FolderStatus(**self._asdict(), messages=messages, unseen=unseen)


class ItemRow(NamedTuple):
    """An item, or its tombstone (`deleted`), as its copy holds it (an `items` row).

    Read without its body (a listing's `bodies=false`): `body` is "" and `body_hash`, the
    body's SHA-256 the row keeps for the digest, stands for it ("" for a tombstone);
    `size` is still the body's.  `format`: what the body is (`dag_common.rfc822`: text,
    or a message kept byte for byte); a tombstone's is text.  `uid`, `modseq`, `flags`
    (system flags and keywords, sorted) and `received` (INTERNALDATE, RFC 3339): its IMAP
    state; a tombstone keeps its `uid` and has the expunge's `modseq`."""

    mailbox: str
    item_id: str
    folder: str
    subject: str
    body: str
    size: int  # the body's, in UTF-8
    change_number: int
    deleted: bool
    commit_time: str
    body_hash: str = ""
    format: BodyFormat = BodyFormat.TEXT
    uid: int = 0
    modseq: int = 0
    flags: tuple[str, ...] = ()
    received: str = ""

    def listed_size(self, bodies: bool) -> int:
        """What the row weighs in a listing, as a page cut by bytes counts it: its body, or,
        listed without bodies, its subject and the rest of the row."""
        return self.size if bodies else len(self.subject) + ROW_BYTES


# What a row listed without its body weighs besides its subject (ids, folder, hash, fields).
ROW_BYTES = 256


class MailboxReader(Protocol):
    """The read side of a copy's store: the active copy (its LLR overlay merged in) or a
    passive copy's database file."""

    def mailboxes(self) -> list[MailboxRow]: ...

    def mailbox(self, name: str) -> MailboxRow | None: ...

    def folders(self, mailbox: str) -> list[str]: ...

    def folder_rows(self, mailbox: str) -> list[FolderRow]: ...

    def folder_status(self, mailbox: str) -> list[FolderStatus]: ...

    def folder_items(self, mailbox: str, folder: str, since_modseq: int = 0) -> list[ItemRow]: ...

    def listing_apart(
        self, mailbox: str, folder: str, since_modseq: int = 0
    ) -> Callable[[], list[ItemRow] | None] | None:
        """`folder_items` (bodiless) to read in a worker thread, which answers None should
        its read not do (the caller lists on the loop then); None: list on the loop."""
        ...

    def bodies_apart(self, mailbox: str, ids: Sequence[str]) -> tuple[FileReads, Held]:
        """The file to read the bodies of `ids` from in a worker thread, and what the reader
        holds of them apart from that file (`file_reads.Held`), taken on the loop."""
        ...

    def moved_out(self, mailbox: str, uidvalidity: int, since_modseq: int) -> list[int]: ...

    def items(self, mailbox: str, since_change: int = 0) -> list[ItemRow]: ...

    def items_page(self, mailbox: str, query: ItemsQuery, *, blobs: bool = False) -> ItemsPage:
        """A page of the changes `query` asks for (its `count` aside: `live_count`);
        `blobs`: a body kept apart left to be read a part at a time as it is written."""
        ...

    def live_count(self, mailbox: str, since_change: int) -> int: ...

    def digest_rows(self, mailbox: str) -> list[DigestRow]: ...

    def item(self, mailbox: str, item_id: str) -> ItemRow | None: ...


@dataclass(frozen=True, slots=True)
class ItemsPage:
    """Part of a mailbox's changes after a change number, in change-number order.

    `through`: every change numbered up to it is in the page (or was superseded by a later
    one), so the next page asks for the changes after it; `complete`: nothing is after it.
    """

    items: list[ItemRow]
    through: int
    complete: bool
