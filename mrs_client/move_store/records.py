"""The records of the move store: a move request (`MoveRecord`) and a batch of them
(`BatchRecord`), frozen, each saved whole as JSON."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, fields, replace
from datetime import datetime
from typing import Any, TypedDict

from dag_common.json_object import JsonObject
from dag_common.model import Lsn, Position
from mrs_client.item_limits import SkippedItem
from mrs_client.policy import MovePriority, MoveState, MoveStep, StallStatus


@dataclass(frozen=True)
class MoveRecord:
    """One move request and how far it got."""

    id: str
    mailboxes: tuple[str, ...]
    source_db: str
    target_db: str
    created: datetime
    updated: datetime
    state: MoveState = MoveState.QUEUED
    started: datetime | None = None  # first run by a worker
    step: MoveStep = MoveStep.RECORD_REQUEST  # the step in progress (or failed)
    steps_done: int = 0  # the last step completed
    stalled_since: datetime | None = None
    stall_reason: str | None = None
    stall_status: StallStatus | None = None  # Exchange's name for why it waits now
    time_stalled: float = 0.0  # seconds, over the move's life
    stalled_by: dict[str, float] = field(default_factory=dict)  # StallStatus -> seconds
    failure: str | None = None
    failed_stalled: StallStatus | None = None  # failed by a stall limit, waiting on this
    items_copied: int = 0
    bytes_copied: int = 0
    # What a sync pass knows it has to copy: the items copied so far and the live items of the
    # pass's source listings (0: not known yet); the percent `mrs move` shows is of this.
    items_total: int = 0
    sync_cursor: dict[str, int] = field(default_factory=dict)  # mailbox -> change number
    snapshot_change: dict[str, int] = field(default_factory=dict)
    incremental_passes: int = 0
    # The flush points of steps 6 and 9 in the target's stream (`target_epoch`): a whole
    # generation (offset 0), or the record at a byte of the open log (every copy in block
    # mode: policy.flush_point).  The unlock's holds the target's unlock.  Saved as the
    # flat `final_generation`/`final_offset` of before (`_SAVED_AS`).
    final_position: Position | None = None
    unlock_position: Position | None = None
    flush_started: datetime | None = None
    completed: datetime | None = None
    # Stream incarnations (epochs; 0: not seen yet).  A cursor is only as good as the epochs
    # it was read and written under: the source's it counts in, the target's that holds what
    # it covers.  Any answer naming another epoch makes the move reconcile first.
    target_epoch: int = 0
    source_epoch: int = 0
    flush_epoch: int = 0  # the target epoch step 6's flush was Satisfied for
    verified_epoch: int = 0  # the target epoch in which the digests were found equal
    unlock_epoch: int = 0  # the target epoch that acknowledged every unlock of step 9
    reconcile_pending: bool = False  # saved before a reconcile, cleared once it is done
    reconcile_reason: str | None = None
    target_in_doubt: bool = False  # the reconcile due must also flush the target again
    reconciles: int = 0
    verify_rounds: int = 0  # verifications that found a difference
    items_repaired: int = 0  # items written again or removed by reconciles
    # Exchange's -LargeItemLimit and -BadItemLimit: how many items of each kind the move may
    # skip (item_limits), and those it skipped.  In the record, not a table of their own, so
    # that a skip is saved in the same transaction as the cursor that passes it.
    large_item_limit: int = 0
    bad_item_limit: int = 0
    skipped: tuple[SkippedItem, ...] = ()
    # Fleet moves (a batch's, run by `mrs serve` workers): the batch, the priority the
    # workers take moves in, when the move may run next (a synced move's next incremental
    # sync, a failed move's retry), how often a batch re-queued it after a stall failure,
    # and the last worker that ran it.
    batch: str | None = None
    priority: MovePriority = MovePriority.NORMAL
    not_before: datetime | None = None
    retries: int = 0
    worker: str | None = None
    # The mailboxes whose soft-deleted copy in the target (an earlier move's source) this
    # move replaces: found at the request, or at step 2, which removes them.
    replaces_soft_deleted: tuple[str, ...] = ()

    @property
    def final_point(self) -> Lsn | None:
        """Step 6's flush point, in the target's stream as the move saw it (None: none yet)."""
        position = self.final_position
        return position.at(self.target_epoch) if position is not None else None

    @property
    def unlock_point(self) -> Lsn | None:
        """Step 9's flush point (see `final_point`)."""
        position = self.unlock_position
        return position.at(self.target_epoch) if position is not None else None

    def unstalled(self, **changes: Any) -> MoveRecord:
        """This record with `changes`, no longer stalled: its stall's start, reason and
        status cleared (the time it stalled stays counted)."""
        return replace(self, stalled_since=None, stall_reason=None, stall_status=None, **changes)

    def to_json(self) -> str:
        # The fields one level deep (not `asdict`, which deep-copies every value): the
        # record is saved many times a move, and its containers hold plain values.
        data: JsonObject = {}
        for name in _MOVE_FIELDS:
            value = getattr(self, name)
            if name in _SAVED_AS:
                data.update(position_fields(_SAVED_AS[name], value))
            else:
                data[name] = value.isoformat() if isinstance(value, datetime) else value
        data["state"] = str(self.state)
        data["step"] = int(self.step)
        data["priority"] = self.priority.name
        data["mailboxes"] = list(self.mailboxes)
        data["replaces_soft_deleted"] = list(self.replaces_soft_deleted)
        data["skipped"] = [s.as_dict() for s in self.skipped]
        return json.dumps(data)

    @classmethod
    def from_json(cls, text: str) -> MoveRecord:
        data = json.loads(text)
        for key in (
            "created",
            "updated",
            "started",
            "stalled_since",
            "flush_started",
            "completed",
            "not_before",
        ):
            if data.get(key):
                data[key] = datetime.fromisoformat(data[key])
        data["state"] = MoveState(data["state"])
        data["step"] = MoveStep(data["step"])
        data["mailboxes"] = tuple(data["mailboxes"])
        # a record from before it was kept replaced nothing
        data["replaces_soft_deleted"] = tuple(data.get("replaces_soft_deleted", ()))
        data["priority"] = MovePriority[data.get("priority", "NORMAL")]
        for key in ("stall_status", "failed_stalled"):
            if data.get(key):
                data[key] = StallStatus(data[key])
        # a record from before item limits has none (and loads with 0 and 0)
        data["skipped"] = tuple(SkippedItem.from_dict(s) for s in data.get("skipped", ()))
        for name, prefix in _SAVED_AS.items():
            data[name] = _position_from(data, prefix)
        return cls(**data)

    def as_dict(self) -> JsonObject:
        """The record as it is saved (its JSON object: what `--json` prints)."""
        return json.loads(self.to_json())


