"""The answers of a node's admin routes that a client reads back: one model each, built by
the node and parsed by its client (the CLI, another node), so the two cannot drift.

`GET /v1/databases/{db}/history` is the database's role changes, one entry per epoch, as the
cluster store recorded them, and the transport dumpster's last redelivery after a lossy
activation (the record's own fields, with `required` and a `summary` sentence).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from typing import TYPE_CHECKING, Annotated, Any, Self

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PlainSerializer,
    field_serializer,
)

from dag_common.incarnation import ActivationCause, EpochRecord
from dag_common.model import Position, PositionFields

if TYPE_CHECKING:
    from dag_common.cluster_store.interface import ActiveRecord


class CopyAction(StrEnum):
    """What an administrator does to a passive copy (`POST …/copies/{node}/{action}`): the
    seeds' Suspend-, Resume- and Update-MailboxDatabaseCopy (a reseed)."""

    SUSPEND = "suspend"
    RESUME = "resume"
    RESEED = "reseed"


@dataclass(frozen=True, slots=True)
class CopyOrder:
    """An administrator's `action` on a passive copy, with its `reason` (suspend); with
    `activation_only` (suspend, resume), of the copy's activation only: it replicates on."""

    action: CopyAction
    reason: str = ""
    activation_only: bool = False


class EpochEntry(BaseModel):
    """One incarnation of the stream: who wrote it from which generation, since when, why."""

    model_config = ConfigDict(frozen=True)

    epoch: int
    node: str
    began: datetime | None = None
    cause: str | None = None  # an ActivationCause; a newer node's may be unknown here
    mount_dial: str | None = None
    start_generation: int
    kept_through: int | None = None
    lost_logs: int | None = None

    @field_serializer("began")
    def _began_iso(self, began: datetime | None) -> str | None:
        return began.isoformat() if began else None  # "+00:00", as the route always said

    @classmethod
    def of(cls, record: EpochRecord) -> EpochEntry:
        return cls(
            epoch=record.epoch,
            node=record.node,
            began=record.began.astimezone(UTC) if record.began else None,
            cause=record.cause,
            mount_dial=record.mount_dial,
            start_generation=record.start_generation,
            kept_through=record.kept_through,
            lost_logs=record.lost_logs,
        )


class RedeliveryEntry(BaseModel):
    """The dumpster's redelivery, as `history` shows it (its record's fields pass through)."""

    model_config = ConfigDict(frozen=True, extra="allow")

    required: bool
    summary: str


class History(BaseModel):
    """`GET /v1/databases/{db}/history`: the epochs oldest first."""

    model_config = ConfigDict(frozen=True)

    database: str
    redelivery: RedeliveryEntry | None = None
    epochs: list[EpochEntry] = []


class QuiesceAnswer(BaseModel):
    """`POST …/quiesce`: the active took no more writes and closed its open log; the last
    generation it closed (a switchover's target replays through it)."""

    model_config = ConfigDict(frozen=True)

    last_log_generated: int


class OpenLogKept(BaseModel):
    """An open log a copy taking over kept as a generation of its own."""

    model_config = ConfigDict(frozen=True)

    generation: int
    size: int
    kept_through: int | None = None  # a block-mode buffer: through this byte (its last record)


class LastLogsAnswer(BaseModel):
    """`POST …/copy-last-logs` (Attempt Copy Last Logs): what the copy taking over copied
    from the old active, not mounted but reachable."""

    model_config = ConfigDict(frozen=True, populate_by_name=True)

    database: str
    node: str
    source: str = Field(alias="from")  # the node they were copied from
    closed_through: int  # every closed generation through this one
    open_log: OpenLogKept | None = None  # the open log, kept (None: it held nothing)
    last_log_inspected: int


class BlockBufferAnswer(BaseModel):
    """`POST …/keep-block-buffer`: what the copy taking over kept of the open generation
    from its block-mode buffer (None: it held no transaction)."""

    model_config = ConfigDict(frozen=True)

    database: str
    node: str
    kept: OpenLogKept | None = None
    last_log_inspected: int


