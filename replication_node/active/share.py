"""What an active copy serves to its passive copies: the `LogShareSource` of one database.

Mounted, it serves the stream: its closed generations, the info (LastLogGenerated, the open
log at risk), a notification each time a generation closes or an open one is announced, and
a seed of the database file.  Not mounted, it serves what is on its disk to a copy taking
over (Attempt Copy Last Logs, the old active's half: `hand_over`), while the hold lasts.

Two figures of the stream, kept apart on purpose: `last_log_generated` is the last CLOSED
generation (what the log share can serve, what a switchover waits for), and
`generated_at_risk` counts the open log too once it holds an acknowledged commit (the seeds'
LastLogGenerated for a log being written: what the status reports and what a copy would lose).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from pathlib import Path

from dag_common.clock import Clock
from replication_node.active.copy import ActiveCopy
from replication_node.active.handover import LastLogsHold
from replication_node.active.settings import ActiveSettings
from replication_node.errors import Conflict, LogFormatError, LogShareError
from replication_node.log.blocks import BlockFeed
from replication_node.log.logdir import list_closed_generations
from replication_node.shipping.interfaces import LogShareInfo, SeedInfo
from replication_node.storage.stoppable import run_in_thread

logger = logging.getLogger(__name__)


class ActiveLogShare:
    """The log share source of one active copy, mounted or holding its last logs."""

    def __init__(
        self,
        *,
        settings: ActiveSettings,
        logs: Path,
        clock: Clock,
        mounted: Callable[[], ActiveCopy | None],
    ) -> None:
        self.database, self.node, self.epoch = settings.database, settings.node, settings.epoch
        self._logs = logs
        self._mounted = mounted  # the mounted copy, None while not mounted
        self.last_logs = LastLogsHold(
            database=self.database,
            node=self.node,
            logs=logs,
            clock=clock,
            seconds=settings.handover_hold,
        )
        # Notified when a generation closes or an open one is announced (the log share's
        # notification stream waits on it), and when the copy mounts or dismounts.
        self._changed = asyncio.Condition()

    def block_feed(self) -> BlockFeed | None:
        """The mounted stream's durable blocks, for copies in block mode (None: not mounted)."""
        copy = self._mounted()
        return copy.stream.feed if copy is not None else None

    async def notify(self) -> None:
        """Wake every notification stream: the figures may have moved."""
        async with self._changed:
            self._changed.notify_all()

    # ---- Attempt Copy Last Logs: the old active's half (active/handover.py) --------------

    @property
    def held_for(self) -> str | None:
        return self.last_logs.held_for

    def holding(self) -> bool:
        """Whether the last logs are held for a copy taking over (the hold not yet ended)."""
        return self.last_logs.active()

    async def hand_over(self, to: str) -> LogShareInfo:
        """Hold the last logs for the copy on `to`, which is taking over: what is on disk.
        Conflict while mounted (a running active is moved by a switchover)."""
        if self._mounted() is not None:
            raise Conflict(
                f"{self.database} is mounted on {self.node}: a running active is moved by a "
                "switchover, not taken over"
            )
        again = self.last_logs.hold(to)
        try:
            info = await asyncio.to_thread(self.last_logs.share_info, self.epoch)
        except (OSError, LogFormatError) as exc:
            self.last_logs.end()
            raise LogShareError(
                f"{self.database}: cannot read the logs on {self.node}: {exc}"
            ) from exc
        await self.notify()
        if not again:
            logger.warning(
                "%s: handing over to %s: closed generations %d-%d and the open log (generation "
                "%d, %d transaction(s)) are served to it; this node does not mount for %gs",
                self.database,
                to,
                info.first_generation,
                info.last_generation,
                info.open_generation,
                info.open_commits,
                self.last_logs.seconds,
            )
        return info

    def open_log_path(self) -> Path | None:
        """E00.log, while it is held for the copy taking over (never while mounted)."""
        return None if self._mounted() is not None else self.last_logs.open_log_path()

    # ---- the stream's figures ------------------------------------------------------------

    @property
    def log_dir(self) -> Path:
        return self._logs

    @property
    def last_log_generated(self) -> int:
        """The last closed generation."""
        copy = self._mounted()
        return copy.stream.last_closed_generation if copy else 0

    @property
    def open_commits(self) -> int:
        """Acknowledged commits in the open log E00.log."""
        copy = self._mounted()
        return copy.stream.open_commits if copy else 0

    @property
    def generated_at_risk(self) -> int:
        """LastLogGenerated counting the open log once it holds an acknowledged commit."""
        copy = self._mounted()
        if copy is None:
            return 0
        return copy.stream.generation if self.open_commits else self.last_log_generated

    # ---- LogShareSource ------------------------------------------------------------------

    def share_info(self) -> LogShareInfo:
        copy = self._mounted()
        if copy is None:
            return self.last_logs.share_info(self.epoch)
        gens = list_closed_generations(self._logs)
        header = copy.header
        return LogShareInfo(
            database=self.database,
            database_signature=str(header.database_signature),
            log_signature=str(header.log_signature),
            first_generation=gens[0] if gens else 0,
            last_generation=copy.stream.last_closed_generation,
            open_generation=copy.stream.generation,
            epoch=self.epoch,
            open_commits=self.open_commits,
        )

    async def wait_for_generation(
        self, after: int, timeout: float, *, at_risk_after: int | None = None
    ) -> int:
        def changed() -> bool:
            if self.last_log_generated > after:
                return True
            return at_risk_after is not None and self.generated_at_risk > at_risk_after

        async with self._changed:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._changed.wait_for(changed), timeout)
        return self.last_log_generated

    async def seed_to(self, dest: Path) -> SeedInfo:
        copy = self._mounted()
        if copy is None:
            raise LogShareError(f"{self.database} is not mounted on {self.node}: no seed")
        # The whole file: a stop interrupts it rather than waits for it (`stoppable.py`).
        header = await run_in_thread(lambda interrupt: copy.db.backup_to(dest, interrupt))
        return SeedInfo(
            database_signature=str(header.database_signature),
            log_signature=str(header.log_signature),
            waypoint=header.waypoint,
        )
