"""What the mover needs from the nodes' store API: a Protocol and its frozen answers.

`node_client.NodeStoreClient` implements it over HTTP; tests pass a small in-memory fake.
Every answer names the epoch (stream incarnation) of the copy that gave it: a write is only
as durable as the incarnation that acknowledged it, and a read only describes that
incarnation.  0 means the node did not say (an older node): no check is possible then.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from enum import StrEnum
from typing import Annotated, NamedTuple, Protocol, TypedDict

from pydantic import (
    AliasChoices,
    AwareDatetime,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    model_validator,
)

from dag_common.api_types import MAX_FLAGS, Flag, Folder, ItemId, Text
from dag_common.items_query import ItemsQuery
from dag_common.json_object import JsonObject
from dag_common.mailbox_digest import body_hash, item_term_of_hash, utf8_size
from dag_common.model import Lsn, Position
from dag_common.rfc822 import BodyFormat, subject_of_body

# A read with this request header set (to "1") is answered only by the mounted active: a
# passive copy refuses it 409 naming the active (`replication_node/http/context.reader_for`)
# rather than answer from its replay, which may be behind what the caller has seen there.
ACTIVE_ONLY_HEADER = "X-Active-Only"


def utf8_len(text: str) -> int:
    """The length of `text` in UTF-8: none of it copied when it is ASCII, a slice at a time
    otherwise (a 36 MiB body is not encoded whole to be counted)."""
    return utf8_size(text)


@dataclass(frozen=True, slots=True)
class Item:
    """One item of a mailbox, or its tombstone (`deleted`).

    `unreadable`: the source could not give this change (why, in words): its row answers an
    error, or what came back is not an item; `item_id` is "" when not even that is known.
    The mover skips it as a bad item (`item_limits`).

    Listed without its body (`ItemsQuery.bodies` off, what a reconcile compares):
    `body` is "", `body_hash` (the body's SHA-256, which the node keeps for the digest)
    stands for it and `body_size` says its size.  Such an item cannot be written.

    `format`: what the body is (`dag_common.rfc822`: text, or a message kept byte for byte);
    it is content, as the body is: a move carries it, a reconcile compares it.

    `uid`, `modseq`, `flags`, `received`: its IMAP state as the listing gives it (0 and
    empty from a node before them); a move writes them as they are (`entry`), so a client's
    cache of the source holds on the target."""

    item_id: str
    folder: str
    subject: str
    body: str
    change_number: int
    deleted: bool = False
    unreadable: str = ""
    body_hash: str = ""
    body_size: int | None = None  # listed without its body: the body's size in UTF-8
    format: BodyFormat = BodyFormat.TEXT
    uid: int = 0
    modseq: int = 0
    flags: tuple[str, ...] = ()
    received: str = ""

    @classmethod
    def unreadable_at(cls, change_number: int, why: str, item_id: str = "") -> Item:
        """A change of the source that could not be read."""
        return cls(item_id, "", "", "", change_number, unreadable=why)

    @property
    def has_body(self) -> bool:
        """False: listed without its body."""
        return self.body_size is None

    @property
    def size(self) -> int:
        """The item's size as a node's max_item_size counts it: subject and body in UTF-8."""
        body = utf8_len(self.body) if self.body_size is None else self.body_size
        return utf8_len(self.subject) + body

    def hashed_body(self) -> str:
        """The body's SHA-256 (hex): as listed, or taken from the body."""
        return self.body_hash or body_hash(self.body)

    def content(self) -> tuple[str, str, str, str]:
        """What the mailbox digest compares of two versions of an item, beside its id: its
        folder, its subject, its body's hash and its format."""
        return (self.folder, self.subject, self.hashed_body(), self.format)

    def imap_state(self) -> tuple[int, tuple[str, ...]]:
        """What a client caches of the item beside its content: its UID and its flags."""
        return (self.uid, self.flags)

    def term(self, mailbox: str) -> int:
        """The item's term in its mailbox's digest (`mailbox_digest`)."""
        hashed = self.hashed_body()
        return item_term_of_hash(
            mailbox, self.item_id, self.folder, self.subject, hashed, self.format
        )

    @classmethod
    def from_json(cls, data: JsonObject) -> Item:
        return cls(
            item_id=data["item_id"],
            folder=data["folder"],
            subject=data["subject"],
            body=data["body"],
            change_number=int(data["change_number"]),
            deleted=bool(data["deleted"]),
            format=_format_of(data),
            **_imap_of(data),
        )

    @classmethod
    def head_from_json(cls, data: JsonObject) -> Item:
        """An item of a listing without bodies (`body_hash` and `size` for the body); from
        a node that lists the body all the same (older than `bodies`), hashed here."""
        if "body_hash" not in data and "body" in data:
            with_body = cls.from_json(data)
            return replace(
                with_body,
                body="",
                body_hash="" if with_body.deleted else body_hash(with_body.body),
                body_size=utf8_len(with_body.body),
            )
        size = data["size"]
        if type(size) is not int or size < 0:
            raise TypeError(f"size is {size!r}")
        return cls(
            item_id=data["item_id"],
            folder=data["folder"],
            subject=data["subject"],
            body="",
            change_number=int(data["change_number"]),
            deleted=bool(data["deleted"]),
            body_hash=data["body_hash"],
            body_size=size,
            format=_format_of(data),
            **_imap_of(data),
        )

    def entry(self) -> dict[str, object]:
        """The item as a write carries it (`format` said unless it is text, as the node
        lists it); with its UID, modseq, flags and INTERNALDATE when it has a UID (a move's
        copy keeps them: a write with override_lock), else the target numbers it."""
        if not self.has_body:
            raise ValueError(f"item {self.item_id!r} was listed without its body: not written")
        entry: dict[str, object] = {
            "item_id": self.item_id,
            "folder": self.folder,
            "subject": self.subject,
            "body": self.body,
        }
        if self.format is not BodyFormat.TEXT:
            entry["format"] = self.format.value
        if self.uid:
            entry["uid"] = self.uid
            if self.modseq:
                entry["modseq"] = self.modseq
            if self.flags:
                entry["flags"] = list(self.flags)
            if self.received:
                entry["received"] = self.received
        return entry


class _Imap(TypedDict):
    """An item's IMAP state, as `Item` takes it."""

    uid: int
    modseq: int
    flags: tuple[str, ...]
    received: str


def _imap_of(data: JsonObject) -> _Imap:
    """An item's IMAP state as a listing says it (absent: none); TypeError if malformed."""
    uid, modseq = data.get("uid", 0), data.get("modseq", 0)
    flags, received = data.get("flags", ()), data.get("received", "")
    if type(uid) is not int or type(modseq) is not int or not isinstance(received, str):
        raise TypeError(f"uid {uid!r}, modseq {modseq!r}, received {received!r}")
    if not isinstance(flags, list | tuple) or not all(isinstance(f, str) for f in flags):
        raise TypeError(f"flags {flags!r}")
    return _Imap(uid=uid, modseq=modseq, flags=tuple(flags), received=received)


def _format_of(data: JsonObject) -> BodyFormat:
    """An item's format as a listing says it (absent: text); ValueError if it is none."""
    return BodyFormat(data.get("format", BodyFormat.TEXT))


# A character a message kept as Latin-1 cannot hold (`rfc822.BodyFormat.MESSAGE_8BIT`).
_NOT_LATIN_1 = re.compile(r"[^\x00-\xff]")


class ItemIn(BaseModel):
    """One item a write gives the store (POST …/mailboxes/{mailbox}/items), validated once,
    where it is built: by the node's HTTP edge from the request's JSON, or by a caller in
    process.  The node assigns an id when it has none, and numbers it.  Its size (subject
    and body in UTF-8) is held to the database's max_item_size by the route: the bound
    comes from the config, not from here."""

    # Strict strings (a number is not a name); a field it does not know is a typo, refused.
    model_config = ConfigDict(extra="forbid", frozen=True)

    item_id: ItemId | None = None
    folder: Folder = "Inbox"
    subject: Text = ""
    body: Text = ""
    format: BodyFormat = BodyFormat.TEXT
    # IMAP's: the flags it is stored with (an APPEND's), and its INTERNALDATE (absent: when
    # the node commits it).  The node gives it its folder's next UID, unless `uid` is given:
    # a move's copy keeps the source's UID and modseq (only with override_lock, the mover's),
    # and the folder's UIDNEXT goes past it.
    flags: Annotated[tuple[Flag, ...], Field(max_length=MAX_FLAGS)] = ()
    received: AwareDatetime | None = None
    uid: Annotated[int, Field(strict=True, ge=1, le=2**32 - 1)] | None = None
    modseq: Annotated[int, Field(strict=True, ge=1, le=2**63 - 1)] | None = None

    @model_validator(mode="after")
    def _numbered(self) -> ItemIn:
        if self.modseq is not None and self.uid is None:
            raise ValueError("a modseq is given only with the uid it goes with")
        return self

    @model_validator(mode="after")
    def _message(self) -> ItemIn:
        """A message's subject is its Subject header's (`rfc822.subject_of_body`): taken from
        it, and a different one given is refused; a message kept as Latin-1 holds bytes,
        characters up to U+00FF."""
        if not self.format.is_message:
            return self
        if self.format is BodyFormat.MESSAGE_8BIT:
            bad = _NOT_LATIN_1.search(self.body)
            if bad is not None:
                raise ValueError(
                    f"a {self.format.value} body holds bytes as Latin-1 characters: "
                    f"{bad.group()!r} at {bad.start()} is none"
                )
        derived = subject_of_body(self.body, self.format)
        if self.subject and self.subject != derived:
            raise ValueError(
                f"the subject {self.subject[:200]!r} is not the message's ({derived[:200]!r}): "
                "a message's subject is taken from its Subject header; give none, or that one"
            )
        object.__setattr__(self, "subject", derived)  # frozen: set once, where it is built
        return self


class _Answer(BaseModel):
    """An answer of the store API as both ends read it: frozen, and lenient about fields it
    does not know (a newer node may say more)."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    def wire(self) -> dict[str, object]:
        """The answer as the node sends it (the wire's field names, nothing unset)."""
        return self.model_dump(mode="json", by_alias=True, exclude_none=True)


class FolderStatus(_Answer):
    """A folder's IMAP state as GET …/mailboxes/{mailbox} lists it.  `modseq_floor`: the
    modseq below which none of its items is reported (a lossy failover's; 0 from a node
    from before it), which a move's final sync lifts the target's to."""

    folder: str
    uidvalidity: int = 0
    uid_next: int = 1
    highest_modseq: int = 0
    messages: int = 0
    unseen: int = 0
    modseq_floor: int = 0


def _none_if_empty(value: object) -> object:
    return value if value != "" else None


class Listed(NamedTuple):
    """A message of a folder's UID listing (no body), on the wire `[uid, item_id, flags,
    modseq, size, received, message_size]`: `received` its INTERNALDATE ("" and None: not
    known), `message_size` the bytes GET …/message serves (RFC822.SIZE) where the node's row
    tells it; None: not without reading them (a text item presented as mail, a Latin-1
    message), or a node that lists six fields (a rolling upgrade)."""

    uid: int
    item_id: str
    flags: tuple[str, ...]
    modseq: int
    size: int
    received: Annotated[datetime | None, BeforeValidator(_none_if_empty)]
    message_size: int | None = None


class FolderUids(_Answer):
    """A folder's messages by UID, without bodies (GET …/folders/{folder}/uids): what a
    client caches of them (the mover's sync, the IMAP front's listing).  `epoch`: the
    active's when it answered (0: not said)."""

    folder: str = ""
    uidvalidity: int = 0
    uid_next: int = 1
    highest_modseq: int = 0
    epoch: int = 0
    messages: tuple[Listed, ...] = ()
    expunged: tuple[int, ...] = ()

    def by_item(self) -> dict[str, tuple[int, tuple[str, ...]]]:
        """Each message's (uid, flags), by item id."""
        return {m[1]: (m[0], tuple(m[2])) for m in self.messages}


class Mailbox(_Answer):
    """A mailbox as one copy serves it (GET …/mailboxes/{mailbox})."""

    name: str = Field(
        validation_alias=AliasChoices("mailbox", "name"), serialization_alias="mailbox"
    )
    display_name: str = ""
    folders: tuple[str, ...] = ()
    locked: bool = False
    soft_deleted: bool = False
    change_number: int = 0
    epoch: int = 0
    uidvalidity_next: int = 0  # the UIDVALIDITY the mailbox's next folder gets (0: not said)
    # each folder's IMAP counters and counts (STATUS): uidvalidity, uid_next, highest_modseq,
    # messages, unseen, by folder name
    folder_status: tuple[FolderStatus, ...] = ()


@dataclass(frozen=True, slots=True)
class Items:
    """Items changed after a change number, by change number, tombstones included.

    A dataclass, not an `_Answer`: a page may hold thousands of items, each read leniently
    (`store_answers.lenient_item`: an item that is not one is kept as unreadable, not refused); the
    page's envelope is `ItemsAnswer`."""

    items: tuple[Item, ...]
    last_change_number: int  # every change up to it is in `items` (or superseded)
    epoch: int = 0
    more: bool = False  # a page: the changes after last_change_number are not in it
    live: int | None = None  # asked with `count`: live items after since_change, all pages


class ItemsAnswer(_Answer):
    """The body of GET …/mailboxes/{mailbox}/items: a page of changes.  Its items are the
    rows as the copy holds them, read one by one by the client (`Items`)."""

    mailbox: str = ""
    since_change: int = 0
    items: Sequence[object]
    # Every change up to it is in this answer: the next page asks since it (None: not said,
    # the page holds everything after since_change).
    last_change_number: int | None = None
    more: bool = False
    epoch: int = 0
    live_count: int | None = None  # asked with `count`: live items changed after since_change


class Written(_Answer):
    """A write's acknowledgement (the body of every store write's answer): where the commit
    is in the log (`lsn`, naming the incarnation that made it durable), when it committed,
    the highest change number it holds, and the ids of the items it wrote with the UID each
    has in its folder (an APPEND's APPENDUID: known at the commit, so a client need not read
    it back, which it could not do while no copy is mounted).  `epoch` repeats `lsn.epoch` at
    the top, where clients have always read it."""

    change_number: int = 0
    lsn: Lsn | None = None
    epoch: int = 0
    commit_time: datetime | None = None
    item_id: str | None = None  # one item written
    item_ids: tuple[str, ...] | None = None  # several
    uid: int | None = None  # the one item's UID in its folder
    item_uids: tuple[int, ...] | None = None  # several: each item's, in `item_ids`' order

    @model_validator(mode="before")
    @classmethod
    def _epoch_of_lsn(cls, data: object) -> object:
        """An answer naming its epoch only in its LSN says it all the same."""
        if isinstance(data, dict) and "epoch" not in data and isinstance(data.get("lsn"), dict):
            return {**data, "epoch": data["lsn"].get("epoch", 0)}
        return data

    @classmethod
    def of(
        cls, lsn: Lsn, commit_time: datetime, change_number: int, item_ids: tuple[str, ...] = (),
        uids: tuple[int, ...] = (),
    ) -> Written:  # fmt: skip
        """The answer to a commit at `lsn` (the node's side); `uids`: the items' UIDs, in
        `item_ids`' order (none: the write gives no UIDs)."""
        one = len(item_ids) == 1
        return cls(
            change_number=change_number,
            lsn=lsn,
            epoch=lsn.epoch,
            commit_time=commit_time,
            item_id=item_ids[0] if one else None,
            item_ids=item_ids if len(item_ids) > 1 else None,
            uid=uids[0] if one and uids else None,
            item_uids=uids if len(item_ids) > 1 and uids else None,
        )

    def uid_of(self, item_id: str) -> int | None:
        """The UID the write gave `item_id` in its folder (None: the answer does not say)."""
        if self.item_id == item_id:
            return self.uid
        if self.item_ids is None or self.item_uids is None or item_id not in self.item_ids:
            return None
        return self.item_uids[self.item_ids.index(item_id)]

    @property
    def generation(self) -> int:
        """The generation holding the write (0: the node did not say)."""
        return self.lsn.generation if self.lsn else 0


class LogPosition(_Answer):
    """Where a database's log stands on its active copy (GET …/log/position): every commit
    answered before the question lies below (`open_generation`, `durable`), and who follows
    it in block mode."""

    database: str = ""
    open_generation: int
    durable: int  # bytes of the open generation durable on the active
    open_records: bool  # False: the open generation holds only its header
    block_followers: tuple[str, ...]  # nodes whose copies follow the log in block mode
    passive_copies: tuple[str, ...]  # the database's other copies
    epoch: int = 0

    @property
    def durable_end(self) -> Position:
        """Where the open log's durable bytes end (the next commit's start): every commit
        answered before the question lies below.  The wire keeps the flat fields."""
        return Position(self.open_generation, self.durable)


class Rolled(_Answer):
    """The target's log rolled (POST …/roll-log): the generation closed, in which
    incarnation."""

    database: str = ""
    generation: int = Field(
        validation_alias=AliasChoices("closed_generation", "generation"),
        serialization_alias="closed_generation",
    )
    epoch: int = 0


class Digest(_Answer):
    """A mailbox digest as a node computed it (GET …/mailboxes/{mailbox}/digest;
    dag_common.mailbox_digest)."""

    mailbox: str
    item_count: int
    digest: str
    last_change_number: int
    epoch: int = 0

    def matches(self, other: Digest) -> bool:
        """The same live items: ids, folders and contents."""
        return (self.item_count, self.digest) == (other.item_count, other.digest)


class MailboxState(StrEnum):
    """A mailbox's state on the copy that answered a change feed (`Changes`)."""

    LIVE = "live"
    LOCKED = "locked"  # a move's final sync holds it: writes refused, the front waits
    SOFT_DELETED = "soft_deleted"  # a move's source after its completion, or removed
    GONE = "gone"  # no such mailbox here any more (removed since the change asked about)


class Changes(_Answer):
    """The body of GET …/mailboxes/{mailbox}/changes: whether the mailbox changed above
    `since_change` (`changed`), as the database's active copy answered it.

    `last_change_number` is a cursor to ask with next: every change of the mailbox numbered
    at or below it is visible on the copy that answered (it is the copy's own highest
    visible number, not necessarily one of this mailbox's).  `folders`: the folders with a
    change above `since_change` (an item put, deleted, flagged or moved, the folder
    created), or None when the copy cannot say (its changes predate the copy's mount): look
    at every folder.  `epoch`: the stream incarnation of the copy that answered; another
    than the caller knew means a switchover or a failover came between."""

    mailbox: str
    since_change: int = 0
    last_change_number: int
    changed: bool
    epoch: int = 0
    state: MailboxState = MailboxState.LIVE
    folders: tuple[str, ...] | None = None


class NodeStore(Protocol):
    """The store calls a move makes, each to the active copy of a database.

    Raises `NodeCallError` when a node cannot answer or refuses (its HTTP status, if any)."""

    async def mailbox(self, database: str, mailbox: str) -> Mailbox | None: ...

    async def create_mailbox(
        self,
        database: str,
        mailbox: str,
        *,
        display_name: str,
        folders: list[str],
        locked: bool,
        replace_soft_deleted: bool = False,
    ) -> Written:
        """`replace_soft_deleted`: a soft-deleted copy of the mailbox in `database` is removed
        in the same transaction (a move back to where an earlier move left it)."""
        ...

    async def create_folder(self, database: str, mailbox: str, folder: str) -> Written: ...

    async def items(self, database: str, mailbox: str, query: ItemsQuery) -> Items:
        """The changes of `mailbox` that `query` asks for."""
        ...

    async def put_items(self, database: str, mailbox: str, items: list[Item]) -> Written: ...

    # ---- IMAP's state, copied by a move (each a write with override_lock) ----------------

    async def create_folder_as(self, database: str, mailbox: str, folder: FolderStatus) -> Written:
        """Create `folder` with its UIDVALIDITY, UIDNEXT and HIGHESTMODSEQ (a move's copy of
        the source's folder)."""
        ...

    async def rename_folder(self, database: str, mailbox: str, folder: str, to: str) -> Written: ...

    async def delete_folder(self, database: str, mailbox: str, folder: str) -> Written: ...

    async def set_flags(
        self,
        database: str,
        mailbox: str,
        folder: str,
        item_ids: list[str],
        flags: tuple[str, ...],
        modseq: int,
    ) -> Written:
        """Replace the flags of items of `folder` with `flags`, with the source's `modseq`."""
        ...

    async def set_folder_counters(
        self, database: str, mailbox: str, folder: FolderStatus, uidvalidity_next: int
    ) -> Written:
        """Lift `folder`'s UIDNEXT, HIGHESTMODSEQ and modseq floor (and the mailbox's next
        UIDVALIDITY) to at least the source's."""
        ...

    async def folder_uids(self, database: str, mailbox: str, folder: str) -> FolderUids | None:
        """A folder's messages by UID without bodies; None: no such folder (or mailbox)."""
        ...

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
