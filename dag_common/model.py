"""The vocabulary of the seeds as types: copy status, roles, mount dial, constraints, and
the frozen copy-status snapshot that `GET /v1/status` serves and the guarantee API reads.

On the wire the field names are the seeds' words in snake_case; times are RFC 3339 UTC.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Annotated, Any, Literal, NamedTuple

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PlainSerializer,
    SerializerFunctionWrapHandler,
    model_serializer,
    model_validator,
)

from dag_common.durations import format_duration, parse_duration
from dag_common.errors import IncomparableLsns
from dag_common.json_object import JsonObject

Duration = Annotated[
    timedelta,
    BeforeValidator(parse_duration),
    PlainSerializer(format_duration, return_type=str),
]
"""A duration field of the config or of a model: written as `30s`, `15m` (`durations`)."""


class CopyMode(StrEnum):
    """How a passive copy receives its active's log (Exchange 2010 SP1's continuous
    replication modes): whole closed generations, or each write as it is made durable."""

    FILE = "File"
    BLOCK = "Block"


class CopyStatus(StrEnum):
    """Copy status, as Get-MailboxDatabaseCopyStatus reports it."""

    HEALTHY = "Healthy"
    INITIALIZING = "Initializing"
    SEEDING = "Seeding"
    SUSPENDED = "Suspended"
    FAILED_AND_SUSPENDED = "FailedAndSuspended"
    FAILED = "Failed"
    RESYNCHRONIZING = "Resynchronizing"
    DISCONNECTED_AND_HEALTHY = "DisconnectedAndHealthy"
    MOUNTED = "Mounted"
    DISMOUNTED = "Dismounted"


class CopyRole(StrEnum):
    """Whether a copy takes writes (active) or replays the active's logs (passive)."""

    ACTIVE = "Active"
    PASSIVE = "Passive"


class RollCause(StrEnum):
    """Why a generation was closed (the log roll metric's `cause`)."""

    SIZE = "size"  # the open log reached log_file_size
    DEMAND = "demand"  # roll-log (the mover's final sync, an operator)
    IDLE = "idle"  # the idle roller: records waiting longer than 15 min / llr_depth
    SWITCHOVER = "switchover"  # the active quiesced for a switchover
    DISMOUNT = "dismount"  # a clean dismount


class AutoDatabaseMountDial(StrEnum):
    """How many lost logs an automatic (lossy) activation may accept."""

    LOSSLESS = "Lossless"
    GOOD_AVAILABILITY = "GoodAvailability"
    BEST_AVAILABILITY = "BestAvailability"

    @property
    def max_lost_logs(self) -> int:
        """Lossless = 0, GoodAvailability = 3, BestAvailability = 6 logs (the seeds' values)."""
        return {"Lossless": 0, "GoodAvailability": 3, "BestAvailability": 6}[self.value]


class DataMoveReplicationConstraint(StrEnum):
    """How many copies of the target database a mailbox move must reach before it completes."""

    NONE = "None"
    SECOND_COPY = "SecondCopy"
    SECOND_DATACENTER = "SecondDatacenter"
    ALL_DATACENTERS = "AllDatacenters"
    ALL_COPIES = "AllCopies"


class GuaranteeStatus(StrEnum):
    """The Data Guarantee API's three answers (the seed's)."""

    RETRY = "Retry"
    SATISFIED = "Satisfied"
    NOT_SATISFIED = "NotSatisfied"


