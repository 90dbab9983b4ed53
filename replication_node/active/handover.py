"""Attempt Copy Last Logs, the old active's half: holding its last logs for a copy taking
over (the seeds: "the Replication service will attempt to copy the missing log files from
the node that experienced the failure").

While an active copy is not mounted (failed, dismounted, or just back after a crash), a copy
about to take over asks it to hand over: it then holds for `hold` seconds, mounting neither
by itself nor by `db mount`, and its log share serves what is on its disk (the closed
generations and the open log E00.log), so that the copy loses nothing this node still has.
The hold ends when the role moves (the node's reconcile stops the instance) or when the time
is up (the copy did not take over; the node mounts again as configured).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

from dag_common.clock import Clock
from replication_node.errors import LogFormatError, LogShareError
from replication_node.log.logdir import list_closed_generations
from replication_node.log.logfile import (
    OPEN_LOG_NAME,
    PreparedHeader,
    closed_log_name,
    read_header,
    scan,
)
from replication_node.shipping.interfaces import LogShareInfo

logger = logging.getLogger(__name__)

# How long a copy that is not mounted holds its last logs for the copy taking over.
HANDOVER_HOLD = 60.0


def open_log_holds_transactions(logs: Path) -> bool:
    """Whether E00.log holds a transaction (after a clean dismount or roll it holds none).
    OSError or LogFormatError if it cannot be read."""
    return bool(scan((logs / OPEN_LOG_NAME).read_bytes()).transactions)


async def copy_waiting_for_last_logs(
    logs: Path, ask: Callable[[], Awaitable[str | None]] | None
) -> str | None:
    """The copy that waits for this node's last logs (`ask`ed of the other copies), if
    E00.log holds transactions (after a clean dismount or roll it holds none, and nothing
    is asked)."""
    if ask is None:
        return None
    try:
        if not await asyncio.to_thread(open_log_holds_transactions, logs):
            return None
    except (OSError, LogFormatError):
        return None  # no open log to hand over (crash recovery says what it finds)
    return await ask()


def last_logs_on_disk(logs: Path, *, database: str, node: str, epoch: int) -> LogShareInfo:
    """The log share's info from the files alone (the stream is not open)."""
    gens = list_closed_generations(logs) if logs.exists() else []
    open_path = logs / OPEN_LOG_NAME
    open_generation, open_commits = (gens[-1] + 1 if gens else 1), 0
    data = open_path.read_bytes() if open_path.exists() else None
    if data is not None and PreparedHeader.decode(data) is None:
        # (An E00.log still a prepared file, its header never written, holds no commit: as
        # if there were none, the generation after the last closed one is the open one.)
        result = scan(data)
        header = result.header
        open_generation, open_commits = header.generation, len(result.transactions)
    elif gens:
        header = read_header(logs / closed_log_name(gens[-1]))
    else:
        raise LogShareError(f"{database}: no log on {node} to hand over")
    return LogShareInfo(
        database=database,
        database_signature=str(header.database_signature),
        log_signature=str(header.log_signature),
        first_generation=gens[0] if gens else 0,
        last_generation=gens[-1] if gens else 0,
        open_generation=open_generation,
        epoch=epoch,
        open_commits=open_commits,
        mounted=False,
    )


@dataclass(kw_only=True, eq=False)
class LastLogsHold:
    """Whether, and for whom, an active copy that is not mounted holds its last logs (for
    `seconds` from each `hold`)."""

    database: str
    node: str
    logs: Path
    clock: Clock
    seconds: float = HANDOVER_HOLD
    held_for: str | None = field(default=None, init=False)
    info: LogShareInfo | None = field(default=None, init=False)  # read from disk once per hold
    _until: float = field(default=0.0, init=False)

    def hold(self, to: str) -> bool:
        """Hold for the copy on `to` from now; whether it was held for it already."""
        again = self.active() and self.held_for == to
        self.held_for, self._until, self.info = to, self.clock.monotonic() + self.seconds, None
        return again

    def active(self) -> bool:
        """Whether the hold is on (it ends by itself when its time is up)."""
        if self.held_for is not None and self.clock.monotonic() >= self._until:
            logger.warning(
                "%s: the copy on %s did not take over within %gs; the hand-over ends",
                self.database,
                self.held_for,
                self.seconds,
            )
            self.end()
        return self.held_for is not None

    def end(self) -> None:
        self.held_for, self.info = None, None

    def remaining(self) -> float:
        return max(0.0, self._until - self.clock.monotonic()) if self.active() else 0.0

    def share_info(self, epoch: int) -> LogShareInfo:
        if self.info is None:
            self.info = last_logs_on_disk(
                self.logs, database=self.database, node=self.node, epoch=epoch
            )
        return self.info

    def open_log_path(self) -> Path | None:
        return self.logs / OPEN_LOG_NAME if self.active() else None
