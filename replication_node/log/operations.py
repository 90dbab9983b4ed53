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

Decoding is cheap (immutable named tuples, no validation library on the replay path).  The
request edge validates texts and names before an operation is ever built (`store_api`,
`mailbox_store`).  The log's format is unchanged by the types: the same JSON objects.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from enum import StrEnum
from typing import Any, NamedTuple

DEFAULT_FOLDERS = ("Inbox", "Sent Items", "Deleted Items")


class MalformedOperation(ValueError):
    """An operation read from the log that is not one (a writer's bug or a forgery)."""


class CreateMailbox(NamedTuple):
    mailbox: str
    cn: int
    display_name: str = ""
    folders: tuple[str, ...] = DEFAULT_FOLDERS


class SetMailbox(NamedTuple):
    mailbox: str
    cn: int
    locked: bool | None = None
    soft_deleted: bool | None = None


class CreateFolder(NamedTuple):
    mailbox: str
    cn: int
    folder: str


class PutItem(NamedTuple):
    mailbox: str
    cn: int
    item_id: str
    folder: str
    subject: str = ""
    body: str = ""


class DeleteItem(NamedTuple):
    mailbox: str
    cn: int
    item_id: str


class DeleteMailbox(NamedTuple):
    """A mailbox removed with its folders and items (a cancelled move's target copy): no
    tombstone is left, the name is free for a new mailbox."""

    mailbox: str
    cn: int


class BackupKind(StrEnum):
    """What a backup holds: the database file and its logs, or only the logs since the last."""

    FULL = "full"
    INCREMENTAL = "incremental"


class RecordBackup(NamedTuple):
    """A completed backup, stamped by the active into its header as a log record, so every
    copy's header gets it by replay and none writes its own (the seeds: a passive that wrote
    its header would diverge).  `generation`: the last generation the backup holds; `time`:
    when it ended (RFC 3339).  It names no mailbox and takes no change number."""

    kind: BackupKind
    generation: int
    time: str


Operation = (
    CreateMailbox | SetMailbox | CreateFolder | PutItem | DeleteItem | DeleteMailbox | RecordBackup
)

_KIND: dict[type, str] = {
    CreateMailbox: "create_mailbox",
    SetMailbox: "set_mailbox",
    CreateFolder: "create_folder",
    PutItem: "put_item",
    DeleteItem: "delete_item",
    DeleteMailbox: "delete_mailbox",
    RecordBackup: "record_backup",
}
_TYPE = {kind: cls for cls, kind in _KIND.items()}


def encode(op: Operation) -> dict[str, object]:
    """The JSON object an operation is in the log (fields left at None are left out)."""
    if type(op) is PutItem:  # nearly every operation: no walk over the fields
        return {
            "op": "put_item",
            "mailbox": op.mailbox,
            "cn": op.cn,
            "item_id": op.item_id,
            "folder": op.folder,
            "subject": op.subject,
            "body": op.body,
        }
    out: dict[str, object] = {"op": _KIND[type(op)]}
    for name, value in zip(op._fields, op, strict=True):
        if isinstance(value, StrEnum):
            out[name] = str(value)
        elif value is not None:
            out[name] = list(value) if isinstance(value, tuple) else value
    return out


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


def decode_record_ops(raw: object, bodies: Sequence[str] = ()) -> tuple[Operation, ...]:
    """A TRANSACTION record's operations, typed; `bodies`: its staged bodies read back, in
    the order it names them.  MalformedOperation naming the first that is not one."""
    if not isinstance(raw, list):
        raise MalformedOperation(f"the operations must be a list, not {type(raw).__name__}")
    return tuple(decode(op, bodies) for op in raw)


def _field(raw: Mapping[str, object], name: str, kind: type, default: object = ...) -> Any:
    value = raw.get(name, default)
    if value is ...:
        raise MalformedOperation(f"{raw.get('op')}: no {name}")
    if value is not None and value is not default and not isinstance(value, kind):
        raise MalformedOperation(f"{raw.get('op')}: {name} is not a {kind.__name__}")
    if kind is int and isinstance(value, bool):
        raise MalformedOperation(f"{raw.get('op')}: {name} is not an int")
    return value


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
    cls = _TYPE.get(kind) if isinstance(kind, str) else None
    if cls is None:
        raise MalformedOperation(f"unknown operation {kind!r}")
    if cls is PutItem:  # the hot path of replay: checked inline
        try:
            op = PutItem(
                raw["mailbox"],
                raw["cn"],
                raw["item_id"],
                raw["folder"],
                raw.get("subject", ""),
                _staged_body(raw, bodies) if "body_blob" in raw else raw.get("body", ""),
            )
        except KeyError as exc:
            raise MalformedOperation(f"put_item: no {exc.args[0]}") from None
        if (
            type(op.mailbox) is str
            and type(op.cn) is int
            and type(op.item_id) is str
            and type(op.folder) is str
            and type(op.subject) is str
            and type(op.body) is str
        ):
            return op
        for name, kind in (("mailbox", str), ("cn", int), ("item_id", str), ("folder", str)):
            _field(raw, name, kind)  # one is of the wrong type: name it
        raise MalformedOperation("put_item: subject and body must be strings")
    if "body_blob" in raw:
        raise MalformedOperation(f"{kind}: names a staged body, which only a put has")
    if cls is RecordBackup:
        backup, generation = _field(raw, "kind", str), _field(raw, "generation", int)
        when = _field(raw, "time", str)
        if backup not in BackupKind.__members__.values():
            raise MalformedOperation(f"record_backup: kind {backup!r} is not full or incremental")
        if generation < 1:
            raise MalformedOperation("record_backup: generation must be at least 1")
        try:
            datetime.fromisoformat(when)
        except ValueError:
            raise MalformedOperation(f"record_backup: time {when!r} is not a time") from None
        return RecordBackup(BackupKind(backup), generation, when)
    mailbox, cn = _field(raw, "mailbox", str), _field(raw, "cn", int)
    if cls is CreateMailbox:
        folders = _field(raw, "folders", list, DEFAULT_FOLDERS)
        if not all(isinstance(f, str) for f in folders):
            raise MalformedOperation("create_mailbox: a folder is not a str")
        return CreateMailbox(mailbox, cn, _field(raw, "display_name", str, ""), tuple(folders))
    if cls is SetMailbox:
        return SetMailbox(
            mailbox, cn, _field(raw, "locked", bool, None), _field(raw, "soft_deleted", bool, None)
        )
    if cls is CreateFolder:
        return CreateFolder(mailbox, cn, _field(raw, "folder", str))
    if cls is DeleteMailbox:
        return DeleteMailbox(mailbox, cn)
    return DeleteItem(mailbox, cn, _field(raw, "item_id", str))