class Position(NamedTuple):
    """Where a record is in a log stream, without the stream's incarnation: (generation,
    byte offset).  `Lsn.position` is it; a position that travels without an epoch is one:
    a staged body's id (`log.spanning.BlobId`), a durable block, a block-mode copy's
    acknowledgement, a record read back from a file.  Offset 0 names the whole generation,
    as in `Lsn`; `Position(0, 0)` is "nothing yet", below every record.

    Why a NamedTuple rather than a frozen dataclass: the order is the tuple's (generation
    first, then offset), total and consistent with `==` and `hash`, computed in C on the
    writer's and the shipper's hot paths; it unpacks (`generation, offset = position`);
    and the stream positions compared before it existed compared exactly these tuples, so
    no comparison changed meaning.  What it does not do: refuse to equal a bare
    `(generation, offset)` tuple.  The signatures say `Position`, so the type checker does
    that.  Within one stream positions are ordered; a position with an epoch is an `Lsn`,
    whose order refuses two epochs."""

    generation: int
    offset: int = 0

    def __str__(self) -> str:
        """`generation:offset`, as log messages name a position."""
        return f"{self.generation}:{self.offset}"

    def at(self, epoch: int = 0) -> Lsn:
        """This position in the stream of `epoch` (0: unknown)."""
        return Lsn(generation=self.generation, offset=self.offset, epoch=epoch)


def _position_fields(position: Position) -> dict[str, int]:
    return {"generation": position.generation, "offset": position.offset}


PositionFields = Annotated[Position, PlainSerializer(_position_fields, return_type=dict[str, int])]
"""A `Position` field of a model whose JSON names the two parts:
`{"generation": g, "offset": o}`, as the records written before `Position` did (a bare
NamedTuple would be written as a list).  Read from that object (or a list)."""


class Lsn(BaseModel):
    """A log sequence number: the generation and the byte offset of a record in it, and the
    stream incarnation (epoch) of the active that wrote it (0: unknown).  Generations are
    compared within one stream; whether (epoch, generation) survived later failovers is
    `dag_common.incarnation.fork_below`'s question.

    One type from the writer to the Data Guarantee's `FlushTarget`: the log writer makes it
    with its stream's epoch, a write's answer carries it (`store_api.Written`), the mover
    flushes to it, and CheckReplicationFlush's `pb.Lsn` is it on the wire.

    Offset 0 names the whole generation: no record starts there (the log's header does), so
    `Lsn(generation=g)` is "generation g replayed", which is what a flush after a roll waits
    for, and what CheckReplicationFlush's wire has always said with an offset of 0.  A flush
    point is therefore an `Lsn` too, with no second type beside it.

    Order: LSNs of one epoch are ordered by `position` (generation, offset), totally and
    consistently with `==` and `hash`, which count the epoch too.  LSNs of two epochs have no
    order, and comparing them raises `IncomparableLsns` (a TypeError).  No order between
    epochs would be true: a later epoch inherited the stream below its fork point and wrote
    its own above it, so (E1, g) and (E2, g) may be one record or two records of which one
    was lost, and an epoch-first order would put a lost write after every inherited one.
    Which it is depends on the epoch history (`fork_below`), not on the two LSNs, as a
    flush by an LSN with an epoch counts only copies on the database's current epoch.  An
    epoch-blind order made `a <= b` and `b <= a` hold for unequal LSNs, and `max()` pick
    whichever came first.  Epoch 0 (unknown) is one more epoch here: not comparable with a
    known one; two LSNs without epochs compare as one stream, as all did before epochs.  A
    caller that has shown two epochs share the stream compares `position`s, explicitly."""

    model_config = ConfigDict(frozen=True)

    generation: int = Field(ge=1)
    offset: int = Field(default=0, ge=0)
    epoch: int = Field(default=0, ge=0)

    @property
    def record_offset(self) -> int | None:
        """The offset of the record this LSN names; None: the whole generation."""
        return self.offset or None

    @property
    def position(self) -> Position:
        """(generation, offset): where the LSN is in its stream, without its epoch."""
        return Position(self.generation, self.offset)

    def _in_stream(self, other: Lsn) -> Position:
        """`other`'s position, once it is known to be in this LSN's stream."""
        if other.epoch != self.epoch:
            raise IncomparableLsns(self, other)
        return other.position

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Lsn):
            return NotImplemented
        return (self.epoch, self.position) == (other.epoch, other.position)

    def __hash__(self) -> int:
        return hash((self.epoch, self.position))

    def __lt__(self, other: object) -> bool:
        if not isinstance(other, Lsn):
            return NotImplemented
        return self.position < self._in_stream(other)

    def __le__(self, other: object) -> bool:
        if not isinstance(other, Lsn):
            return NotImplemented
        return self.position <= self._in_stream(other)

    def __gt__(self, other: object) -> bool:
        if not isinstance(other, Lsn):
            return NotImplemented
        return self.position > self._in_stream(other)

    def __ge__(self, other: object) -> bool:
        if not isinstance(other, Lsn):
            return NotImplemented
        return self.position >= self._in_stream(other)


