"""Which queued moves a worker starts now: pure policy over frozen records (no I/O).

A move may run when it is waiting (Queued; or InProgress/Stalled with no live lease: its
worker died or was cut off, and it goes on from its saved cursors; or Synced and its next
sync is due), its `not_before` has passed, and its batch is neither suspended nor cancelled
nor waiting for its `start_after`.  The highest priority goes first, then the oldest.

Limits protect the copies, as MRS's throttles do (MaxActiveMovesPer{Source,Target}{MDB,Server}).
Ours, and why they differ from Exchange's defaults (5, 2, 50, 5):
- per target database 2 (Exchange's): every write of a move is shipped, inspected and
  replayed by each copy of the target; more moves into one database only lengthen its copy
  queue, which the guarantee then stalls them on.
- per source database 5 (Exchange's): reads are cheap for the source's copies.
- per source node 20 and per target node 5: a node here hosts a few databases, not a
  server's dozens; 20 readers of one node and 5 writers to one node keep its disk for mail.
- per worker 50: one event loop holds 50 running moves (bench/batch.py).
Each counts the moves running anywhere (a live lease), not only this worker's.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime

from mrs_client.move_store.records import BatchRecord, MoveRecord
from mrs_client.policy import MoveState

# States a move may be started (or taken over) in, when no one holds its lease.
STARTABLE = frozenset(
    {MoveState.QUEUED, MoveState.IN_PROGRESS, MoveState.STALLED, MoveState.SYNCED}
)


@dataclass(frozen=True, slots=True)
class MoveLimits:
    """How many moves may run at once (module docstring)."""

    per_source_database: int = 5
    per_target_database: int = 2
    per_source_node: int = 20
    per_target_node: int = 5
    per_worker: int = 50


def completes_now(record: MoveRecord, batch: BatchRecord | None, now: datetime) -> bool:
    """A synced move whose batch may complete now (`mrs batch complete`, or its
    `--complete-after` come) runs at once, not at its next incremental sync."""
    if record.state is not MoveState.SYNCED or batch is None:
        return False
    after = batch.settings.complete_after
    return batch.complete_requested is not None or (after is not None and after <= now)


def waiting_reason(
    record: MoveRecord, batch: BatchRecord | None, now: datetime, held: bool
) -> str | None:
    """Why the move cannot be started now (None: it can)."""
    if held:
        return "running"
    if record.state not in STARTABLE:
        return f"{record.state.lower()}"
    if (
        record.not_before is not None
        and record.not_before > now
        and not completes_now(record, batch, now)
    ):
        return f"not before {record.not_before.isoformat(timespec='seconds')}"
    if batch is not None:
        if batch.cancelled:
            return f"batch {batch.name} cancelled"
        if batch.suspended:
            return f"batch {batch.name} suspended"
        start = batch.settings.start_after
        if start is not None and start > now and record.steps_done == 0:
            return f"batch {batch.name} starts after {start.isoformat(timespec='seconds')}"
    return None


def pick(
    moves: Iterable[MoveRecord],
    *,
    held: Mapping[str, object],
    batches: Mapping[str, BatchRecord],
    node_of: Callable[[str], str | None],
    limits: MoveLimits,
    mine: int,
    now: datetime,
) -> list[MoveRecord]:
    """The moves to start now, in order: `moves` is every unfinished move, `held` the ids
    with a live lease (running somewhere), `node_of` a database's active node, `mine` how
    many this worker runs."""
    moves = list(moves)
    running = [m for m in moves if m.id in held]
    src_db = Counter(m.source_db for m in running)
    dst_db = Counter(m.target_db for m in running)
    src_node = Counter(node_of(m.source_db) for m in running)
    dst_node = Counter(node_of(m.target_db) for m in running)
    chosen: list[MoveRecord] = []
    ready = [
        m for m in moves if waiting_reason(m, batches.get(m.batch or ""), now, m.id in held) is None
    ]
    for m in sorted(ready, key=lambda m: (-int(m.priority), m.created, m.id)):
        if mine + len(chosen) >= limits.per_worker:
            break
        s_node, t_node = node_of(m.source_db), node_of(m.target_db)
        if (
            src_db[m.source_db] >= limits.per_source_database
            or dst_db[m.target_db] >= limits.per_target_database
            or src_node[s_node] >= limits.per_source_node
            or dst_node[t_node] >= limits.per_target_node
        ):
            continue
        chosen.append(m)
        src_db[m.source_db] += 1
        dst_db[m.target_db] += 1
        src_node[s_node] += 1
        dst_node[t_node] += 1
    return chosen
