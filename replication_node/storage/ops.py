"""The operations a transaction carries: one typed model, built by the store, written to the
log as JSON, applied by the database (SQL) and by the LLR overlay (rows in memory).

The active builds them (assigning change numbers and item ids, so that replay is
deterministic); every copy decodes them from the log (`decode`) and applies them in log
order.  The rows an operation produces are defined once here (`mailbox_row`,
`set_mailbox_row`, `item_row`, `tombstone_row`): the overlay uses them as they are, the
database writes the same columns (tests/replication_node/test_ops.py holds the two to the
same rows for the same operations).

One operation touches no mailbox: `RecordBackup`, the active's stamp of a completed backup,
which both appliers turn into header values (`backup_fields`: the database writes them into
its header, the overlay holds them until the file has the generation that carries them).

Decoding is strict but cheap (immutable named tuples, no validation library on the replay
path): a field missing or of the wrong type is `MalformedOperation` naming it.  The request
edge validates texts and names before an operation is ever built (`http.models`,
`mailbox_store`).
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Any, NamedTuple

from dag_common.api_types import FOLDER_PATTERN as FOLDER_PATTERN
from dag_common.api_types import ITEM_ID_PATTERN as ITEM_ID_PATTERN
from dag_common.api_types import NAME_PATTERN as NAME_PATTERN
from dag_common.mailbox_digest import utf8_size

DEFAULT_FOLDERS = ("Inbox", "Sent Items", "Deleted Items")

Row = dict[str, Any]


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


def encode(op: Operation) -> dict[str, Any]:
    """The JSON object an operation is in the log (fields left at None are left out)."""
    out: dict[str, Any] = {"op": _KIND[type(op)]}
    for name, value in zip(op._fields, op, strict=True):
        if isinstance(value, StrEnum):
            out[name] = str(value)
        elif value is not None:
            out[name] = list(value) if isinstance(value, tuple) else value
    return out


def _field(raw: dict[str, Any], name: str, kind: type, default: Any = ...) -> Any:
    value = raw.get(name, default)
    if value is ...:
        raise MalformedOperation(f"{raw.get('op')}: no {name}")
    if value is not None and value is not default and not isinstance(value, kind):
        raise MalformedOperation(f"{raw.get('op')}: {name} is not a {kind.__name__}")
    if kind is int and isinstance(value, bool):
        raise MalformedOperation(f"{raw.get('op')}: {name} is not an int")
    return value


def decode(raw: Any) -> Operation:
    """The operation a log record's JSON object stands for; MalformedOperation if none."""
    if not isinstance(raw, dict):
        raise MalformedOperation(f"an operation must be an object, not {type(raw).__name__}")
    cls = _TYPE.get(raw.get("op"))  # type: ignore[arg-type]
    if cls is None:
        raise MalformedOperation(f"unknown operation {raw.get('op')!r}")
    if cls is PutItem:  # the hot path of replay: checked inline
        try:
            op = PutItem(
                raw["mailbox"],
                raw["cn"],
                raw["item_id"],
                raw["folder"],
                raw.get("subject", ""),
                raw.get("body", ""),
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
    if cls is RecordBackup:
        kind, generation = _field(raw, "kind", str), _field(raw, "generation", int)
        when = _field(raw, "time", str)
        if kind not in BackupKind.__members__.values():
            raise MalformedOperation(f"record_backup: kind {kind!r} is not full or incremental")
        if generation < 1:
            raise MalformedOperation("record_backup: generation must be at least 1")
        try:
            datetime.fromisoformat(when)
        except ValueError:
            raise MalformedOperation(f"record_backup: time {when!r} is not a time") from None
        return RecordBackup(BackupKind(kind), generation, when)
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
    if cls is PutItem:
        return PutItem(
            mailbox,
            cn,
            _field(raw, "item_id", str),
            _field(raw, "folder", str),
            _field(raw, "subject", str, ""),
            _field(raw, "body", str, ""),
        )
    if cls is DeleteMailbox:
        return DeleteMailbox(mailbox, cn)
    return DeleteItem(mailbox, cn, _field(raw, "item_id", str))


# ---- the rows an operation produces (the overlay's; the database writes the same) --------


def mailbox_row(op: CreateMailbox) -> Row:
    return {
        "mailbox": op.mailbox,
        "display_name": op.display_name,
        "locked": False,
        "soft_deleted": False,
        "change_number": op.cn,
    }


def set_mailbox_row(row: Row, op: SetMailbox) -> Row:
    new = dict(row, change_number=op.cn)
    if op.locked is not None:
        new["locked"] = op.locked
    if op.soft_deleted is not None:
        new["soft_deleted"] = op.soft_deleted
    return new


def item_row(op: PutItem, commit_time: str) -> Row:
    """A PutItem's row (a creation or a replacement)."""
    return {
        "mailbox": op.mailbox,
        "item_id": op.item_id,
        "folder": op.folder,
        "subject": op.subject,
        "body": op.body,
        "size": utf8_size(op.body),
        "change_number": op.cn,
        "deleted": False,
        "commit_time": commit_time,
    }


def tombstone_row(row: Row | None, op: DeleteItem, commit_time: str) -> Row:
    """The row a DeleteItem leaves: a tombstone, so incremental sync sees the deletion."""
    base = row or {"mailbox": op.mailbox, "item_id": op.item_id, "folder": "", "subject": ""}
    return dict(base, body="", size=0, change_number=op.cn, deleted=True, commit_time=commit_time)


def backup_fields(op: RecordBackup) -> dict[str, Any]:
    """The header values a backup stamp sets (`DatabaseHeader` fields): the last backup of its
    kind, and the last backup of any kind, which truncation counts as backed up."""
    when = datetime.fromisoformat(op.time)
    return {
        f"last_{op.kind}_backup_generation": op.generation,
        f"last_{op.kind}_backup_time": when,
        "last_backup_generation": op.generation,
        "last_backup_time": when,
    }
