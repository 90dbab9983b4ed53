"""The values the Data Guarantee rules take and return: frozen snapshots of copy status in,
per-copy verdicts and an `Answer` out. No behaviour beyond small derived properties.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from datetime import datetime, timedelta
from enum import StrEnum

from dag_common.config_guarantee import GuaranteeLimits
from dag_common.incarnation import EpochRecord
from dag_common.model import (
    CopyRole,
    CopyStatus,
    CopyStatusReport,
    GuaranteeStatus,
    Lsn,
)
from dag_common.model import (
    DataMoveReplicationConstraint as Constraint,
)


class Check(StrEnum):
    """One condition evaluated on one copy."""

    REACHABLE = "Reachable"
    HEALTHY = "Healthy"
    REPLAY_QUEUE = "ReplayQueue"
    COPY_QUEUE = "CopyQueue"
    AVERAGE_COPY_QUEUE = "AverageCopyQueue"
    MOUNTED = "Mounted"
    LAG_FOR_FLUSH = "LagForFlush"
    REPLAYED = "Replayed"
    STREAM = "Stream"  # the copy follows the stream incarnation the LSN must be replayed on


@dataclass(frozen=True, slots=True)
class Limits:
    """The conditions' limits and the seed's wait times."""

    max_copy_queue_length: int = 10
    max_average_copy_queue_length: float = 10.0
    average_window_time: timedelta = timedelta(minutes=3)
    replay_queue_over_lag: timedelta = timedelta(minutes=10)
    flush_clock_skew: timedelta = timedelta(seconds=5)
    flush_max_replay_lag: timedelta = timedelta(minutes=30)
    wait_no_status: timedelta = timedelta(seconds=10)
    wait_no_healthy_copy: timedelta = timedelta(minutes=2)
    wait_behind: timedelta = timedelta(minutes=1)
    wait_min: timedelta = timedelta(seconds=1)
    wait_max: timedelta = timedelta(minutes=10)

    @classmethod
    def from_config(cls, config: GuaranteeLimits) -> Limits:
        """Limits and wait times from the cluster config (defaults: the seed's): every field
        of these the config has, by its name (`wait_min` it has not)."""
        configured = GuaranteeLimits.model_fields
        return cls(**{f.name: getattr(config, f.name) for f in fields(cls) if f.name in configured})


@dataclass(frozen=True, slots=True)
class CopyRates:
    """A copy's progress measured over the view's recent polls (None: not measurable)."""

    copy_queue_per_s: float | None = None  # net change; negative while draining
    replayed_per_s: float | None = None  # generations replayed per second
    replayed_log_time_per_s: float | None = None  # seconds of log time replayed per second


@dataclass(frozen=True, slots=True)
class CopySnapshot:
    """One configured copy as the view knows it now."""

    database: str
    node: str
    site: str
    report: CopyStatusReport | None
    problem: str | None = None  # why the report cannot be trusted now
    rates: CopyRates = field(default_factory=CopyRates)

    @property
    def fresh(self) -> bool:
        return self.problem is None and self.report is not None


@dataclass(frozen=True, slots=True)
class DatabaseView:
    """Every configured copy of one database; `has_status` is False until a node reported.

    `history` is the database's stream incarnations as the cluster store records them
    (None: not known, e.g. the store could not be read)."""

    database: str
    copies: tuple[CopySnapshot, ...]
    has_status: bool = True
    history: tuple[EpochRecord, ...] | None = None


@dataclass(frozen=True, slots=True)
class FlushTarget:
    """What CheckReplicationFlush waits for: a commit time (the seed) or an LSN (exact): its
    generation replayed, or with an offset the record there held or replayed
    (`Lsn.record_offset`), in the stream incarnation it names (epoch 0: not given)."""

    commit_time: datetime | None = None
    lsn: Lsn | None = None


@dataclass(frozen=True, slots=True)
class CheckOutcome:
    check: Check
    passed: bool
    detail: str


@dataclass(frozen=True, slots=True)
class CopyVerdict:
    """How one copy fared against the request, with the numbers."""

    database: str
    node: str
    site: str
    role: CopyRole | None
    status: CopyStatus | None
    meets: bool
    checks: tuple[CheckOutcome, ...]
    copy_queue_length: int = 0
    average_copy_queue_length: float = 0.0
    replay_queue_length: int = 0
    last_log_replayed: int = 0
    last_replayed_log_time: datetime | None = None
    replay_lag_time: timedelta = timedelta(0)
    epoch: int = 0  # the stream epoch the copy reported following
    healthy: bool = False  # fresh and Healthy: decides between the 1 min and 2 min waits
    eta_s: float | None = None  # predicted seconds until it meets (0 when it does)
    eta_why: str = ""

    @property
    def failed(self) -> tuple[CheckOutcome, ...]:
        return tuple(c for c in self.checks if not c.passed)

    def describe_failures(self) -> str:
        """`mbx3: Healthy not met: status Suspended (patching)`: the condition, then why."""
        return f"{self.node}: " + "; ".join(f"{c.check} not met: {c.detail}" for c in self.failed)


@dataclass(frozen=True, slots=True)
class Answer:
    """The answer to one request."""

    database: str
    constraint: Constraint
    status: GuaranteeStatus
    retry_after: timedelta
    reason: str
    copies: tuple[CopyVerdict, ...] = ()
    epoch: int = 0  # the database's current stream epoch as the view knows it (0: unknown)
    lost: bool = False  # the flush target was lost in a failover: asking again cannot help
    # NotSatisfied with a prediction: when the conditions are expected to be met (None: not
    # predictable); the reason says from what.
    expected_in: timedelta | None = None