_MOVE_FIELDS = tuple(f.name for f in fields(MoveRecord))

# The flush points' fields and the prefix of the two keys each is saved as, in its place:
# `{prefix}_generation`, and `{prefix}_offset` (null: the whole generation), the record's
# format since before a position was one type, so that a move in flight across an upgrade
# reads its point back, and a record is written back byte for byte as it was read.
_SAVED_AS = {"final_position": "final", "unlock_position": "unlock"}


def position_fields(prefix: str, position: Position | None) -> dict[str, int | None]:
    """A flush point as the record saves it (and `mrs stats` prints it): `{prefix}_generation`
    and `{prefix}_offset`, None for the whole generation (or for no point)."""
    generation, offset = position if position is not None else (None, None)
    return {f"{prefix}_generation": generation, f"{prefix}_offset": offset or None}


class MoveHeadline(TypedDict):
    """What a report of a move opens with (`mrs stats`, a move of `mrs batch report`)."""

    id: str
    mailboxes: list[str]
    source: str
    target: str
    state: str
    step: int


def headline(record: MoveRecord) -> MoveHeadline:
    """The move's id, mailboxes, databases, state and step, as its reports say them."""
    return {
        "id": record.id,
        "mailboxes": list(record.mailboxes),
        "source": record.source_db,
        "target": record.target_db,
        "state": str(record.state),
        "step": int(record.step),
    }


def _position_from(data: JsonObject, prefix: str) -> Position | None:
    """The position saved under `prefix` (taken out of `data`), None if none is saved."""
    generation = data.pop(f"{prefix}_generation", None)
    offset = data.pop(f"{prefix}_offset", None)
    if generation is None:
        return None
    if not (_count(generation) and generation >= 1 and (offset is None or _count(offset))):
        raise ValueError(
            f"{prefix}_generation {generation!r}, {prefix}_offset {offset!r}: not a log position"
        )
    return Position(generation, offset or 0)


def _count(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


@dataclass(frozen=True)
class BatchSettings:
    """What an operator sets on a batch (`mrs batch create`; some may change while it runs:
    `mrs batch set`)."""

    start_after: datetime | None = None  # no move of the batch starts before
    complete_after: datetime | None = None  # moves wait, synced, until then
    suspend_when_ready_to_complete: bool = False  # moves wait, synced, for `batch complete`
    incremental_sync_interval: float = 86400.0  # seconds between two syncs of a synced move
    priority: MovePriority = MovePriority.NORMAL
    large_item_limit: int = 0
    bad_item_limit: int = 0
    max_mb_per_s: float | None = None  # the batch's throughput cap (None: none)
    stall_retries: int = 3  # a move failed by the stall limit is queued again up to this
    stall_retry_after: float = 900.0  # seconds before such a move is queued again


@dataclass(frozen=True)
class BatchRecord:
    """A migration batch: its name, its settings, and what an operator asked of it."""

    name: str
    created: datetime
    settings: BatchSettings = field(default_factory=BatchSettings)
    moves: tuple[str, ...] = ()
    suspended: bool = False  # `mrs batch suspend`: no move of it runs until resumed
    complete_requested: datetime | None = None  # `mrs batch complete`
    cancelled: bool = False

    def to_json(self) -> str:
        data = asdict(self)
        settings = data["settings"]
        for holder in (data, settings):
            for key, value in holder.items():
                if isinstance(value, datetime):
                    holder[key] = value.isoformat()
        settings["priority"] = self.settings.priority.name
        data["moves"] = list(self.moves)
        return json.dumps(data)

    @classmethod
    def from_json(cls, text: str) -> BatchRecord:
        data = json.loads(text)
        settings = data["settings"]
        for holder, keys in (
            (data, ("created", "complete_requested")),
            (settings, ("start_after", "complete_after")),
        ):
            for key in keys:
                if holder.get(key):
                    holder[key] = datetime.fromisoformat(holder[key])
        settings["priority"] = MovePriority[settings["priority"]]
        data["settings"] = BatchSettings(**settings)
        data["moves"] = tuple(data["moves"])
        return cls(**data)

    def as_dict(self) -> JsonObject:
        """The batch as it is saved (its JSON object: what `--json` prints)."""
        return json.loads(self.to_json())