class CopyStatusReport(BaseModel):
    """One database copy's replication state, as one node sees and reports it."""

    model_config = ConfigDict(frozen=True)

    database: str
    node: str
    site: str
    role: CopyRole
    status: CopyStatus
    activation_preference: int
    last_log_generated: int = 0
    last_log_copy_notified: int = 0
    last_log_copied: int = 0
    last_log_inspected: int = 0
    last_log_replayed: int = 0
    copy_queue_length: int = 0
    replay_queue_length: int = 0
    last_inspected_log_time: datetime | None = None
    last_replayed_log_time: datetime | None = None
    replay_lag_time: Duration = timedelta(0)
    truncation_lag_time: Duration = timedelta(0)
    error: str | None = None
    # The stream incarnation: the active's own epoch, or for a passive copy the epoch of the
    # active whose stream it last reached (0: not yet).  A flush by an LSN with an epoch
    # counts only copies on the database's current epoch.
    epoch: int = 0
    # Acknowledged commits in the active's open log E00.log, when `last_log_generated` is that
    # open log (0: it is a closed generation).  A passive copy reports what it last heard
    # from its active (a lower bound once the active is gone).
    open_commits: int = 0
    # The background scrub's last pass over the copy's file (every page checked by SQLite).
    last_scrub_time: datetime | None = None
    last_scrub_result: str | None = None
    # Attempt Copy Last Logs: an active copy that is not mounted names the copy it holds its
    # last logs for; a passive copy names the lost active whose last logs it waits for.
    held_for: str | None = None
    awaiting_last_logs_from: str | None = None
    # An active copy's lease on its role, by its own reckoning: seconds left (None: holds
    # none, and acknowledges no write until it renews it).
    lease_expires_in: float | None = None
    # A passive copy's replication mode; in block mode, how far it holds the open log
    # durably (`block`) beyond its last inspected generation.
    copy_mode: CopyMode = CopyMode.FILE
    # An active copy: the copies following its log in block mode, and how many must hold a
    # commit before it is acknowledged (synchronous_copies).
    block_followers: list[str] = []
    synchronous_copies: int = 0
    # Something an operator should know that is not a failure (commits waiting for their
    # synchronous copies).
    note: str | None = None
    # An active copy after a lossy activation: the transport dumpster redelivery it asks
    # for, or how the last one ended (`RedeliveryRecord.describe`).
    redelivery: str | None = None
    copy_mode_reason: str | None = None  # why in file mode, after block mode ended
    # The end of what a passive copy holds of the open log in its block-mode buffer
    # (Position(0, 0): nothing).  Written and read as the flat `block_generation` and
    # `block_offset` of the reports before it was a Position (`_BLOCK_FIELDS`).
    block: Position = Position(0, 0)
    # A passive copy that replicates as always but is never activated, by failover or by an
    # operator, until resumed (Exchange's ActivationSuspended; `db suspend --activation-only`).
    activation_suspended: bool = False
    # A passive copy's seed (or reseed), while it runs: bytes of the database file and of
    # the logs above its waypoint it needs from the active, received and inspected so far,
    # of how many (None: not seeding; a total of None: not known yet).
    seed_bytes_done: int | None = None
    seed_bytes_total: int | None = None

    # Backups, as this copy's header has them (the active's at once, from the log; a passive
    # copy's once it has replayed the active's stamp), and a backup under way: on the active,
    # whichever copy it is taken from; on the copy it is taken from, its own.
    last_full_backup_generation: int = 0
    last_full_backup_time: datetime | None = None
    last_incremental_backup_generation: int = 0
    last_incremental_backup_time: datetime | None = None
    backup_in_progress: str | None = None

    @model_validator(mode="before")
    @classmethod
    def _block_from_fields(cls, data: Any) -> Any:
        """`block` from the flat fields a report is written with (or given as `block`)."""
        if not isinstance(data, dict) or not any(key in data for key in _BLOCK_FIELDS):
            return data
        if "block" in data:
            raise ValueError("block is given both as a position and as block_* fields")
        flat = {key: value for key, value in data.items() if key not in _BLOCK_FIELDS}
        flat["block"] = {part: data.get(key, 0) for key, part in _BLOCK_FIELDS.items()}
        return flat

    @model_serializer(mode="wrap")
    def _block_as_fields(self, handler: SerializerFunctionWrapHandler) -> JsonObject:
        """The report with `block` written as its flat fields, in its place."""
        data = handler(self)
        if "block" not in data:  # excluded
            return data
        out: JsonObject = {}
        for key, value in data.items():
            if key == "block":
                out.update(zip(_BLOCK_FIELDS, value, strict=True))
            else:
                out[key] = value
        return out


