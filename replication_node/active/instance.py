"""The replica instance of an active copy: the mounted database and what serves it.

Owns the `ActiveCopy` (log stream, database, LLR) and its lifecycle: mount from disk
(`mounting.py`), dismount on a failure of the stream or of the scrub, re-mount, the
operator's dismount, the quiesce of a switchover (`switchover.py`).  Holds what serves it:
the `MailboxStore` that turns requests into operations, the idle log roller, the log share
passive copies pull from (`share.py`), the log truncation (`truncator.py`), and its record
in the cluster store (`publication.py`): each open log's first commit is announced, with
the change-number ceiling, before it is acknowledged (`publish_open_log`), and the closed
generations are published as LastLogGenerated (`_publish_closes`: at most every
PUBLISH_EVERY while they close, the last one always).  And its lease on the role (`lease.py`): taken
before each mount, renewed while mounted, checked before each commit is answered; lost, the
copy dismounts; released at a switchover's quiesce and at a clean dismount.

Attempt Copy Last Logs, the old active's half (`handover.py`, served by `share.py`): while
its last logs are held for a copy taking over, this copy mounts neither by itself nor by
`db mount`.  A node coming back after a crash, whose E00.log holds transactions, holds by
itself when a copy says it waits for its last logs (the seeds' Lossless: "should the
original active appear, its log files will be copied"), instead of mounting its own copy.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime
from typing import TYPE_CHECKING

from dag_common.backoff import Backoff
from dag_common.clock import Clock
from dag_common.cluster_store.interface import ActiveRecord, ClusterStore
from dag_common.config_defaults import ActiveFailurePolicy
from dag_common.model import CopyRole, CopyStatusReport
from dag_common.tasks import cancel_and_wait
from replication_node.active.backup_leases import BackupLeases, begin_answer, stamp
from replication_node.active.change_feed import ChangeFeed
from replication_node.active.copy import ActiveCopy, CopyPaths
from replication_node.active.handover import copy_waiting_for_last_logs
from replication_node.active.imap_counters import MAX_UID, lost_reservation
from replication_node.active.lease import LeaseKeeper
from replication_node.active.log_mend import CopyLogs, LogMend, StepDown
from replication_node.active.mailbox_store import MailboxStore
from replication_node.active.mounting import open_active_copy
from replication_node.active.publication import ActivePublication
from replication_node.active.redelivery import DumpsterRedelivery
from replication_node.active.settings import ActiveSettings
from replication_node.active.share import ActiveLogShare
from replication_node.active.status import active_status
from replication_node.active.switchover import SwitchoverQuiesce
from replication_node.active.truncator import ActiveTruncator
from replication_node.admin_api import BackupLease, BackupStamp
from replication_node.errors import (
    Conflict,
    CopyFailed,
    Deposed,
    HeldForHandOver,
    LeaseLost,
    LogFormatError,
    LogStreamStopped,
    NotActive,
)
from replication_node.log.events import ClosedGeneration, StreamEvent, Transaction
from replication_node.log.logstream import LogStream
from replication_node.log.operations import BackupKind
from replication_node.log.truncation import CopyProgress
from replication_node.storage.scrub import Scrubber

if TYPE_CHECKING:
    from replication_node.metrics import NodeMetrics

logger = logging.getLogger(__name__)

# LastLogGenerated is published at most this often while generations close (`_publish_closes`).
PUBLISH_EVERY = 1.0


class ActiveInstance:
    """A mounted database copy on this node."""

    role = CopyRole.ACTIVE

    def __init__(
        self,
        *,
        settings: ActiveSettings,
        paths: CopyPaths,
        clock: Clock,
        cluster_store: ClusterStore,
        peer_progress: Callable[[], Awaitable[list[CopyProgress]]] | None = None,
        metrics: NodeMetrics | None = None,
        copy_awaiting_logs: Callable[[], Awaitable[str | None]] | None = None,
        redelivery: DumpsterRedelivery | None = None,
        copy_logs: Sequence[CopyLogs] = (),
        step_down: StepDown | None = None,
    ) -> None:
        self.settings = settings
        self.paths = paths
        self._clock = clock
        self._copy_awaiting_logs = copy_awaiting_logs
        # Asks the transports to redeliver after a lossy activation (`redelivery.py`).
        self.redelivery = redelivery
        # Which copy it is and the epoch it serves: what the node and its routes ask of it.
        database, node, epoch = settings.database, settings.node, settings.epoch
        self.database, self.node, self.epoch = database, node, epoch
        self.copy: ActiveCopy | None = None
        self.store: MailboxStore | None = None
        # The mounted copy's change feed (`change_feed.py`): one per mount, ended with it.
        self.changes: ChangeFeed | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self.error: str | None = None
        self.last_close_time: datetime | None = None
        self._mount_tasks: list[asyncio.Task[None]] = []  # the idle roller and the watch
        self._closes = asyncio.Event()  # a generation closed since LastLogGenerated was published
        self.dismounted_by_operator = False
        # A mount (crash recovery, opening the files) is under way: not mounted yet, not failed.
        self.mounting = False
        self._stream_metrics = metrics.stream(database) if metrics else None
        self.publication = ActivePublication(
            cluster_store=cluster_store, database=database, node=node, epoch=epoch, clock=clock
        )
        self.switchover = SwitchoverQuiesce(
            database=database, clock=clock, generated=lambda: self.last_log_generated
        )
        self.lease = LeaseKeeper(
            cluster_store=cluster_store,
            database=database,
            node=node,
            epoch=epoch,
            ttl=settings.lease_ttl,
            clock=clock,
            handing_over=lambda: self.switching_to,
        )
        self.mend = LogMend(
            database=database, epoch=epoch, copies=copy_logs, clock=clock, step_down=step_down,
            on_mended=metrics.mended(database) if metrics else None,
        )  # fmt: skip
        # The one backup of this database that may run (from any copy), by lease.
        self.backups = BackupLeases(clock=clock, ttl=settings.lease_ttl)
        # What passive copies pull: the stream mounted, or its last logs held for a copy
        # taking over.
        self.share = ActiveLogShare(
            settings=settings, logs=paths.logs, clock=clock, mounted=lambda: self.copy
        )
        self.truncator = (
            ActiveTruncator(
                database=database,
                logs=paths.logs,
                clock=clock,
                # with the backup stamps not yet in the file: the stamp is durable in the log
                header=lambda: self.copy.merged_header if self.copy else None,
                peer_progress=peer_progress,
                circular_logging=settings.circular_logging,
                interval=settings.truncation_interval,
                truncated=metrics.truncated(database) if metrics else None,
                read_hold=lambda: self.copy.bodies.reading_from() if self.copy else None,
                spares=lambda: self.copy.stream.spares if self.copy else None,
            )
            if peer_progress is not None
            else None
        )
        # The background scrub of the active's own file, as of every copy's.
        self.scrubber = (
            Scrubber(
                path=paths.database,
                clock=clock,
                interval=settings.scrub_interval.total_seconds(),
                on_damage=lambda reason: None,
            )
            if settings.scrub_interval is not None
            else None
        )

    async def start(self) -> None:
        """Mount the database (creating it the first time) and start serving; or, back after
        a crash with transactions in E00.log while a copy waits for them, hold them for it."""
        waiting = await copy_waiting_for_last_logs(self.paths.logs, self._copy_awaiting_logs)
        if waiting is None:
            await self._mount()
        else:
            self.share.last_logs.hold(waiting)
            logger.warning(
                "%s: not mounted on %s: the copy on %s waits to mount it with this node's last "
                "logs (the open log E00.log holds transactions); they are served to it for "
                "%gs, after which this node mounts its own copy if the role has not moved",
                self.database,
                self.node,
                waiting,
                self.share.last_logs.seconds,
            )
            self._tasks.append(
                asyncio.create_task(self._remount_loop(), name=f"remount {self.database}")
            )
        if self.redelivery is not None:
            # the time of the last log this copy had when it mounted: LastLogInspected's
            self._tasks.append(
                asyncio.create_task(
                    self.redelivery.run(self.last_close_time), name=f"redelivery {self.database}"
                )
            )
        if self.truncator is not None:
            self._tasks.append(
                asyncio.create_task(self.truncator.run(), name=f"truncate {self.database}")
            )
        if self.scrubber is not None:
            self._tasks.append(
                asyncio.create_task(self._scrub_loop(self.scrubber), name=f"scrub {self.database}")
            )

    async def _mount(self) -> None:
        """Open the files from disk (crash recovery) and serve; the first mount and every
        re-mount after a failure go this way, never reusing a failed stream's memory.
        Meanwhile `mounting` is set: a request is told to ask again (409), not that the
        copy is down (503)."""
        self.mounting = True
        try:
            await self._open_and_serve()
        finally:
            self.mounting = False

    async def _open_and_serve(self) -> None:
        if self.share.holding():
            raise HeldForHandOver(
                f"{self.database} is not mounted on {self.node}: its last logs are held for "
                f"the copy on {self.share.held_for}, which is taking over"
            )
        await self.lease.acquire()
        record = await self.publication.record()
        self.copy = await open_active_copy(
            settings=self.settings,
            paths=self.paths,
            clock=self._clock,
            record=record,
            publish_open_log=self.publish_open_log,
            lease=self.lease,
        )
        # No generation above the waypoint (a clean mount): the file knows its last log's time.
        self.last_close_time = self.copy.last_closed_time or self.copy.header.last_log_time
        store = MailboxStore(self.copy)
        # A file (or logs) from before UIDs: numbered once, before any write is taken.
        await store.assign_uids()
        # A lossy activation: the UIDs the lost tail may have shown, never given again.
        await self._reserve_lost(store, record)
        self.store = store
        self.changes = _change_feed(self.copy)
        self.copy.stream.set_metrics(self._stream_metrics)
        # After the copy's own listener: a transaction is in the overlay when this one sees it.
        self.copy.stream.add_listener(self._on_event)
        stream = self.copy.stream
        stream.keep_spares(self.settings.spare_log_files)
        self._mount_tasks = [
            asyncio.create_task(self.mend.run(self.copy), name=f"log-mend {self.database}"),
            asyncio.create_task(
                stream.run_idle_roller(self.settings.roll_interval.total_seconds()),
                name=f"idle-roll {self.database}",
            ),
            asyncio.create_task(self._watch(stream), name=f"watch {self.database}"),
            asyncio.create_task(self.lease.run(), name=f"lease {self.database}"),
            asyncio.create_task(self._watch_lease(stream), name=f"watch-lease {self.database}"),
            asyncio.create_task(self._publish_closes(), name=f"publish {self.database}"),
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

    async def _reserve_lost(self, store: MailboxStore, record: ActiveRecord | None) -> None:
        """Commit `ReserveLost` if this epoch's activation lost logs (`lost_reservation`),
        before the store takes any write."""
        copy = store.copy
        first_mount = record is None or record.epoch != self.epoch or not record.open_generation
        lost_logs = await self.publication.lost_logs() if first_mount else 0
        by = lost_reservation(
            lost_logs=lost_logs,
            first_mount_of_epoch=first_mount,
            ceiling=copy.change_number_floor,
            held=copy.held_change_number,
        )
        if await store.reserve_lost(by) is None:
            return
        exhausted = [
            f"{row.mailbox}/{row.folder}"
            for mailbox in copy.mailboxes()
            for row in copy.folder_rows(mailbox.mailbox)
            if row.uid_next > MAX_UID
        ]
        logger.warning(
            "%s: activation at epoch %d lost %d log(s): every folder's UIDNEXT and "
            "HIGHESTMODSEQ and every mailbox's next UIDVALIDITY advanced by %d (change "
            "numbers %d held, ceiling %d), so no UID the lost logs may have shown is given "
            "again%s",
            self.database,
            self.epoch,
            lost_logs,
            by,
            copy.held_change_number,
            copy.change_number_floor,
            f"; {len(exhausted)} folder(s) have no UID left and refuse new messages until "
            f"they are made again: {', '.join(exhausted[:10])}"
            if exhausted
            else "",
        )

    async def _watch(self, stream: LogStream) -> None:
        """Dismount when the log stream stops on a failure (a failed write or fsync, a full
        disk, or this node deposed): status Failed with the reason, writes 503, and then
        re-mount through crash recovery or leave it to automatic failover, as configured."""
        await stream.failed.wait()
        failure = stream.failure
        await self._drop_copy(f"dismounted after a failure of its log stream: {failure}")
        if isinstance(failure, Deposed):
            return  # another copy is active: the node's reconcile makes this one passive
        if self.settings.on_failure is ActiveFailurePolicy.REMOUNT:
            self._tasks.append(
                asyncio.create_task(self._remount_loop(), name=f"remount {self.database}")
            )
        else:
            await self.lease.release()  # the best copy need not wait for it to expire
            logger.warning(
                "%s: stays dismounted (on_active_failure: Failover): automatic failover moves "
                "it to the best copy",
                self.database,
            )

    async def _watch_lease(self, stream: LogStream) -> None:
        """The lease lost for good (surely expired, or the store names another active): stop
        the stream, which dismounts the copy (`_watch`)."""
        await self.lease.lost.wait()
        assert self.lease.lost_reason is not None
        stream.fail(self.lease.lost_reason)

    async def _scrub_loop(self, scrubber: Scrubber) -> None:
        """Scrub the active's file every cycle.  Damage dismounts it for good (a re-mount
        would open the same damaged file): status Failed with what the scrub found, and
        automatic failover moves the database to a healthy copy, which first copies this
        node's logs (Attempt Copy Last Logs), so nothing acknowledged is lost."""
        try:
            await scrubber.run()
        except CopyFailed as exc:
            await self._drop_copy(f"dismounted: {exc}")
            await self.lease.release()  # for good: the best copy need not wait for it

    async def _drop_copy(self, error: str) -> None:
        """Dismount after a failure, without a clean shutdown: status Failed with `error`,
        writes 503, the copies told at once."""
        self.error = error
        logger.critical("%s on %s: %s", self.database, self.node, error)
        copy, self.copy, self.store = self.copy, None, None
        self._end_changes()
        for task in self._mount_tasks:
            if task is not asyncio.current_task():
                task.cancel()
        if copy is not None:
            try:
                await copy.crash_close()
            except Exception:  # the disk that failed the write may fail the close too
                logger.exception("%s: closing the failed copy", self.database)
        await self.share.notify()

    async def _remount_loop(self, first_delay: float = 1.0, max_delay: float = 60.0) -> None:
        """Re-mount with backoff until it works, while this node is still the active."""
        failed, backoff = self.error, Backoff(first_delay, max_delay)
        wait = backoff.next()  # the mount failed: the first try after `first_delay`
        while self.copy is None:
            await self._clock.sleep(max(wait, self.share.last_logs.remaining()))
            try:
                await self.mount_again()
            except Deposed as exc:
                self.error = f"{failed}; not re-mounted: {exc}" if failed else None
                return
            except HeldForHandOver:
                continue
            except Exception as exc:
                wait = backoff.next()
                self.error = f"{failed}; re-mount failed ({exc}); next try in {wait:g}s"
                logger.warning("%s: %s", self.database, self.error)

    async def mount_again(self) -> bool:
        """Re-mount a dismounted copy now, through crash recovery (`db mount`); False if it
        was mounted already.  Deposed if this node is no longer the active."""
        if self.copy is not None:
            return False
        await self.publication.check_still_active()
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
        if damage := self.copy.bodies.damage_note():  # its LLR cannot flush (`log_mend`)
            raise Conflict(f"{self.database} cannot be dismounted cleanly: {damage}")
        for task in self._mount_tasks:
            task.cancel()
        copy, self.copy, self.store = self.copy, None, None
        self._end_changes()
        self.dismounted_by_operator = True
        await copy.dismount()
        await self.lease.release()
        await self.publish()
        await self.share.notify()
        logger.warning("%s dismounted on %s by an operator", self.database, self.node)
        return True

    async def stop(self, *, clean: bool = True) -> None:
        """Dismount: by default cleanly (close the open log, write everything)."""
        self._end_changes()  # first: the waiters are told while the role moves
        for task in self._mount_tasks:
            task.cancel()
        await asyncio.gather(*self._mount_tasks, return_exceptions=True)
        self._mount_tasks.clear()
        await cancel_and_wait(self._tasks)
        self._tasks.clear()
        await self.switchover.stop()
        if self.copy is not None:
            # A stream that stopped on a failure (this node deposed, a failed write) cannot
            # close its open log cleanly: the copy is closed as after a crash, and the next
            # mount recovers from disk.  Stopped before `_watch` dropped it, it used to raise
            # here and leave the database file and its log open behind the new passive.
            copy, failed = self.copy, self.copy.stream.failure
            if clean and failed is None:
                try:
                    await copy.dismount()
                    await self.lease.release()
                    await self.publish()
                except (Deposed, LeaseLost, LogStreamStopped, LogFormatError) as exc:
                    failed = exc  # meanwhile; or a damaged LLR generation unmended (`log_mend`)
            if clean and failed is not None:
                logger.warning(
                    "%s on %s: not stopped cleanly (its log stream or its LLR flush failed): %s",
                    self.database,
                    self.node,
                    failed,
                )
            if not clean or failed is not None:
                await copy.crash_close()
        await self.share.notify()

    @property
    def switching_to(self) -> str | None:
        """The target of a switchover under way: writes are refused meanwhile."""
        return self.switchover.switching_to

    async def quiesce(self, target: str, *, hold: float = 180.0) -> int:
        """A switchover to `target` begins: take no more writes, close the open log; the
        last closed generation, which the target must replay before it takes over.  Writes
        resume by themselves after `hold` seconds unless the role moved."""
        assert self.copy is not None
        generation = await self.switchover.quiesce(self.copy, target, hold)
        # The target may be activated as soon as it has replayed: no lease to wait out.
        # Renewed again if the switchover is abandoned (the next commit's fence does it).
        await self.lease.release()
        return generation

    def unquiesce(self) -> None:
        """The switchover was abandoned: take writes again."""
        self.switchover.unquiesce()

    def _end_changes(self) -> None:
        """This mount is over: its change feed's waiters wake and find out why."""
        if self.changes is not None:
            self.changes.end()
            self.changes = None

    def _on_event(self, event: StreamEvent) -> None:
        if isinstance(event, Transaction):
            if self.changes is not None:
                self.changes.observe(event)
        elif isinstance(event, ClosedGeneration):
            self.last_close_time = event.close_time
            asyncio.get_running_loop().create_task(self._closed(event))

    async def _closed(self, event: ClosedGeneration) -> None:
        await self.share.notify()
        self._closes.set()
        if self.truncator is not None:
            self.truncator.closed()

    async def _publish_closes(self) -> None:
        """LastLogGenerated published once generations closed, at most every PUBLISH_EVERY:
        the latest then, the last one of a burst always.  Each is a write to the cluster
        store (a SQLite transaction with fsync, or an etcd round of consensus); published at
        each close it was one a MiB written (issue 49's profile of 1 MiB messages).  What
        it is read for does not wait on it: a failover counts the lost logs from the open
        generation announced before each generation's first acknowledgement, and from what
        the copies heard (`mount_policy.generations_at_risk`: LastLogGenerated "may miss the
        last" roll already); a roll asked for (`roll`) and a dismount publish at once."""
        while True:
            await self._closes.wait()
            self._closes.clear()
            await self.publish()
            await self._clock.sleep(PUBLISH_EVERY)

    async def publish_open_log(self, generation: int, ceiling: int) -> bool:
        """Announce that the open log `generation` holds a commit (the stream awaits this
        before acknowledging it); False if the store names another active.  Store errors
        propagate: the stream retries them while its commits wait."""
        accepted = await self.publication.announce_open(generation, ceiling)
        if accepted:
            await self.share.notify()  # copies see the open log at risk at once
        else:
            self.error = (
                f"deposed: the cluster store no longer names {self.node} the active at epoch "
                f"{self.epoch}; writes are refused"
            )
        return accepted

    async def roll(self) -> int | None:
        """Close the open log and publish it, before the answer (an activation counts lost
        logs from it); the generation closed, if any.  NotActive while not mounted."""
        generation = await self._mounted().roll(force=True)
        await self.publish()
        return generation

    def begin_backup(self, node: str, kind: BackupKind) -> BackupLease:
        """A backup's lease begun for `node`, after the refusals an incremental meets."""
        return begin_answer(
            self.backups,
            self._mounted().merged_header,
            node=node,
            kind=kind,
            circular_logging=self.settings.circular_logging,
            epoch=self.epoch,
        )

    async def stamp_backup(
        self, backup_id: str, *, generation: int, ended: datetime
    ) -> BackupStamp:
        """The backup completed through `generation`: its stamp committed, its lease ended."""
        return await stamp(
            self._mounted(), self.backups, backup_id, generation=generation, ended=ended
        )

    def _mounted(self) -> ActiveCopy:
        if self.copy is None:
            raise NotActive(f"the copy of {self.database} is not mounted; write to the active")
        return self.copy

    async def publish(self) -> None:
        """Record LastLogGenerated in the cluster store (best effort: the store may be busy)."""
        if self.copy is not None:
            await self.publication.last_log_generated(self.copy.stream.last_closed_generation)

    @property
    def last_log_generated(self) -> int:
        """The last closed generation (0 while not mounted)."""
        return self.share.last_log_generated

    # ---- status --------------------------------------------------------------------------

    def reader(self) -> ActiveCopy | None:
        """The store's read side: the mounted copy, its LLR overlay merged in (None while
        dismounted)."""
        return self.copy

    def status(self) -> CopyStatusReport:
        return active_status(self)


def _change_feed(copy: ActiveCopy) -> ChangeFeed:
    """A change feed for a copy just mounted: what it shows now is its floor; a deleted
    item's folder is read from its tombstone, in the overlay by then."""

    def folder_of(mailbox: str, item_id: str) -> str | None:
        row = copy.item(mailbox, item_id)
        return row.folder if row is not None else None

    floor = max(copy.header.last_change_number, copy.overlay.max_change_number)
    return ChangeFeed(floor=floor, folder_of=folder_of)
