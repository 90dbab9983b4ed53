"""Stream incarnations: which epoch wrote which part of a database's log stream (pure).

Every activation (a failover or a switchover) starts a new epoch, and the new active writes
the stream on from `start_generation`: the generation after the last one it had when it
mounted.  Generations below that point it inherited from the epochs before; from that point
on they are its own.  The history of epochs is therefore a list of fork points, as
PostgreSQL's timeline history files are, and it answers the one question a write's
acknowledgement cannot answer by itself: is the write at (epoch, generation) still in the
stream, or was it lost when a later epoch forked below it?

A write acknowledged at (E, g) is in the current stream exactly when no later epoch began at
or below g: each later epoch kept the generations below its own start.  A switchover starts
the new epoch after the last generation the old active closed, so it never loses a write.

One refinement: a copy activated with the open log its block-mode buffer held kept that
generation only through the bytes it had received (`kept_through`, a prefix of what the old
active wrote); a write in it at or past that offset was lost all the same.

Each record also says why the role moved (`ActivationCause`, with the mount dial an
activation was held to), when, and how many generations of the previous active's stream
the new one did not hold (`lost_logs`): what `replication-node db history` shows.  A record
written before these were kept says None: unknown.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum

from dag_common.model import AutoDatabaseMountDial, Lsn, Position


class ActivationCause(StrEnum):
    """Why a copy became the active one (why an epoch began)."""

    FIRST_MOUNT = "FirstMount"  # the database's first active: its preferred copy
    SWITCHOVER = "Switchover"  # moved from a running active, losing nothing
    AUTOMATIC_FAILOVER = "AutomaticFailover"  # a passive copy's node, its active lost
    MANUAL_ACTIVATION = "ManualActivation"  # an operator's `db activate`
    CONFIG_CHANGE = "ConfigChange"  # the active's copy was removed from the config


@dataclass(frozen=True, slots=True)
class EpochRecord:
    """One incarnation of a database's stream: written by `node` at `epoch` from
    `start_generation` on (1 when the epoch's start is not known: the safe side)."""

    database: str
    epoch: int
    node: str
    start_generation: int
    # The generation before `start_generation` was kept only through this byte (a block-mode
    # buffer); None: whole.
    kept_through: int | None = None
    # When the role moved (the cluster store's UTC time at the compare-and-set), why, the
    # dial an activation was held to, and how many generations holding acknowledged commits
    # of the previous active's stream were not held by the new one (counting the open log,
    # also when it was kept only in part: see `kept_through`).  None: not known.
    began: datetime | None = None
    cause: ActivationCause | None = None
    mount_dial: AutoDatabaseMountDial | None = None
    lost_logs: int | None = None

    def loses(self, position: Position) -> bool:
        """Whether a write of an earlier epoch at `position` is not in this epoch's stream
        (offset 0, the whole generation or an unknown offset, counts as lost in a partly
        kept generation)."""
        generation, offset = position
        if self.start_generation <= generation:
            return True
        partly_kept = self.kept_through is not None and generation == self.start_generation - 1
        return partly_kept and (offset == 0 or offset >= (self.kept_through or 0))


def fork_below(history: Iterable[EpochRecord], lsn: Lsn) -> EpochRecord | None:
    """The first epoch after `lsn.epoch` whose stream does not hold the write at `lsn`: it
    was lost with it; None if the write is still in the stream."""
    for record in sorted(history, key=lambda r: r.epoch):
        if record.epoch > lsn.epoch and record.loses(lsn.position):
            return record
    return None


def current_epoch(history: Iterable[EpochRecord]) -> int:
    """The newest epoch in the history (0: none recorded)."""
    return max((r.epoch for r in history), default=0)
