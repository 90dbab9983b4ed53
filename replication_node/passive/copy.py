"""The replica instance of a passive copy: seeder, copier, inspector, replayer, truncator.

This module wires the stages and owns the copy's lifecycle and status:

    start ─▶ (no database file) seed ─▶ open: markers from the database header and the
             local logs ─▶ Copier.run ∥ Replayer.run (passive truncation after each replay)

- `CopyFailed` from any stage stops the pipeline: FailedAndSuspended, with the reason.
- Suspension (by an operator, or by a failure) is kept in `copy-state.json` beside the
  database, so a node restart does not quietly resume a copy someone stopped; so is
  activation suspension (the copy replicates, but is never activated until resumed).
- Any other error (a full disk, say) is Failed with the reason; the pipeline starts again
  after `failed_retry` seconds, from what is durable.
- Reads of a passive copy go to a read-only handle of its own database file (`reader`).
"""

from __future__ import annotations

import asyncio
import errno
import logging
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from dag_common.backoff import Backoff
from dag_common.clock import Clock
from dag_common.model import CopyMode, CopyRole, CopyStatus, CopyStatusReport
from dag_common.tasks import cancel_and_wait
from replication_node.admin_api import BlockBufferAnswer, LastLogsAnswer
from replication_node.errors import (
    Conflict,
    CopyFailed,
    DatabaseError,
    LogShareError,
    NotFound,
)
from replication_node.log.logfile import closed_log_name, scan
from replication_node.log.spares import SparePool
from replication_node.log.truncation import delete_through, passive_truncation_limit
from replication_node.passive.blocks import BlockReceiver
from replication_node.passive.copier import Copier, keep_open_log
from replication_node.passive.copy_state import CopyState
from replication_node.passive.local_logs import prepare_local_logs
from replication_node.passive.markers import Markers
from replication_node.passive.replayer import Replayer
from replication_node.passive.seeder import SeedProgress, seed_bytes, seed_copy, seed_over
from replication_node.passive.settings import PassiveSettings
from replication_node.passive.status import ScrubSummary, copy_status, status_report
from replication_node.shipping.interfaces import CopyLogs, LogSource
from replication_node.storage.database import Database
from replication_node.storage.header import DatabaseHeader
from replication_node.storage.paths import CopyPaths
from replication_node.storage.scrub import Scrubber, check_in_thread

if TYPE_CHECKING:
    from replication_node.metrics import NodeMetrics

logger = logging.getLogger(__name__)


