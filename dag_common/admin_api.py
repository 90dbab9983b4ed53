"""The answers of a node's admin routes that a client reads back: one model each, built by
the node and parsed by the CLI, so the two cannot drift.

`GET /v1/databases/{db}/history` is the database's role changes, one entry per epoch, as the
cluster store recorded them, and the transport dumpster's last redelivery after a lossy
activation (the record's own fields, with `required` and a `summary` sentence).
"""

from __future__ import annotations

from datetime import UTC, datetime

from pydantic import BaseModel, ConfigDict, field_serializer

from dag_common.incarnation import EpochRecord


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
