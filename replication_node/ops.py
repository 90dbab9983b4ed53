"""The logical operations a transaction carries, and their effect on one row (pure).

An operation is a small JSON object; the active builds them (assigning change numbers and
item ids, so that replay is deterministic) and every copy applies them in log order.  The
same `apply_*` functions serve the SQLite database (`database.py`) and the LLR overlay
(`overlay.py`), so a passive copy and the active can never disagree on what an operation does.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

from replication_node.errors import BadRequest

NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.@+-]{0,127}$"
FOLDER_PATTERN = r"^[^\x00-\x1f/\\][^\x00-\x1f]{0,255}$"
DEFAULT_FOLDERS = ("Inbox", "Sent Items", "Deleted Items")


class _Op(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    mailbox: str = Field(pattern=NAME_PATTERN)
    cn: int = Field(ge=1, description="change number")


class CreateMailbox(_Op):
    op: Literal["create_mailbox"] = "create_mailbox"
    display_name: str = Field(default="", max_length=256)
    folders: tuple[str, ...] = DEFAULT_FOLDERS


class SetMailbox(_Op):
    op: Literal["set_mailbox"] = "set_mailbox"
    locked: bool | None = None
    soft_deleted: bool | None = None


class CreateFolder(_Op):
    op: Literal["create_folder"] = "create_folder"
    folder: str = Field(pattern=FOLDER_PATTERN)


class PutItem(_Op):
    op: Literal["put_item"] = "put_item"
    item_id: str = Field(pattern=r"^[A-Za-z0-9_-]{1,64}$")
    folder: str = Field(pattern=FOLDER_PATTERN)
    subject: str = Field(default="", max_length=1024)
    body: str = ""


class DeleteItem(_Op):
    op: Literal["delete_item"] = "delete_item"
    item_id: str = Field(pattern=r"^[A-Za-z0-9_-]{1,64}$")


Operation = CreateMailbox | SetMailbox | CreateFolder | PutItem | DeleteItem
_ADAPTER: TypeAdapter[Operation] = TypeAdapter(Annotated[Operation, Field(discriminator="op")])


def parse_op(raw: dict[str, Any]) -> Operation:
    """Validate one operation read from a log record."""
    try:
        return _ADAPTER.validate_python(raw)
    except Exception as exc:
        raise BadRequest(f"malformed operation {raw!r}: {exc}") from exc


def mailbox_row(op: CreateMailbox) -> dict[str, Any]:
    """The mailbox row a CreateMailbox produces."""
    return {
        "mailbox": op.mailbox,
        "display_name": op.display_name,
        "locked": False,
        "soft_deleted": False,
        "change_number": op.cn,
    }


def apply_set_mailbox(row: dict[str, Any], op: SetMailbox) -> dict[str, Any]:
    """A mailbox row after a SetMailbox."""
    new = dict(row, change_number=op.cn)
    if op.locked is not None:
        new["locked"] = op.locked
    if op.soft_deleted is not None:
        new["soft_deleted"] = op.soft_deleted
    return new


def item_row(op: PutItem, commit_time: str) -> dict[str, Any]:
    """The item row a PutItem produces (creation or replacement)."""
    return {
        "mailbox": op.mailbox,
        "item_id": op.item_id,
        "folder": op.folder,
        "subject": op.subject,
        "body": op.body,
        "size": len(op.body.encode()),
        "change_number": op.cn,
        "deleted": False,
        "commit_time": commit_time,
    }


def tombstone_row(row: dict[str, Any] | None, op: DeleteItem, commit_time: str) -> dict[str, Any]:
    """The row a DeleteItem leaves: a tombstone, so incremental sync sees the deletion."""
    base = row or {"mailbox": op.mailbox, "item_id": op.item_id, "folder": "", "subject": ""}
    return dict(
        base,
        body="",
        size=0,
        change_number=op.cn,
        deleted=True,
        commit_time=commit_time,
    )