class PassiveCopy:
    """One passive database copy on this node."""

    role = CopyRole.PASSIVE

    def __init__(
        self,
        *,
        settings: PassiveSettings,
        paths: CopyPaths,
        source: LogSource,
        clock: Clock,
        retry_interval: float = 1.0,
        failed_retry: float = 10.0,
        metrics: NodeMetrics | None = None,
        peers: Sequence[CopyLogs] = (),
    ) -> None:
        self.settings = settings
        self.paths = paths
        self._source = source
        self._peers = tuple(peers)  # the other passive copies, for a generation the active
        # could not give whole
        self._clock = clock
        self._retry = retry_interval
        self._failed_retry = failed_retry
        self.markers = Markers()
        self._task: asyncio.Task[None] | None = None
        self._follower: asyncio.Task[None] | None = None  # while the pipeline is stopped
        self._db: Database | None = None
        self._reader: Database | None = None
        self._phase = CopyStatus.INITIALIZING  # what the running pipeline is doing
        self._suspended = False
        self._failed = False
        self._activation_suspended = False  # replicates, but is never activated
        self._activation_reason: str | None = None
        self._seed_state: SeedProgress | None = None  # the running seed's progress
        self._corrupt = False  # the file failed a check: no reads until a reseed
        self._checked = False  # the file passed the check on open in this process
        self.scrubber: Scrubber | None = None  # the running pipeline's background scrub
        self.error: str | None = None
        self._metrics = metrics.copy(settings.database) if metrics else None
        # Truncated generations kept for the next ones to be written over (`log/spares.py`).
        self.spares = SparePool.recycling(
            paths.logs, settings.log_file_size, settings.spare_log_files
        )
        self._blocks: BlockReceiver | None = None  # the running pipeline's block mode
        self._copier: Copier | None = None  # the running pipeline's
        # The lost active whose last logs this copy waits for, to mount without a loss
        # (set by the failover monitor under Lossless, and while they are being copied).
        self.awaiting_last_logs_from: str | None = None
        # A running backup of this copy needs the generations from here on (None: none).
        self.backup_hold: int | None = None

    @property
    def database(self) -> str:
        return self.settings.database

    # ---- lifecycle -----------------------------------------------------------------------
    async def start(self) -> None:
        self.paths.root.mkdir(parents=True, exist_ok=True)
        self._load_state()
        if self._suspended:
            self._open_markers_only()
            logger.info("%s: starts suspended (%s)", self.database, self.error)
            self._follow_while_stopped()
            return
        self._launch()

    async def stop(self) -> None:
        await self._halt()
        self._close_reader()

    async def suspend(self, reason: str) -> None:
        """Stop copying and replaying until resumed (what is replayed stays readable)."""
        await self._halt()
        self._suspended, self._failed, self.error = True, False, reason
        self._save_state()
        logger.info("%s: suspended: %s", self.database, reason)
        self._follow_while_stopped()

    def suspend_activation(self, reason: str) -> None:
        """Keep replicating, but never be activated until resumed (ActivationSuspended)."""
        self._activation_suspended, self._activation_reason = True, reason
        self._save_state()
        logger.info("%s: activation suspended: %s", self.database, reason)

    def resume_activation(self) -> None:
        """May be activated again (replication is left as it is)."""
        if self._activation_suspended:
            logger.info("%s: activation resumed", self.database)
        self._activation_suspended, self._activation_reason = False, None
        self._save_state()

    @property
    def activation_suspended(self) -> bool:
        return self._activation_suspended

    async def resume(self) -> None:
        """Start the pipeline again from where it stopped (also after a failure), and allow
        activation again (Exchange's Resume-MailboxDatabaseCopy resumes both)."""
        self.resume_activation()
        if not self._suspended and self._task is not None and not self._task.done():
            return
        await self._halt()
        self._suspended, self._failed, self.error = False, False, None
        logger.info("%s: resumed", self.database)
        try:
            self._save_state()
        finally:  # a state that cannot be saved (a full disk) must not leave it halted
            self._launch()

    async def reseed(self) -> None:
        """Throw the copy away and seed it again from the active (in the background)."""
        await self._halt()
        self._close_reader()
        self._suspended, self._failed, self.error = False, False, None
        self._corrupt = self._checked = False
        self.markers = Markers()
        logger.info("%s: reseed requested", self.database)
        try:
            self._save_state()
        finally:
            # The state unsaved (a full disk): the caller hears why, and the seed runs
            # anyway, failing with the reason in status and retried, rather than the copy
            # left halted while its status still says what it was before.
            self._launch(reseed=True)

    def _launch(self, *, reseed: bool = False) -> None:
        self._phase = CopyStatus.SEEDING if reseed else CopyStatus.INITIALIZING
        self._task = asyncio.create_task(self._run(reseed), name=f"passive {self.database}")

    async def _halt(self) -> None:
        try:
            await cancel_and_wait([self._follower, self._task])
        finally:
            self._follower, self._task = None, None
            if self._db is not None:
                self._db.close()
                self._db = None

    # ---- the pipeline --------------------------------------------------------------------
    async def _run(self, reseed: bool) -> None:
        retry = Backoff.fixed(self._failed_retry)
        while True:
            try:
                if reseed or not self.paths.database.exists():
                    await self._seed()
                    reseed = False
                await self._pipeline()
            except CopyFailed as exc:
                self._fail(str(exc))
                self._follow_while_stopped()
                return
            except Exception as exc:
                logger.exception(
                    "%s: pipeline failed; starting again in %ss", self.database, self._failed_retry
                )
                self._phase, self.error = CopyStatus.FAILED, f"{type(exc).__name__}: {exc}"
                if self._db is not None:
                    self._db.close()
                    self._db = None
                await self._clock.sleep(retry.next())

    async def _seed(self) -> None:
        self._phase, self._checked = CopyStatus.SEEDING, False
        self._close_reader()
        retry = Backoff.fixed(self._retry)
        while True:
            try:
                self._seed_state = SeedProgress()
                info = await seed_copy(self._source, self.paths, self._seed_state)
                break
            except LogShareError as exc:
                self.error = f"seeding: {exc}"
                wait = retry.next()
                if retry.worth_saying():
                    logger.warning("%s: seed failed (%d tries), again in %gs: %s",
                                   self.database, retry.failures, wait, exc)  # fmt: skip
                await self._clock.sleep(wait)
        self.error = None
        self.markers = Markers(
            last_log_copied=info.waypoint,
            last_log_inspected=info.waypoint,
            last_log_replayed=info.waypoint,
        )

    async def _pipeline(self) -> None:
        # Before anything is replayed into it or read from it: a copy that stopped without a
        # clean shutdown (a passive never does) may have been damaged while nobody watched;
        # a file not known sound is never Healthy (pipeline.md: why not in the background).
        logger.info("%s: checking %s before replay", self.database, self.paths.database)
        _, problem = await check_in_thread(self.paths.database)
        if problem is None:
            try:
                self._db = await asyncio.to_thread(Database.open, self.paths.database)
            except DatabaseError as exc:  # the header itself cannot be read
                problem = str(exc)
        self._checked = problem is None
        if problem is not None:
            self._corrupt = True
            raise CopyFailed(
                f"the database file {self.paths.database.name} is corrupt (SQLite quick_check: "
                f"{problem}); reseed the copy"
            )
        out_of_date, rejoining = await asyncio.to_thread(
            prepare_local_logs,
            self.paths,
            self._db.header,
            self.markers,
            self.database,
            self._clock,
        )
        self._phase, self.error = CopyStatus.HEALTHY, None
        header = self._db.header
        inspected = asyncio.Event()
        blocks = BlockReceiver(
            source=self._source,
            node=self.settings.node,
            directory=self.paths.root / "Blocks",
            markers=self.markers,
            log_signature=header.log_signature,
            clock=self._clock,
            retry_interval=self._retry,
            spares=self.spares,
        )
        copier = Copier(
            source=self._source,
            paths=self.paths,
            markers=self.markers,
            header=header,
            clock=self._clock,
            on_inspected=inspected.set,
            out_of_date=out_of_date,
            rejoining=rejoining,
            max_inspection_failures=self.settings.max_inspection_failures,
            retry_interval=self._retry,
            metrics=self._metrics,
            blocks=blocks if self.settings.block_mode else None,
            peers=self._peers,
            spares=self.spares,
        )
        replayer = Replayer(
            db=self._db,
            log_dir=self.paths.logs,
            markers=self.markers,
            replay_lag_time=self.settings.replay_lag_time,
            clock=self._clock,
            wakeup=inspected,
            after_replay=self._truncate,
            metrics=self._metrics,
            content_check_every=self.settings.content_check_every,
        )
        self._copier, self._blocks = copier, blocks
        tasks = [asyncio.create_task(copier.run()), asyncio.create_task(replayer.run())]
        if self.settings.block_mode:
            tasks.append(asyncio.create_task(blocks.run()))
        else:
            blocks.reason = "block mode is off for this database (block_mode: false)"
        if self.settings.scrub_interval is not None:
            self.scrubber = Scrubber(
                path=self.paths.database,
                clock=self._clock,
                interval=self.settings.scrub_interval.total_seconds(),
                on_damage=self._damaged,
            )
            tasks.append(asyncio.create_task(self.scrubber.run()))
        try:
            done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
            for task in done:
                task.result()  # re-raise what stopped the stage
        finally:
            self._copier, self._blocks = None, None
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    # ---- Attempt Copy Last Logs ----------------------------------------------------------
    async def copy_last_logs(self, active_node: str, *, timeout: float = 20.0) -> LastLogsAnswer:
        """Before this copy takes over from `active_node`, which is not mounted but can be
        reached: have it hold its logs (`hand_over`), copy every closed generation it has
        (the running copier does, inspected as always), then keep its open log as the
        generation it stands for (`Copier.copy_open_log`).  LogShareError (nothing lost
        from what was copied before) if it cannot be done within `timeout` seconds."""
        copier = self._copier
        status = self.status().status
        if copier is None or status not in (
            CopyStatus.HEALTHY,
            CopyStatus.DISCONNECTED_AND_HEALTHY,
        ):
            raise Conflict(f"the copy of {self.database} on {self.settings.node} is {status}")
        before = self.awaiting_last_logs_from
        self.awaiting_last_logs_from = active_node
        try:
            info = await self._source.hand_over(self.settings.node)
            m = self.markers
            if not await copier.wait_inspected(info.last_generation, timeout):
                stopped = f"; the copy stopped: {self.error}" if self._copier is not copier else ""
                raise LogShareError(
                    f"the closed generations through {info.last_generation} were not copied "
                    f"from {active_node} within {timeout:g}s (inspected through "
                    f"{m.last_log_inspected}){stopped}"
                )
            kept = None
            if info.open_commits:
                data = await self._source.fetch_open_log()
                kept = await keep_open_log(
                    copier, data, LogShareError, f"the open log from {active_node}"
                )
            return LastLogsAnswer(
                database=self.database,
                node=self.settings.node,
                source=active_node,
                closed_through=info.last_generation,
                open_log=kept,
                last_log_inspected=m.last_log_inspected,
            )
        finally:
            self.awaiting_last_logs_from = before

    async def keep_block_buffer(self) -> BlockBufferAnswer:
        """Before this copy takes over from a lost active: keep what its block-mode buffer
        holds of the open generation as that generation (sealed at its last whole record and
        inspected like a copied log), so the activation loses at most the commits that were
        in flight.  Conflict if block mode still follows a running active."""
        copier, blocks = self._copier, self._blocks
        if copier is None or blocks is None:
            raise Conflict(f"the copy of {self.database} on {self.settings.node} is not running")
        if blocks.mode is CopyMode.BLOCK:
            raise Conflict(
                f"the copy of {self.database} on {self.settings.node} still follows its active "
                "in block mode"
            )
        data = await blocks.keep_buffer()
        kept = None
        if data is not None:
            kept_through = scan(data).valid_end  # the end of its last whole record
            kept = await keep_open_log(
                copier, data, Conflict, "the block-mode buffer cannot be kept", kept_through
            )
        return BlockBufferAnswer(
            database=self.database,
            node=self.settings.node,
            kept=kept,
            last_log_inspected=self.markers.last_log_inspected,
        )

    def _truncate(self) -> None:
        m = self.markers
        limit = passive_truncation_limit(
            last_log_replayed=m.last_log_replayed,
            source_first_generation=m.source_first_generation,
            copied_times=m.copied_times,
            now=self._clock.monotonic(),
            replay_lag_time=self.settings.replay_lag_time,
            truncation_lag_time=self.settings.truncation_lag_time,
            required_from=self._db.header.required_from if self._db is not None else 0,
        )
        if self._db is None:  # not open: what its Logs Required are is not known here
            return
        if self.backup_hold is not None:  # a backup is copying them
            limit = max(min(limit, self.backup_hold - 1), 0)
        if limit and min(m.copied_times, default=limit + 1) <= limit:
            deleted = delete_through(self.paths.logs, limit, self.spares)
            if deleted and self._metrics is not None:
                self._metrics.truncated.inc(len(deleted))
            for gen in [g for g in m.copied_times if g <= limit]:
                del m.copied_times[gen]
            if deleted:
                logger.debug(
                    "%s: truncated generations %d-%d", self.database, deleted[0], deleted[-1]
                )

    def _damaged(self, reason: str) -> None:
        """The scrub found the file damaged: no more reads from it, kept across restarts."""
        self._corrupt = True

    def _follow_while_stopped(self) -> None:
        """While the pipeline is stopped (suspended, failed), keep hearing how far the
        active's log has gone: the copy queue counts against it whatever the copy's state,
        as Exchange shows it (a suspended copy's queue grows as the active writes)."""
        if self._follower is None or self._follower.done():
            self._follower = asyncio.create_task(
                self._follow_generated(), name=f"passive {self.database} (stopped)"
            )

    async def _follow_generated(self) -> None:
        m = self.markers
        while True:
            try:
                info = await self._source.info()
            except LogShareError as exc:
                logger.debug("%s: the active cannot say how far it is: %s", self.database, exc)
            else:
                m.last_log_generated = max(m.last_log_generated, info.last_generation)
                m.open_generation, m.open_commits = info.open_generation, info.open_commits
            await self._clock.sleep(self._retry)

    def _no_room(self) -> str | None:
        """Why the copy's volume cannot take the next generation, or None.  Said in the
        status at once, not only when the next write fails: a copy whose disk filled while
        nothing was shipped to it would otherwise stay Healthy, and count toward a
        guarantee, until the active's next log came (seconds under load).  One statvfs per
        status; the copy's state is left as it is, so that it is Healthy again as soon as
        there is room."""
        try:
            free = shutil.disk_usage(self.paths.root).free
        except OSError:
            return None  # not there yet (before its first start): nothing to say
        need = self.settings.log_file_size
        if free >= need:
            return None
        return (
            f"OSError: [Errno {errno.ENOSPC}] No space left on device: {free} bytes free for "
            f"{self.paths.root}, less than the {need} bytes of the next log generation"
        )

    def _fail(self, reason: str) -> None:
        logger.error("%s: copy FailedAndSuspended: %s", self.database, reason)
        self._suspended, self._failed, self.error = True, True, reason
        self._save_state()
        if self._db is not None:
            self._db.close()
            self._db = None

    # ---- persistent suspension -----------------------------------------------------------
    def _load_state(self) -> None:
        state = CopyState.load(self.paths.root)
        self._suspended, self._failed = state.suspended, state.failed
        self._corrupt, self.error = state.corrupt, state.reason
        self._activation_suspended = state.activation_suspended
        self._activation_reason = state.activation_reason

    def _save_state(self) -> None:
        CopyState(
            self._suspended,
            self._failed,
            self._corrupt,
            self.error,
            self._activation_suspended,
            self._activation_reason,
        ).save(self.paths.root)

    def _open_markers_only(self) -> None:
        """Markers of a suspended copy, for its status: what its files say (nothing, when
        its damaged file cannot even be opened: it stays suspended with its error, for a
        reseed, instead of stopping the node's start)."""
        if not self.paths.database.exists():
            return
        try:
            db = Database.open(self.paths.database)
        except DatabaseError as exc:
            logger.warning("%s: a suspended copy's file cannot be read: %s", self.database, exc)
            return
        try:
            prepare_local_logs(self.paths, db.header, self.markers, self.database, self._clock)
        finally:
            db.close()

    # ---- reads and status ----------------------------------------------------------------
    def open_databases(self) -> list[Database]:
        """The handles on its file open now (replay's, reads'), for the idle release."""
        return [db for db in (self._db, self._reader) if db is not None]

    def reader(self) -> Database | None:
        """A read handle on the replayed database; None until its file passed the check on
        open in this process (not while seeding, checking, or started suspended), and while a
        copy that was active is not checked against the active's stream."""
        if not self._checked or self.paths.was_active.exists() or self._corrupt:
            return None
        if self._reader is None and self.paths.database.exists():
            self._reader = Database.open(self.paths.database)
        return self._reader

    def inspected_log(self, generation: int, epoch: int) -> Path:
        """A closed generation this copy inspected on the stream of `epoch`, for another copy
        that could not get it whole from the active (`shipping/copy_share.py`); NotFound or
        Conflict naming why not."""
        m = self.markers
        if m.epoch != epoch:
            raise Conflict(
                f"{self.settings.node} follows the stream of epoch {m.epoch or 'unknown'}, "
                f"not {epoch}: its generations are not proven to be that stream's"
            )
        if generation > m.last_log_inspected:
            raise Conflict(
                f"{self.settings.node} has inspected through generation "
                f"{m.last_log_inspected}, not {generation}"
            )
        path = self.paths.logs / closed_log_name(generation)
        if not path.is_file():
            raise NotFound(f"generation {generation} is no longer on {self.settings.node}")
        return path

    @property
    def header(self) -> DatabaseHeader | None:
        """The replaying database's header (None while the pipeline is not running)."""
        return self._db.header if self._db is not None else None

    def _close_reader(self) -> None:
        if self._reader is not None:
            self._reader.close()
            self._reader = None

    def _seed_progress(self) -> tuple[int, int | None] | None:
        """The running seed's (bytes done, bytes in all); None once it is over, or stopped."""
        seed = self._seed_state
        if seed is None:
            return None
        if self._suspended or seed_over(seed, self.markers.last_log_inspected):
            self._seed_state = None
            return None
        return seed_bytes(seed, self.markers.last_log_inspected)

    def status(self) -> CopyStatusReport:
        m, last = self.markers, self.scrubber.last if self.scrubber else None
        no_room = None if self._suspended else self._no_room()
        status = copy_status(
            suspended=self._suspended,
            failed=self._failed,
            phase=self._phase,
            markers=m,
            no_room=no_room is not None,
        )
        return status_report(
            settings=self.settings,
            markers=m,
            status=status,
            error=no_room or self.error,
            scrub=ScrubSummary(last.finished, last.describe()) if last else None,
            awaiting_last_logs_from=self.awaiting_last_logs_from,
            blocks=self._blocks.progress() if self._blocks else None,
            activation_suspended=self._activation_suspended,
            activation_reason=self._activation_reason,
            seed=self._seed_progress(),
        )
