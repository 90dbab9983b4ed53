"""The replication markers of one passive copy, shared by its pipeline stages.

Each marker has one writer: the copier moves LastLogGenerated, LastLogCopyNotified,
LastLogCopied and LastLogInspected (and what it last heard of the active's open log); the
replayer moves LastLogReplayed.  Status reads them all; `PassiveCopy.status()` turns them
into a frozen `CopyStatusReport`.

`last_log_generated` is the last CLOSED generation announced (the inspector refuses anything
above it, the replayer records it as committed); `generated_at_risk` also counts the
active's open log once it holds an acknowledged commit, as Exchange's LastLogGenerated does
for a log being written: the copy queue and the status use it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime


@dataclass(slots=True)
class Markers:
    last_log_generated: int = 0
    last_log_copy_notified: int = 0
    last_log_copied: int = 0
    last_log_inspected: int = 0
    last_log_replayed: int = 0
    last_inspected_log_time: datetime | None = None
    last_replayed_log_time: datetime | None = None
    source_first_generation: int = 0  # lowest generation still on the active (0: unknown)
    epoch: int = 0  # the epoch whose stream this copy is shown to be on (0: not yet)
    open_generation: int = 0  # the active's open log (E00.log), as last heard
    open_commits: int = 0  # acknowledged commits in it, as last heard
    connected: bool = False  # the last call to the active succeeded
    disconnected_since: float | None = None  # monotonic time the active was last lost
    # Whether this copy has reached its active mounted since it began to follow it: only a
    # lost active it once reached is replaced as soon as its lease is gone (a new active
    # still mounting holds none yet).
    reached: bool = False
    # Local closed generations, each with when this copy got it, on this process's monotonic
    # clock: ReplayLagTime and TruncationLagTime count from there, so neither skew between
    # the nodes' clocks nor this node's wall clock jumping (forward and back) can shorten or
    # stretch them (a copy time stamped while the wall clock was 5 min ahead held the replay
    # of a copy without lag for those 5 min once it came back).
    copied_times: dict[int, float] = field(default_factory=dict)

    @property
    def open_log_at_risk(self) -> bool:
        """The active's open log, as last heard, holds acknowledged commits."""
        return self.open_commits > 0 and self.open_generation > self.last_log_generated

    @property
    def generated_at_risk(self) -> int:
        """LastLogGenerated counting the open log once it holds an acknowledged commit."""
        return self.open_generation if self.open_log_at_risk else self.last_log_generated

    @property
    def copy_queue_length(self) -> int:
        return max(0, self.generated_at_risk - self.last_log_inspected)

    @property
    def replay_queue_length(self) -> int:
        return max(0, self.last_log_inspected - self.last_log_replayed)
