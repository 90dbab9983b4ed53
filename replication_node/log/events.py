"""What the active's log stream tells the rest: its events, in log order, and the
acknowledgement of a commit.  Frozen values, so a listener can keep them.  (Why a
generation closed, `RollCause`, is vocabulary: dag_common.model.)"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from dag_common.model import Lsn, Position
from replication_node.log.operations import Operation
from replication_node.log.spanning import BlobRef


class AtPosition:
    """A value at a log `position` (a transaction, a durable block): its generation and
    offset, read from the position."""

    __slots__ = ()
    position: Position

    @property
    def generation(self) -> int:
        return self.position.generation

    @property
    def offset(self) -> int:
        return self.position.offset


@dataclass(frozen=True, slots=True)
class Transaction(AtPosition):
    """One committed transaction: where it is in the log, when, and what it does (as the
    store built it, or decoded once from the log where it is read)."""

    position: Position
    commit_time: datetime
    ops: tuple[Operation, ...]
    # The puts whose bodies the commit staged in the log (op index, reference), on the
    # active's own events: the LLR overlay holds their place in the log, not the bodies.
    staged: tuple[tuple[int, BlobRef], ...] = ()


@dataclass(frozen=True, slots=True)
class ClosedGeneration:
    """Event: a generation was closed and renamed; it can now be shipped."""

    generation: int
    creation_time: datetime
    close_time: datetime
    # Logs Required after it: the lowest generation holding a part of a staged body still
    # pending at its close (0: none; `spanning.py`).
    required_from: int = 0


@dataclass(frozen=True, slots=True)
class Committed:
    """The acknowledgement of one durable transaction."""

    lsn: Lsn
    commit_time: datetime


# Every durable transaction (before its committer is answered) and every closed generation.
StreamEvent = Transaction | ClosedGeneration
