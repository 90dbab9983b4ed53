"""The operations a transaction carries: one typed model from the store to the log and back.

The active's store builds them (assigning change numbers and item ids, so that replay is
deterministic) and the log stream commits them as they are; each is turned into the JSON
object the log record carries once, where the record is built (`encode_record_ops`), and
read back once, where a log is read (`decode_record_ops`: recovery, replay), strictly: a
field missing or of the wrong type is `MalformedOperation` naming it, never a skip.  The
database (SQL) and the LLR overlay (rows in memory) apply the typed operations; the rows
they produce are `storage.ops`'s.

One operation touches no mailbox: `RecordBackup`, the active's stamp of a completed backup,
which both appliers turn into header values.

A body too large for the commit record is staged in the log first (`spanning.py`): the
record then names it (`body_blob`: its index among the record's staged bodies) where the
put's body would be, and reading it back puts the body in its place.

The operations are msgspec Structs, tagged by their `op` field as the log has them: a
record's JSON is decoded straight into them, in C (`decode_payload`: the replay of every copy
decodes every operation, nearly all puts), checked as strictly as their types say (a field
missing, of the wrong type, unknown or extra is `MalformedOperation` naming where), with no
dict built in between.  A record that commits staged bodies is read the slow way: its JSON
as dicts, each staged body put in its place, then the same types (`msgspec.convert`).  The
request edge validates texts and names before an operation is ever built (`store_api`,
`mailbox_store`).  The log's format is unchanged by the types: the same JSON objects.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from enum import StrEnum
from typing import Annotated

import msgspec

from dag_common.rfc822 import BodyFormat

DEFAULT_FOLDERS = ("Inbox", "Sent Items", "Deleted Items")


class MalformedOperation(ValueError):
    """An operation read from the log that is not one (a writer's bug or a forgery)."""


class _Op(msgspec.Struct, frozen=True, forbid_unknown_fields=True, tag_field="op", gc=False):
    """An operation as a TRANSACTION record carries it (its kind in `op`).

    Not tracked by Python's garbage collector (`gc=False`): an operation is a frozen leaf
    value (texts, numbers, enum members, tuples of them), which can never be part of a
    reference cycle.  Tracked, as a put became once it held its `format` (an enum member,
    itself tracked), every put of a replay batch (tens of thousands, alive until the batch
    is in) was walked by each collection, and they set off 2-3 full collections of the
    process per bench replay round where there had been 0-1 (bench/README.md, issue 51's
    replay cost)."""


# A UID, a UIDVALIDITY, a modseq: what RFC 3501 and RFC 7162 let them be (0: not assigned:
# a log from before they were, whose items `AssignUids` numbers).
Uid = Annotated[int, msgspec.Meta(ge=0, le=2**32 - 1)]
Modseq = Annotated[int, msgspec.Meta(ge=0, le=2**63 - 1)]
# The most a `ReserveLost` advances by: past every UID's and UIDVALIDITY's range, and far
# within a modseq's (a counter plus it stays a 64-bit integer in the database file).
RESERVE_MAX = 2**62


class CreateMailbox(_Op, tag="create_mailbox"):
    """A mailbox and its folders.  `uidvalidity`: the first folder's UIDVALIDITY, the next
    folder's one more, and the mailbox's `uidvalidity_next` past the last (0 in a log from
    before them: `AssignUids` gives them)."""

    mailbox: str
    cn: int
    display_name: str = ""
    folders: tuple[str, ...] = DEFAULT_FOLDERS
    uidvalidity: Uid = 0


class SetMailbox(_Op, tag="set_mailbox"):
    mailbox: str
    cn: int
    locked: bool | None = None
    soft_deleted: bool | None = None


class CreateFolder(_Op, tag="create_folder"):
    """A folder, with its counters (a folder the mailbox has already keeps its own); the
    mailbox's `uidvalidity_next` goes past `uidvalidity`."""

    mailbox: str
    cn: int
    folder: str
    uidvalidity: Uid = 0
    uid_next: Annotated[int, msgspec.Meta(ge=1, le=2**32)] = 1
    highest_modseq: Modseq = 0


class PutItem(_Op, tag="put_item"):
    """An item created or replaced.  `format`: what its body is (`dag_common.rfc822`: a text
    or a message kept byte for byte); left out of the record when it is text, so a text
    item's record is what it always was, and a format this node does not know is a
    malformed operation (never read as text)."""

    mailbox: str
    cn: int
    item_id: str
    folder: str
    subject: str = ""
    body: str = ""
    format: BodyFormat = BodyFormat.TEXT
    uid: Uid = 0
    modseq: Modseq = 0
    flags: tuple[str, ...] = ()
    received: str = ""


class DeleteItem(_Op, tag="delete_item"):
    """An item removed (an IMAP expunge): its tombstone keeps its UID, with `modseq`."""

    mailbox: str
    cn: int
    item_id: str
    modseq: Modseq = 0


class RenameFolder(_Op, tag="rename_folder"):
    """A folder and its children (`folder/…`) renamed, their items with them; counters
    kept.  Nothing is renamed if `folder` is not there or a new name is taken."""

    mailbox: str
    cn: int
    folder: str
    to: str


class DeleteFolder(_Op, tag="delete_folder"):
    """A folder removed with its items: each of `item_ids` (every item it holds) leaves a
    tombstone numbered `cn + i` with `modseq`."""

    mailbox: str
    cn: int
    folder: str
    item_ids: tuple[str, ...] = ()
    modseq: Modseq = 0


class SetFlags(_Op, tag="set_flags"):
    """Flags of items of one folder changed (a STORE): `replace` them, or `add` and `remove`
    some; item i numbered `cn + i`, all with one `modseq`."""

    mailbox: str
    cn: int
    folder: str
    item_ids: tuple[str, ...]
    modseq: Modseq
    add: tuple[str, ...] = ()
    remove: tuple[str, ...] = ()
    replace: tuple[str, ...] | None = None


class MoveItems(_Op, tag="move_items"):
    """Items moved from `folder` to `to` in one operation, each `[item_id, new_uid]`, item i
    numbered `cn + i`, all with one `modseq`."""

    mailbox: str
    cn: int
    folder: str
    to: str
    items: tuple[tuple[str, Uid], ...]
    modseq: Modseq


class CopyItems(_Op, tag="copy_items"):
    """Items of `folder` copied to `to`, each `[item_id, new_item_id, new_uid]`: the copy
    has the item's content, flags and INTERNALDATE; copy i numbered `cn + i`."""

    mailbox: str
    cn: int
    folder: str
    to: str
    items: tuple[tuple[str, str, Uid], ...]
    modseq: Modseq


class SetFolderCounters(_Op, tag="set_folder_counters"):
    """A folder's counters lifted (each a floor: never lowered), and its mailbox's
    `uidvalidity_next`: a move's final sync.  `modseq_floor`: the source folder's (a lossy
    failover's, `ReserveLost`), so the target reports its items at no lower a modseq; left
    out of the record at 0, as a log from before it has it."""

    mailbox: str
    cn: int
    folder: str
    uid_next: Annotated[int, msgspec.Meta(ge=1, le=2**32)] = 1
    highest_modseq: Modseq = 0
    uidvalidity_next: Uid = 0
    modseq_floor: Modseq = 0


class AssignUids(_Op, tag="assign_uids"):
    """The one-off numbering of a database from before UIDs (its first mount by an active
    that has them): every folder without a UIDVALIDITY gets `uidvalidity`, every mailbox's
    `uidvalidity_next` goes past it, and every live item without a UID gets its folder's
    next, in (mailbox, folder, item id) order, with its folder's next modseq."""

    cn: int
    uidvalidity: Annotated[int, msgspec.Meta(ge=1, le=2**32 - 2)]


class ReserveLost(_Op, tag="reserve_lost"):
    """A lossy activation's first commit: the numbers the lost tail of the log may have
    handed out (and a client seen) are never handed out again.  Every folder's `uid_next`
    and `highest_modseq`, and every mailbox's `uidvalidity_next`, advance by `by` (the
    change numbers that tail can have taken: each UID, modseq and UIDVALIDITY took one),
    each held at its ceiling (`storage.ops.reserved`): a folder whose UIDs that spends has
    none left, and refuses new messages, rather than give one twice."""

    cn: int
    by: Annotated[int, msgspec.Meta(ge=1, le=RESERVE_MAX)]


class DeleteMailbox(_Op, tag="delete_mailbox"):
    """A mailbox removed with its folders and items (a cancelled move's target copy): no
    tombstone is left, the name is free for a new mailbox."""

    mailbox: str
    cn: int


class BackupKind(StrEnum):
    """What a backup holds: the database file and its logs, or only the logs since the last."""

    FULL = "full"
    INCREMENTAL = "incremental"


class RecordBackup(_Op, tag="record_backup"):
    """A completed backup, stamped by the active into its header as a log record, so every
    copy's header gets it by replay and none writes its own (the seeds: a passive that wrote
    its header would diverge).  `generation`: the last generation the backup holds; `time`:
    when it ended (RFC 3339).  It names no mailbox and takes no change number."""

    kind: BackupKind
    generation: Annotated[int, msgspec.Meta(ge=1)]
    time: str

    def __post_init__(self) -> None:
        try:
            datetime.fromisoformat(self.time)
        except ValueError:
            raise ValueError(f"time {self.time!r} is not a time") from None


Operation = (
    CreateMailbox
    | SetMailbox
    | CreateFolder
    | PutItem
    | DeleteItem
    | DeleteMailbox
    | RecordBackup
    | RenameFolder
    | DeleteFolder
    | SetFlags
    | MoveItems
    | CopyItems
    | SetFolderCounters
    | AssignUids
    | ReserveLost
)

_KIND: dict[type, str] = {
    CreateMailbox: "create_mailbox",
    SetMailbox: "set_mailbox",
    CreateFolder: "create_folder",
    PutItem: "put_item",
    DeleteItem: "delete_item",
    DeleteMailbox: "delete_mailbox",
    RecordBackup: "record_backup",
    RenameFolder: "rename_folder",
    DeleteFolder: "delete_folder",
    SetFlags: "set_flags",
    MoveItems: "move_items",
    CopyItems: "copy_items",
    SetFolderCounters: "set_folder_counters",
    AssignUids: "assign_uids",
    ReserveLost: "reserve_lost",
}


def last_cn(op: Operation) -> int:
    """The highest change number an operation takes: its `cn`, or for one that numbers
    several items (`cn + i` each) the last of them."""
    if type(op) is PutItem:  # nearly every operation: before the match's class checks
        return op.cn
    match op:
        case SetFlags() | DeleteFolder():
            return op.cn + max(len(op.item_ids) - 1, 0)
        case MoveItems() | CopyItems():
            return op.cn + max(len(op.items) - 1, 0)
        case RecordBackup():
            return 0
    return op.cn


_TYPE = {kind: cls for cls, kind in _KIND.items()}
# Fields added to an operation after logs were written without them: at 0 (their default,
# what a record without them reads as) they are not written.
_LEFT_OUT_AT_ZERO = frozenset({"modseq_floor"})


def encode(op: Operation) -> dict[str, object]:
    """The JSON object an operation is in the log (fields left at None are left out)."""
    if type(op) is PutItem:  # nearly every operation: no walk over the fields
        put: dict[str, object] = {
            "op": "put_item",
            "mailbox": op.mailbox,
            "cn": op.cn,
            "item_id": op.item_id,
            "folder": op.folder,
            "subject": op.subject,
            "body": op.body,
        }
        if op.format is not BodyFormat.TEXT:
            put["format"] = str(op.format)
        if op.uid:  # 0: a put of a log from before UIDs, read back
            put["uid"] = op.uid
            put["modseq"] = op.modseq
        if op.flags:
            put["flags"] = list(op.flags)
        if op.received:
            put["received"] = op.received
        return put
    out: dict[str, object] = {"op": _KIND[type(op)]}
    for name in op.__struct_fields__:
        value = getattr(op, name)
        if name in _LEFT_OUT_AT_ZERO and not value:
            continue  # a record an older reader (strict: no unknown field) still reads
        if isinstance(value, StrEnum):
            out[name] = str(value)
        elif value is not None:
            out[name] = _listed(value)
    return out


def _listed(value: object) -> object:
    """A field as JSON has it (tuples, nested, as lists)."""
    if isinstance(value, tuple):
        return [_listed(v) for v in value]
    return value


def encode_record_ops(
    ops: Sequence[Operation], staged: Sequence[int] = ()
) -> list[dict[str, object]]:
    """The operations as a TRANSACTION record carries them.  `staged`: the indexes, in
    order, of the puts whose bodies were staged: each names its body by its place among
    them (`body_blob`) instead of carrying it."""
    out = [encode(op) for op in ops]
    for n, i in enumerate(staged):
        raw = out[i]
        if raw["op"] != "put_item":
            raise ValueError(f"operation {i} is not a put: it has no body to stage")
        del raw["body"]
        raw["body_blob"] = n
    return out


class _Record(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """A TRANSACTION record that commits no staged body: its operations and nothing else."""

    ops: tuple[Operation, ...]


_RECORD = msgspec.json.Decoder(_Record)


def decode_payload(payload: bytes | memoryview) -> tuple[Operation, ...]:
    """The operations of a TRANSACTION record's JSON that commits no staged body, typed in
    one pass; MalformedOperation naming the first field that is not what its type says."""
    try:
        return _RECORD.decode(payload).ops
    except msgspec.DecodeError as exc:  # ValidationError is one
        raise MalformedOperation(str(exc)) from None


def decode_record_ops(raw: object, bodies: Sequence[str] = ()) -> tuple[Operation, ...]:
    """A TRANSACTION record's operations, from its JSON as dicts, typed; `bodies`: its staged
    bodies read back, in the order it names them.  MalformedOperation naming the first
    that is not one."""
    if not isinstance(raw, list):
        raise MalformedOperation(f"the operations must be a list, not {type(raw).__name__}")
    return tuple(decode(op, bodies) for op in raw)


def _staged_body(raw: Mapping[str, object], bodies: Sequence[str]) -> str:
    """The body a put names by its place among the record's staged bodies."""
    i = raw["body_blob"]
    if type(i) is not int or not 0 <= i < len(bodies):
        raise MalformedOperation(f"put_item: names staged body {i!r} of {len(bodies)}")
    if "body" in raw:
        raise MalformedOperation("put_item: both a body and a staged body")
    return bodies[i]


def decode(raw: object, bodies: Sequence[str] = ()) -> Operation:
    """The operation a log record's JSON object stands for; MalformedOperation if none.
    `bodies`: the staged bodies of its record, for a put that names one (`body_blob`)."""
    if not isinstance(raw, dict):
        raise MalformedOperation(f"an operation must be an object, not {type(raw).__name__}")
    kind = raw.get("op")
    if "body_blob" in raw:
        if kind != "put_item":
            raise MalformedOperation(f"{kind}: names a staged body, which only a put has")
        raw = {k: v for k, v in raw.items() if k != "body_blob"} | {
            "body": _staged_body(raw, bodies)
        }
    if not isinstance(kind, str) or kind not in _TYPE:
        raise MalformedOperation(f"unknown operation {kind!r}")
    try:
        return msgspec.convert(raw, _TYPE[kind])
    except msgspec.ValidationError as exc:
        raise MalformedOperation(f"{kind}: {exc}") from None
