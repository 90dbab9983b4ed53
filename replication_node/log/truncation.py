"""Log truncation: which closed generations may be deleted, on the active and on a passive.

The rules are the seeds' ("Log Truncation"), as pure functions of plain values; deleting is
the one I/O helper here, `delete_through`.

Active (LCR/CCR rules, SCR-aware): a generation may go only when
  - it is below the checkpoint (its transactions are in the database file) and below the
    database's Logs Required (no staged body pending at the waypoint has a part in it:
    `spanning.py`; crash recovery would read it back for a commit above the waypoint),
  - it is backed up, or continuous replication circular logging (CRCL) is on,
  - every copy has inspected it (lagged copies keep their own inspected logs), and
  - every copy without a replay lag has replayed it.
A copy that cannot be asked counts with what it was last known to have, 0 if never heard
from: an unreachable copy holds truncation back, it never lets it run ahead.

Passive (SCR target rules): a generation may go only when
  - it is replayed, and is not the last replayed one (its header is the chain anchor for the
    next generation's inspection),
  - it is below the copy's Logs Required (a staged body pending at its replay point has
    no part in it: a later commit reads the body back from there),
  - it is older than ReplayLagTime + TruncationLagTime, and
  - it has been deleted on the source.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

from dag_common.durable import fsync_dir
from replication_node.log.logdir import list_closed_generations
from replication_node.log.logfile import closed_log_name
from replication_node.log.spares import SparePool


@dataclass(frozen=True, slots=True)
class CopyProgress:
    """What the active knows of one passive copy's progress."""

    node: str
    last_log_inspected: int
    last_log_replayed: int
    replay_lag_time: timedelta
    reachable: bool

    @property
    def lagged(self) -> bool:
        return self.replay_lag_time > timedelta(0)


def active_truncation_limit(
    *,
    checkpoint: int,
    copies: Iterable[CopyProgress],
    backed_up_through: int,
    circular_logging: bool,
    required_from: int = 0,
) -> int:
    """The highest generation the active may delete (0: none).  `required_from`: the
    database's Logs Required (0: none)."""
    limit = checkpoint - 1
    if required_from:
        limit = min(limit, required_from - 1)
    if not circular_logging:
        limit = min(limit, backed_up_through)
    for copy in copies:
        limit = min(limit, copy.last_log_inspected)
        if not copy.lagged:
            limit = min(limit, copy.last_log_replayed)
    return max(limit, 0)


def passive_truncation_limit(
    *,
    last_log_replayed: int,
    source_first_generation: int,
    copied_times: Mapping[int, float],
    now: float,
    replay_lag_time: timedelta,
    truncation_lag_time: timedelta,
    required_from: int = 0,
) -> int:
    """The highest generation a passive copy may delete (0: none).  `required_from`: its
    database's Logs Required (0: none).

    `source_first_generation` is the lowest generation still on the active (0 if unknown,
    which holds everything back); `copied_times` maps each local generation to when this
    copy got it, and `now` is this copy's monotonic clock: the lags never mix two nodes'
    clocks, and a jump of this node's wall clock moves neither.
    """
    if source_first_generation <= 0:
        return 0
    limit = min(last_log_replayed - 1, source_first_generation - 1)
    if required_from:
        limit = min(limit, required_from - 1)
    keep_after = now - (replay_lag_time + truncation_lag_time).total_seconds()
    for gen in sorted(g for g in copied_times if g <= limit):
        if copied_times[gen] > keep_after:
            return gen - 1
    return max(limit, 0)


def delete_through(log_dir: Path, limit: int, spares: SparePool | None = None) -> list[int]:
    """Delete the closed generations in `log_dir` at or below `limit`, durably; which went.
    With `spares`, each is offered to the pool first (`SparePool.retire`: renamed to a spare
    for the next generation to be written over, or unlinked)."""
    deleted = []
    for gen in list_closed_generations(log_dir):
        if gen > limit:
            break
        path = log_dir / closed_log_name(gen)
        if spares is not None:
            spares.retire(path)
        else:
            os.unlink(path)
        deleted.append(gen)
    if deleted:
        fsync_dir(log_dir)
    return deleted
