"""The active's side of a backup (the seeds: "the Replication service contacts the store on
the active and tells it that a backup is about to start … once the backup is finished, the
Replication service contacts the store and lets it know"; the header change is the store's,
as a log record).

`BackupLeases` (policy over an injected clock) holds the one backup of this database that
may run at a time.  Safety: at most one live lease per database, so the same database is
never backed up from two copies at once; a lease not renewed within its TTL is over, so a
backing-up side that died (kill -9, a lost node) never blocks the next backup for longer
than the TTL, and its late `end` is refused: a dead backup never stamps the header.  The
leases live in the active's memory: after a failover or a restart of the active, a backup
that was running is unknown there, its renewal fails and it stops without a stamp.

`begin` refuses an incremental backup while circular logging is on (the logs since the last
backup may already be gone, as Exchange refuses it) or before any full backup.  `stamp`
writes the completed backup into the log as a `record_backup` operation: the active's
header shows it at once (the LLR overlay), every copy's once replayed.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, replace
from datetime import datetime

from dag_common.clock import Clock
from replication_node.active.copy import ActiveCopy
from replication_node.admin_api import BackupLease, BackupStamp
from replication_node.errors import BadRequest, Conflict, NotFound
from replication_node.log.operations import BackupKind, RecordBackup
from replication_node.storage.header import DatabaseHeader


@dataclass(frozen=True, slots=True)
class RunningBackup:
    """The backup of this database under way: who takes it, what kind, its lease."""

    backup_id: str
    node: str
    kind: BackupKind
    started: datetime
    expires: float  # on the clock's monotonic scale

    def describe(self) -> str:
        since = self.started.strftime("%H:%M:%S")
        return f"a {self.kind} backup from {self.node} (id {self.backup_id}) since {since}"


class BackupLeases:
    """The one running backup of a database, by lease (see the module docstring)."""

    def __init__(self, *, clock: Clock, ttl: float) -> None:
        self._clock = clock
        self.ttl = ttl
        self._running: RunningBackup | None = None

    def running(self) -> RunningBackup | None:
        """The live backup, if any (an expired lease is over)."""
        if self._running is not None and self._running.expires <= self._clock.monotonic():
            self._running = None
        return self._running

    def begin(self, node: str, kind: BackupKind) -> RunningBackup:
        """A new backup's lease; Conflict while another one is live."""
        current = self.running()
        if current is not None:
            raise Conflict(
                f"{current.describe()} is running; one backup of a database at a time "
                f"(its lease ends within {current.expires - self._clock.monotonic():.0f}s "
                "unless renewed)"
            )
        self._running = RunningBackup(
            backup_id=uuid.uuid4().hex[:12],
            node=node,
            kind=kind,
            started=self._clock.now(),
            expires=self._clock.monotonic() + self.ttl,
        )
        return self._running

    def renew(self, backup_id: str) -> RunningBackup:
        """Extend the live lease `backup_id`; NotFound if it is over or another's."""
        current = self._live(backup_id)
        self._running = replace(current, expires=self._clock.monotonic() + self.ttl)
        return self._running

    def finish(self, backup_id: str) -> RunningBackup:
        """End the live lease `backup_id` (completed or aborted); NotFound if it is over."""
        current = self._live(backup_id)
        self._running = None
        return current

    def release(self, backup_id: str) -> None:
        """Forget `backup_id` whatever its lease says (its stamp is durable: done)."""
        if self._running is not None and self._running.backup_id == backup_id:
            self._running = None

    def _live(self, backup_id: str) -> RunningBackup:
        current = self.running()
        if current is None or current.backup_id != backup_id:
            raise NotFound(
                f"no running backup {backup_id!r} here (its lease ended, or the active changed)"
            )
        return current


def begin_answer(
    leases: BackupLeases,
    header: DatabaseHeader,
    *,
    node: str,
    kind: BackupKind,
    circular_logging: bool,
    epoch: int,
) -> BackupLease:
    """Start a backup's lease, after the refusals an incremental meets; what the backing-up
    side needs (`header`: the active's, as the log has it)."""
    if kind is BackupKind.INCREMENTAL:
        if circular_logging:
            raise BadRequest(
                "an incremental backup needs circular_logging: false (with circular logging "
                "the logs since the last backup may already be truncated); take a full backup"
            )
        if header.last_full_backup_generation == 0:
            raise Conflict("no full backup of this database yet: take a full backup first")
    running = leases.begin(node, kind)
    return BackupLease(
        backup_id=running.backup_id,
        lease_seconds=leases.ttl,
        epoch=epoch,
        kind=str(kind),
        last_backup_generation=header.last_backup_generation,
        last_full_backup_generation=header.last_full_backup_generation,
        database_signature=str(header.database_signature),
        log_signature=str(header.log_signature),
    )


async def stamp(
    copy: ActiveCopy, leases: BackupLeases, backup_id: str, *, generation: int, ended: datetime
) -> BackupStamp:
    """The backup `backup_id` completed through `generation`: end its lease and commit the
    stamp (durable in the log when this returns); the active's header as it now shows."""
    running = leases.running()
    if running is None or running.backup_id != backup_id:
        leases.finish(backup_id)  # raises NotFound, naming why
    assert running is not None
    header = copy.merged_header
    if generation <= header.last_backup_generation:
        raise BadRequest(
            f"generation {generation}: the last backup already holds generation "
            f"{header.last_backup_generation}"
        )
    if generation > copy.stream.last_closed_generation:
        raise BadRequest(
            f"generation {generation} is not closed (last closed "
            f"{copy.stream.last_closed_generation})"
        )
    await copy.admit()
    committed = await copy.commit([RecordBackup(running.kind, generation, ended.isoformat())])
    # Only once the stamp is durable (a failed commit may be retried while the lease lives),
    # and whatever the lease says now: the stamp is in the log, the backup is done.
    leases.release(backup_id)
    return BackupStamp(
        backup_id=backup_id,
        kind=str(running.kind),
        generation=generation,
        stamp_lsn=committed.lsn.position,
        header=copy.merged_header.as_dict(),
    )
