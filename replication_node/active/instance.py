"""The replica instance of an active copy: the mounted database and what serves it.

Owns the `ActiveCopy` (log stream, database, LLR), the `MailboxStore` that turns requests
into operations, the idle log roller, the log share source that passive copies pull from,
and the publication of LastLogGenerated to the cluster store.

Two figures of the stream, kept apart on purpose: `last_log_generated` is the last CLOSED
generation (what the log share can serve, what a switchover waits for), and
`generated_at_risk` counts the open log too once it holds an acknowledged commit (the seeds'
LastLogGenerated for a log being written: what the status reports and what a copy would lose).
The open log's first commit of each generation is announced to the cluster store, with the
change-number ceiling, before it is acknowledged (`publish_open_log`).

Attempt Copy Last Logs, the old active's half.  While this copy is not mounted (failed,
dismounted, or just back after a crash), a copy about to take over asks it to hand over
(`hand_over`): it then holds (`held_for`), mounting neither by itself nor by `db mount`, and
its log share serves what is on its disk, the closed generations and the open log E00.log,
so that the copy loses nothing this node still has.  The hold ends when the role moves (the
node's reconcile stops this instance) or after `handover_hold` seconds (the copy did not
take over: the node mounts again as configured).  A node coming back after a crash, whose
E00.log holds transactions, holds by itself when a copy says it waits for its last logs
(the seeds' Lossless: "should the original active appear, its log files will be copied"),
instead of mounting its own copy.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING

from dag_common.clock import Clock
from dag_common.config import ActiveFailurePolicy
from dag_common.durable import atomic_write
from dag_common.model import CopyRole, CopyStatus, CopyStatusReport
from replication_node.active.copy import ActiveCopy, CopyPaths
from replication_node.active.handover import (
    HANDOVER_HOLD,
    LastLogsHold,
    open_log_holds_transactions,
)
from replication_node.cluster.store import ActiveRecord, ClusterStore
from replication_node.errors import (
    Conflict,
    CopyFailed,
    Deposed,
    HeldForHandOver,
    LogFormatError,
    LogShareError,
    RecoveryError,
)
from replication_node.interfaces import LogShareInfo, SeedInfo
from replication_node.log.logstream import (
    ClosedGeneration,
    LogStream,
    RollCause,
    StreamEvent,
    list_closed_generations,
)
from replication_node.log.truncation import CopyProgress, active_truncation_limit, delete_through
from replication_node.storage.mailbox_store import MailboxStore
from replication_node.storage.scrub import Scrubber

if TYPE_CHECKING:
    from replication_node.metrics import NodeMetrics

logger = logging.getLogger(__name__)


class ActiveInstance:
    """A mounted database copy on this node."""

    role = CopyRole.ACTIVE

    def __init__(
        self,
        *,
        database: str,
        node: str,
        site: str,
        activation_preference: int,
        paths: CopyPaths,
        log_file_size: int,
        llr_depth: int,
        roll_interval: timedelta,
        clock: Clock,
        cluster_store: ClusterStore,
        epoch: int,
        peer_progress: Callable[[], Awaitable[list[CopyProgress]]] | None = None,
        circular_logging: bool = True,
        truncation_interval: float = 5.0,
        on_failure: ActiveFailurePolicy = ActiveFailurePolicy.REMOUNT,
        metrics: NodeMetrics | None = None,
        copy_awaiting_logs: Callable[[], Awaitable[str | None]] | None = None,
        handover_hold: float = HANDOVER_HOLD,
        scrub_interval: timedelta | None = None,
    ) -> None:
        self.database = database
        self.node = node
        self.site = site
        self.activation_preference = activation_preference
        self.paths = paths
        self._log_file_size = log_file_size
        self._llr_depth = llr_depth
        self._roll_interval = roll_interval
        self._clock = clock
        self._cluster_store = cluster_store
        self.epoch = epoch
        self.copy: ActiveCopy | None = None
        self.store: MailboxStore | None = None
        # Notified when a generation closes or an open one is announced (the log share's
        # notification stream waits on it).
        self._closed_cond = asyncio.Condition()
        self._tasks: list[asyncio.Task[None]] = []
        self.error: str | None = None
        self.last_close_time: datetime | None = None
        self._peer_progress = peer_progress
        self._circular_logging = circular_logging
        self._truncation_interval = truncation_interval
        self.truncated_through = 0
        self.switching_to: str | None = None  # a switchover to this node is under way
        self._on_failure = on_failure
        self._mount_tasks: list[asyncio.Task[None]] = []  # the idle roller and the watch
        self.dismounted_by_operator = False
        self._quiesce_epoch = 0  # which quiesce a pending automatic unquiesce belongs to
        self._stream_metrics = metrics.stream(database) if metrics else None
        self._truncated = metrics.truncated(database) if metrics else None
        self._copy_awaiting_logs = copy_awaiting_logs
        self.last_logs = LastLogsHold(
            database=database, node=node, logs=paths.logs, clock=clock, hold=handover_hold
        )
        # The background scrub of the active's own file, as of every copy's.
        self.scrubber = (
            Scrubber(
                path=paths.database,
                clock=clock,
                interval=scrub_interval.total_seconds(),
                on_damage=lambda reason: None,
            )
            if scrub_interval is not None
            else None
        )

    async def start(self) -> None:
        """Mount the database (creating it the first time) and start serving; or, back after
        a crash with transactions in E00.log while a copy waits for them, hold them for it."""
        waiting = await self._copy_waiting_for_last_logs()
        if waiting is None:
            await self._mount()
        else:
            self.last_logs.hold(waiting)
            logger.warning(
                "%s: not mounted on %s: the copy on %s waits to mount it with this node's last "
                "logs (the open log E00.log holds transactions); they are served to it for "
                "%gs, after which this node mounts its own copy if the role has not moved",
                self.database,
                self.node,
                waiting,
                self.last_logs.seconds,
            )
            self._tasks.append(
                asyncio.create_task(self._remount_loop(), name=f"remount {self.database}")
            )
        if self._peer_progress is not None:
            self._tasks.append(
                asyncio.create_task(self._truncation_loop(), name=f"truncate {self.database}")
            )
        if self.scrubber is not None:
            self._tasks.append(
                asyncio.create_task(self._scrub_loop(self.scrubber), name=f"scrub {self.database}")
            )

    async def _copy_waiting_for_last_logs(self) -> str | None:
        """The copy that waits for this node's last logs, if E00.log holds transactions (after
        a clean dismount or roll it holds none, and nothing is asked)."""
        if self._copy_awaiting_logs is None:
            return None
        try:
            if not await asyncio.to_thread(open_log_holds_transactions, self.paths.logs):
                return None
        except (OSError, LogFormatError):
            return None  # no open log to hand over (crash recovery says what it finds)
        return await self._copy_awaiting_logs()

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
        if self.copy is not None:
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
        async with self._closed_cond:
            self._closed_cond.notify_all()
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
        return None if self.copy is not None else self.last_logs.open_log_path()

    async def _mount(self) -> None:
        """Open the files from disk (crash recovery) and serve; the first mount and every
        re-mount after a failure go this way, never reusing a failed stream's memory."""
        if self.holding():
            raise HeldForHandOver(
                f"{self.database} is not mounted on {self.node}: its last logs are held for "
                f"the copy on {self.held_for}, which is taking over"
            )
        create = not self.paths.database.exists() and not list_closed_generations_safe(
            self.paths.logs
        )
        # Before the first log is written as active: should this copy be passive again one
        # day, its logs above the waypoint are its own and must be checked, not replayed.
        self.paths.root.mkdir(parents=True, exist_ok=True)
        atomic_write(self.paths.was_active, f"{self.epoch}\n".encode())
        # Number above every change number an earlier active may have handed out, even in
        # an open log that was lost with it.
        record = await self._active_record()
        self.copy = await ActiveCopy.mount(
            paths=self.paths,
            log_file_size=self._log_file_size,
            llr_depth=self._llr_depth,
            clock=self._clock,
            create=create,
            change_number_floor=record.change_number_ceiling if record else 0,
            publish_open_log=self.publish_open_log,
        )
        if record is not None and (record.node, record.epoch) == (self.node, self.epoch):
            await self._check_announced_logs(record.open_generation)
        # No generation above the waypoint (a clean mount): the file knows its last log's time.
        self.last_close_time = self.copy.last_closed_time or self.copy.header.last_log_time
        self.store = MailboxStore(self.copy, epoch=self.epoch)
        self.copy.stream.set_metrics(self._stream_metrics)
        self.copy.stream.add_listener(self._on_event)
        stream = self.copy.stream
        self._mount_tasks = [
            asyncio.create_task(
                stream.run_idle_roller(self._roll_interval.total_seconds()),
                name=f"idle-roll {self.database}",
            ),
            asyncio.create_task(self._watch(stream), name=f"watch {self.database}"),
        ]
        await self.publish()
        recovered = self.copy.stream.open_commits
        logger.info(
            "%s mounted on %s at epoch %d (generation %d, waypoint %d)%s%s",
            self.database,
            self.node,
            self.epoch,
            self.copy.stream.generation,
            self.copy.header.waypoint,
            f"; E00.log holds {recovered} recovered commit(s), every one kept" if recovered else "",
            f"; recovery: {'; '.join(self.copy.recovery_notes)}"
            if self.copy.recovery_notes
            else "",
        )

    async def _watch(self, stream: LogStream) -> None:
        """Dismount when the log stream stops on a failure (a failed write or fsync, a full
        disk, or this node deposed): status Failed with the reason, writes 503, and then
        re-mount through crash recovery or leave it to automatic failover, as configured."""
        await stream.failed.wait()
        failure = stream.failure
        self.error = f"dismounted after a failure of its log stream: {failure}"
        logger.critical("%s on %s: %s", self.database, self.node, self.error)
        copy, self.copy, self.store = self.copy, None, None
        for task in self._mount_tasks:
            if task is not asyncio.current_task():
                task.cancel()
        if copy is not None:
            try:
                await copy.crash_close()
            except Exception:  # the disk that failed the write may fail the close too
                logger.exception("%s: closing the failed copy", self.database)
        async with self._closed_cond:
            self._closed_cond.notify_all()
        if isinstance(failure, Deposed):
            return  # another copy is active: the node's reconcile makes this one passive
        if self._on_failure is ActiveFailurePolicy.REMOUNT:
            self._tasks.append(
                asyncio.create_task(self._remount_loop(), name=f"remount {self.database}")
            )
        else:
            logger.warning(
                "%s: stays dismounted (on_active_failure: Failover): automatic failover moves "
                "it to the best copy",
                self.database,
            )

    async def _scrub_loop(self, scrubber: Scrubber) -> None:
        """Scrub the active's file every cycle.  Damage dismounts it for good (a re-mount
        would open the same damaged file): status Failed with what the scrub found, and
        automatic failover moves the database to a healthy copy, which first copies this
        node's logs (Attempt Copy Last Logs), so nothing acknowledged is lost."""
        try:
            await scrubber.run()
        except CopyFailed as exc:
            self.error = f"dismounted: {exc}"
            logger.critical("%s on %s: %s", self.database, self.node, self.error)
            copy, self.copy, self.store = self.copy, None, None
            for task in self._mount_tasks:
                task.cancel()
            if copy is not None:
                await copy.crash_close()
            async with self._closed_cond:
                self._closed_cond.notify_all()

    async def _remount_loop(self, first_delay: float = 1.0, max_delay: float = 60.0) -> None:
        """Re-mount with backoff until it works, while this node is still the active."""
        failed, delay = self.error, first_delay
        while self.copy is None:
            await self._clock.sleep(max(delay, self.last_logs.remaining()))
            try:
                await self.mount_again()
            except Deposed as exc:
                self.error = f"{failed}; not re-mounted: {exc}" if failed else None
                return
            except HeldForHandOver:
                continue
            except Exception as exc:
                delay = min(delay * 2, max_delay)
                self.error = f"{failed}; re-mount failed ({exc}); next try in {delay:g}s"
                logger.warning("%s: %s", self.database, self.error)

    async def mount_again(self) -> bool:
        """Re-mount a dismounted copy now, through crash recovery (`db mount`); False if it
        was mounted already.  Deposed if this node is no longer the active."""
        if self.copy is not None:
            return False
        record = await self._cluster_store.active(self.database)
        if record is None or (record.node, record.epoch) != (self.node, self.epoch):
            raise Deposed(
                f"{self.database} is no longer active on {self.node} at epoch {self.epoch}"
            )
        failed = self.error
        await self._mount()
        self.error = None
        self.dismounted_by_operator = False
        logger.warning(
            "%s re-mounted through crash recovery (it was: %s)",
            self.database,
            failed or "not mounted, its last logs held for a copy that did not take over",
        )
        return True

    async def dismount(self) -> bool:
        """Dismount cleanly by an operator's word (`db dismount`): status Dismounted, no
        re-mount and no automatic failover until `db mount`.  False if not mounted."""
        if self.copy is None:
            return False
        for task in self._mount_tasks:
            task.cancel()
        copy, self.copy, self.store = self.copy, None, None
        self.dismounted_by_operator = True
        await copy.dismount()
        await self.publish()
        async with self._closed_cond:
            self._closed_cond.notify_all()
        logger.warning("%s dismounted on %s by an operator", self.database, self.node)
        return True

    async def _active_record(self) -> ActiveRecord | None:
        """The cluster store's record of this database, retried while the store errs: the
        change-number ceiling in it must be known before any number is handed out."""
        delay, failures = 0.05, 0
        while True:
            try:
                return await self._cluster_store.active(self.database)
            except Exception as exc:
                failures += 1
                if failures == 1 or failures % 10 == 0:
                    logger.warning(
                        "%s: mount waits: cannot read the cluster store (%d attempt(s)): %s",
                        self.database,
                        failures,
                        exc,
                    )
                await self._clock.sleep(delay)
                delay = min(delay * 2, 5.0)

    async def _check_announced_logs(self, announced: int) -> None:
        """Refuse to mount if this node announced, at this epoch, an open generation holding
        acknowledged commits that its logs no longer hold (E00.log lost with a disk): a
        fresh open log of the same generation would silently drop them.  The copy then
        reports Dismounted with the reason; an operator decides (`activate --mount-dial`)."""
        assert self.copy is not None
        stream = self.copy.stream
        held = stream.generation if stream.open_commits else stream.last_closed_generation
        if announced > held:
            copy, self.copy = self.copy, None
            await copy.crash_close()
            raise RecoveryError(
                f"{self.database}: open generation {announced} held acknowledged commits "
                f"(announced in the cluster store at epoch {self.epoch}), but this copy's "
                f"logs hold generations through {held} only (E00.log lost?): not mounted, "
                "so that nothing acknowledged is silently dropped; restore the logs, or "
                "activate another copy accepting the loss (--mount-dial)"
            )

    async def stop(self, *, clean: bool = True) -> None:
        """Dismount: by default cleanly (close the open log, write everything)."""
        for task in self._mount_tasks:
            task.cancel()
        await asyncio.gather(*self._mount_tasks, return_exceptions=True)
        self._mount_tasks.clear()
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks.clear()
        if self.copy is not None:
            if clean:
                await self.copy.dismount()
                await self.publish()
            else:
                await self.copy.crash_close()
        async with self._closed_cond:
            self._closed_cond.notify_all()

    async def quiesce(self, target: str, *, hold: float = 180.0) -> int:
        """A switchover to `target` begins: take no more writes, close the open log.

        Returns the last closed generation (LastLogGenerated), which the target must replay
        before it takes over.  Every write acknowledged before is in it: writes that passed
        the store's checks are queued on the log ahead of the roll.  Should whoever runs the
        switchover vanish, writes resume by themselves after `hold` seconds unless the role
        moved (this instance is then stopped).
        """
        assert self.copy is not None
        self.switching_to = target
        self._quiesce_epoch += 1
        self._tasks.append(
            asyncio.create_task(
                self._unquiesce_after(hold, self._quiesce_epoch), name=f"quiesce {self.database}"
            )
        )
        await self.copy.roll(cause=RollCause.SWITCHOVER)
        logger.info(
            "%s: writes stopped for a switchover to %s at generation %d",
            self.database,
            target,
            self.last_log_generated,
        )
        return self.last_log_generated

    async def _unquiesce_after(self, hold: float, epoch: int) -> None:
        await self._clock.sleep(hold)
        if self.switching_to is not None and self._quiesce_epoch == epoch:
            logger.warning("%s: switchover did not finish in %.0fs", self.database, hold)
            self.unquiesce()

    def unquiesce(self) -> None:
        """The switchover was abandoned: take writes again."""
        if self.switching_to is not None:
            logger.warning("%s: switchover to %s abandoned", self.database, self.switching_to)
        self.switching_to = None

    def _on_event(self, event: StreamEvent) -> None:
        if isinstance(event, ClosedGeneration):
            self.last_close_time = event.close_time
            asyncio.get_running_loop().create_task(self._closed(event))

    async def _closed(self, event: ClosedGeneration) -> None:
        async with self._closed_cond:
            self._closed_cond.notify_all()
        await self.publish()

    async def publish_open_log(self, generation: int, ceiling: int) -> bool:
        """Announce that the open log `generation` holds a commit (the stream awaits this
        before acknowledging it); False if the store names another active.  Store errors
        propagate: the stream retries them while its commits wait."""
        accepted = await self._cluster_store.publish_open_generation(
            self.database, self.node, self.epoch, generation, ceiling
        )
        if accepted:
            logger.debug(
                "%s: open generation %d announced (change-number ceiling %d)",
                self.database,
                generation,
                ceiling,
            )
            async with self._closed_cond:
                self._closed_cond.notify_all()  # copies see the open log at risk at once
        else:
            self.error = (
                f"deposed: the cluster store no longer names {self.node} the active at epoch "
                f"{self.epoch}; writes are refused"
            )
        return accepted

    async def publish(self) -> None:
        """Record LastLogGenerated in the cluster store (best effort: the store may be busy)."""
        if self.copy is None:
            return
        try:
            await self._cluster_store.publish_last_log_generated(
                self.database, self.node, self.epoch, self.copy.stream.last_closed_generation
            )
        except Exception as exc:  # the store being busy must not stop the database
            logger.warning("%s: cannot publish LastLogGenerated: %s", self.database, exc)

    async def _truncation_loop(self) -> None:
        """Delete closed generations no copy needs any more (the seeds' truncation rules)."""
        assert self._peer_progress is not None
        errors = 0
        while True:
            await self._clock.sleep(self._truncation_interval)
            try:
                await self.truncate_once(await self._peer_progress())
            except Exception:
                errors += 1
                logger.exception("%s: truncation pass failed (%d so far)", self.database, errors)

    async def truncate_once(self, copies: list[CopyProgress]) -> int:
        """One truncation pass over the given copies' progress; the limit applied."""
        if self.copy is None:
            return 0
        header = self.copy.header
        limit = active_truncation_limit(
            checkpoint=header.checkpoint,
            copies=copies,
            backed_up_through=header.last_backup_generation,
            circular_logging=self._circular_logging,
        )
        if limit > self.truncated_through:
            deleted = await asyncio.to_thread(delete_through, self.paths.logs, limit)
            if deleted and self._truncated is not None:
                self._truncated.inc(len(deleted))
            if deleted:
                logger.info(
                    "%s: truncated %d generation(s) through %d (checkpoint %d, copies %s)",
                    self.database,
                    len(deleted) if isinstance(deleted, list) else deleted,
                    limit,
                    header.checkpoint,
                    ", ".join(
                        f"{c.node}: inspected {c.last_log_inspected} replayed {c.last_log_replayed}"
                        for c in copies
                    ),
                )
            self.truncated_through = limit
        return limit

    # ---- LogShareSource ------------------------------------------------------------------

    @property
    def log_dir(self) -> Path:
        return self.paths.logs

    @property
    def last_log_generated(self) -> int:
        """The last closed generation."""
        return self.copy.stream.last_closed_generation if self.copy else 0

    @property
    def open_commits(self) -> int:
        """Acknowledged commits in the open log E00.log."""
        return self.copy.stream.open_commits if self.copy else 0

    @property
    def generated_at_risk(self) -> int:
        """LastLogGenerated counting the open log once it holds an acknowledged commit."""
        if self.copy is None:
            return 0
        return self.copy.stream.generation if self.open_commits else self.last_log_generated

    def share_info(self) -> LogShareInfo:
        if self.copy is None:
            return self.last_logs.share_info(self.epoch)
        gens = list_closed_generations(self.paths.logs)
        header = self.copy.header
        return LogShareInfo(
            database=self.database,
            database_signature=str(header.database_signature),
            log_signature=str(header.log_signature),
            first_generation=gens[0] if gens else 0,
            last_generation=self.copy.stream.last_closed_generation,
            open_generation=self.copy.stream.generation,
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

        async with self._closed_cond:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._closed_cond.wait_for(changed), timeout)
        return self.last_log_generated

    async def seed_to(self, dest: Path) -> SeedInfo:
        if self.copy is None:
            raise LogShareError(f"{self.database} is not mounted on {self.node}: no seed")
        header = await asyncio.to_thread(self.copy.db.backup_to, dest)
        return SeedInfo(
            database_signature=str(header.database_signature),
            log_signature=str(header.log_signature),
            waypoint=header.waypoint,
        )

    # ---- status --------------------------------------------------------------------------

    def status(self) -> CopyStatusReport:
        generated = self.last_log_generated
        held = None
        if self.copy is None and self.holding():
            with contextlib.suppress(OSError, LogFormatError, LogShareError):
                held = self.share_info()  # read from disk once per hold
        return CopyStatusReport(
            database=self.database,
            node=self.node,
            site=self.site,
            role=CopyRole.ACTIVE,
            status=(
                CopyStatus.MOUNTED
                if self.copy
                else CopyStatus.FAILED
                if self.error
                else CopyStatus.DISMOUNTED
            ),
            activation_preference=self.activation_preference,
            # The seeds' LastLogGenerated counts the log being written once it holds an
            # acknowledged commit; the other markers are closed generations.
            last_log_generated=held.generated_at_risk if held else self.generated_at_risk,
            open_commits=held.open_commits if held else self.open_commits,
            last_log_copy_notified=generated,
            last_log_copied=generated,
            last_log_inspected=generated,
            last_log_replayed=generated,
            last_inspected_log_time=self.last_close_time,
            last_replayed_log_time=self.last_close_time,
            error=self.error,
            epoch=self.epoch,
            held_for=self.held_for if self.copy is None and self.holding() else None,
            last_scrub_time=self.scrubber.last.finished
            if self.scrubber and self.scrubber.last
            else None,
            last_scrub_result=self.scrubber.last.describe()
            if self.scrubber and self.scrubber.last
            else None,
        )


def list_closed_generations_safe(log_dir: Path) -> list[int]:
    return list_closed_generations(log_dir) if log_dir.exists() else []
