"""The node API's request bodies as typed models: every body is parsed here, at the edge,
before anything is looked up or written.

Ranges, sizes and encodings are checked once: names match the patterns of `ops`, text must
be valid Unicode that UTF-8 can carry (JSON can spell a lone surrogate such as "\\ud800",
which the log cannot hold), lists are bounded, unknown fields are refused (a typo is an
error, not a silently ignored option), and booleans are booleans.  A failure is a
`BadRequest` naming the field, which the error middleware answers with 400.
"""

from __future__ import annotations

from typing import Annotated, TypeVar

from pydantic import (
    AwareDatetime,
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    ValidationError,
    model_validator,
)

from dag_common.api_types import Folder, Name, Text
from dag_common.echo import clipped
from dag_common.json_object import JsonObject
from dag_common.model import AutoDatabaseMountDial
from dag_common.store_api import ItemIn
from replication_node.errors import BadRequest
from replication_node.log.operations import BackupKind

MAX_ITEMS = 1000  # items per write: one write is one transaction
MAX_FOLDERS = 1000


class _Body(BaseModel):
    # Strings and booleans are strict (StrictStr, StrictBool): a number is not a name and
    # "yes" is not true; an enum is given by its value.
    model_config = ConfigDict(extra="forbid", frozen=True)


class MailboxIn(_Body):
    """PUT …/mailboxes/{mailbox}."""

    display_name: Annotated[Text, Field(max_length=256)] = ""
    folders: Annotated[list[Folder], Field(max_length=MAX_FOLDERS)] | None = None
    locked: StrictBool = False
    # a move's target (with locked): a soft-deleted copy of the mailbox here is replaced
    replace_soft_deleted: StrictBool = False


class RestoreIn(_Body):
    """POST …/mailboxes/{mailbox}/restore: `replace`, the database the mailbox directory
    places the mailbox in now, whose copy the caller says is lost or not live."""

    replace: Name | None = None


class FolderIn(_Body):
    """POST …/mailboxes/{mailbox}/folders.  A move's copy of a folder (with override_lock)
    gives the source's counters: `uidvalidity`, and with it `uid_next` and
    `highest_modseq`."""

    folder: Folder
    uidvalidity: Annotated[int, Field(strict=True, ge=1, le=2**32 - 2)] | None = None
    uid_next: Annotated[int, Field(strict=True, ge=1, le=2**32)] = 1
    highest_modseq: Annotated[int, Field(strict=True, ge=0, le=2**63 - 1)] = 0

    @model_validator(mode="after")
    def _counters(self) -> FolderIn:
        if self.uidvalidity is None and (self.uid_next != 1 or self.highest_modseq):
            raise ValueError("uid_next and highest_modseq are given only with a uidvalidity")
        return self


class ItemsIn(_Body):
    """POST …/mailboxes/{mailbox}/items with several items, as one transaction (one item is
    the body itself: `store_api.ItemIn`, which the store takes as it is)."""

    items: Annotated[list[ItemIn], Field(min_length=1, max_length=MAX_ITEMS)]


class ReasonIn(_Body):
    """POST …/copies/{node}/suspend|resume|reseed; `activation_only` (suspend, resume): the
    copy's activation only, its replication goes on."""

    reason: Annotated[Text, Field(max_length=1000)] = ""
    activation_only: StrictBool = False


class ActivateIn(_Body):
    """POST …/activate."""

    node: Name
    mount_dial_override: AutoDatabaseMountDial | None = None


class TargetIn(_Body):
    """POST …/switchover and …/quiesce."""

    target: Name


class HandOverIn(_Body):
    """POST …/hand-over: the node of the copy taking over."""

    to: Name


class BackupIn(_Body):
    """POST …/backup, on the node of the copy backed up: a directory on that node's host."""

    from_: Annotated[Name, Field(alias="from")]
    to: Annotated[Text, Field(min_length=1, max_length=4096)]
    incremental: StrictBool = False


class BackupBeginIn(_Body):
    """POST …/backups, on the active: which node takes which kind of backup."""

    node: Name
    kind: BackupKind


class BackupEndIn(_Body):
    """POST …/backups/{id}/end: the backup holds generations through `generation`."""

    generation: Annotated[int, Field(strict=True, ge=1)]
    ended_at: AwareDatetime


M = TypeVar("M", bound=BaseModel)


def parse(model: type[M], data: JsonObject) -> M:
    """`data` as `model`, or BadRequest naming the first field that is wrong."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or "body"
        raise BadRequest(f"{clipped(where)}: {first['msg']}") from None  # a key is input