class BackupLease(BaseModel):
    """`POST /v1/databases/{db}/backups`: the active's answer to a backup's begin, what the
    backing-up node needs: the lease it renews, and the header values it checks its
    snapshot against (the signatures) and counts from (the last backups)."""

    model_config = ConfigDict(frozen=True)

    backup_id: str
    lease_seconds: float
    epoch: int
    kind: str  # a BackupKind
    last_backup_generation: int
    last_full_backup_generation: int
    database_signature: str
    log_signature: str


def _kept_from_fields(value: Any) -> Any:
    if isinstance(value, dict) and "through_byte" in value:
        return Position(value.get("generation", 0), value["through_byte"])
    return value


def _kept_fields(position: Position) -> dict[str, int]:
    return {"generation": position.generation, "through_byte": position.offset}


KeptOpenLog = Annotated[
    Position,
    BeforeValidator(_kept_from_fields),
    PlainSerializer(_kept_fields, return_type=dict[str, int]),
]
"""The open log an activation kept from the copy's block-mode buffer, as a `Position`: a
write at or below its offset of its generation survived even where the open log is counted
lost.  Written and read as `{"generation": g, "through_byte": b}`, as before it was one."""


class RoleMoved(BaseModel):
    """What an activation and a switchover both answer: the active role of `database` moved
    from `previous_node` to `node`, at the new `epoch`."""

    model_config = ConfigDict(frozen=True)

    database: str
    node: str
    epoch: int
    previous_node: str

    @classmethod
    def between(cls, before: ActiveRecord, after: ActiveRecord, **answer: Any) -> Self:
        """The role moved from `before` (the active record replaced) to `after` (the one that
        won the compare-and-set); `answer`: what the answer says besides."""
        return cls(
            database=after.database,
            node=after.node,
            epoch=after.epoch,
            previous_node=before.node,
            **answer,
        )


class ActivationAnswer(RoleMoved):
    """`POST /v1/databases/{db}/activate`: the activation that won, as `cluster/activation`
    returns it: the new epoch, what it lost, and why it was allowed."""

    cause: ActivationCause
    lost_logs: int
    lost_open_log: bool
    lost_commits_at_least: int | None = None
    kept_open_log: KeptOpenLog | None = None
    last_logs: str | None = None  # what Attempt Copy Last Logs and the block buffer brought
    reason: str


class SwitchoverAnswer(RoleMoved):
    """`POST /v1/databases/{db}/switchover`: the role moved, nothing lost, as
    `cluster/switchover` returns it: the new epoch and the last generation the old active
    closed (the new stream goes on from the next one)."""

    last_log_generated: int
    lost_logs: int = 0
    lost_open_log: bool = False


class AuditEntry(BaseModel):
    """One line of a node's audit trail (`replication_node/audit.py`): who asked what of
    which node, and what came of it (`done`, `refused`, `failed`)."""

    model_config = ConfigDict(frozen=True)

    time: str  # ISO 8601, the node's clock
    node: str
    credential: str | None = None  # its name (None: none known), never its secret
    role: str | None = None
    method: str
    path: str
    target: dict[str, str] = {}  # the route's parameters: db, node, mailbox, ...
    status: int
    result: str


class AuditAnswer(BaseModel):
    """`GET /v1/audit`: a node's audit lines, oldest first."""

    model_config = ConfigDict(frozen=True)

    node: str
    lines: list[AuditEntry] = []


class BackupStamp(BaseModel):
    """`POST /v1/databases/{db}/backups/{id}/end`: the active committed the backup's stamp
    (durable in its log); its header as it now shows."""

    model_config = ConfigDict(frozen=True)

    backup_id: str
    kind: str  # a BackupKind
    generation: int  # the backup holds the log through this generation
    stamp_lsn: PositionFields  # where the stamp record is in the active's log
    header: dict[str, object]  # the database header's fields (`replication-node db-header`)