# CopyStatusReport's wire fields for its `block` position, and the part each holds.
_BLOCK_FIELDS = {"block_generation": "generation", "block_offset": "offset"}


@dataclass(frozen=True, slots=True)
class CopyPlace:
    """Which copy a report is of: `database`'s copy on `node`, in `site`, at its activation
    preference.  A copy's settings are one (`ActiveSettings`, `PassiveSettings`), and its
    status report opens with it (`report`)."""

    database: str
    node: str
    site: str
    activation_preference: int

    def report(self, role: CopyRole, status: CopyStatus, **state: Any) -> CopyStatusReport:
        """This copy's report in `role` and `status`; `state`: the report's other fields."""
        return CopyStatusReport(
            database=self.database,
            node=self.node,
            site=self.site,
            role=role,
            status=status,
            activation_preference=self.activation_preference,
            **state,
        )


class FailoverPause(BaseModel):
    """Automatic failover paused for maintenance (`replication-node cluster pause`): since
    when (UTC), by whom, and why.  While it stands no copy is activated automatically; an
    operator's activation and switchover still are."""

    model_config = ConfigDict(frozen=True)

    since: datetime
    by: str
    reason: str = ""

    def described(self) -> str:
        """ "since … by …: reason", the time in the operator's local time zone."""
        when = self.since.astimezone().strftime("%Y-%m-%d %H:%M:%S %Z")
        return f"since {when} by {self.by}" + (f": {self.reason}" if self.reason else "")

    def sentence(self) -> str:
        """One line for an operator: "automatic failover paused since … by …: reason"."""
        return f"automatic failover paused {self.described()}"


class NodeStatus(BaseModel):
    """The body of `GET /v1/status`: a node and the copies it hosts."""

    model_config = ConfigDict(frozen=True)

    node: str
    site: str
    copies: list[CopyStatusReport]
    # The cluster's automatic failover pause as this node last read it from the cluster
    # store (None: not paused).
    failover_paused: FailoverPause | None = None


class RedeliveryAnswer(BaseModel):
    """A transport's answer to `POST /v1/redeliver` (its dumpster's messages of the window
    sent again): `{"status": "Success", "database": d, "messages": n}`; the active reads
    it, and asks again next round whatever else it is told."""

    model_config = ConfigDict(frozen=True)

    status: Literal["Success"]
    database: str = ""
    messages: int | None = None
