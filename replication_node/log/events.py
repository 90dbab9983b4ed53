"""What the active's log stream tells the rest: its events, in log order, and the
acknowledgement of a commit.  Frozen values, so a listener can keep them."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum

from dag_common.model import Lsn
from replication_node.storage.database import Transaction


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


class RollCause(StrEnum):
    """Why a generation was closed (the log roll metric's `cause`)."""

    SIZE = "size"  # the open log reached log_file_size
    DEMAND = "demand"  # roll-log (the mover's final sync, an operator)
    IDLE = "idle"  # the idle roller: records waiting longer than 15 min / llr_depth
    SWITCHOVER = "switchover"  # the active quiesced for a switchover
    DISMOUNT = "dismount"  # a clean dismount


# Every durable transaction (before its committer is answered) and every closed generation.
StreamEvent = Transaction | ClosedGeneration
