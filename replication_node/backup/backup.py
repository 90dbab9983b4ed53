"""A backup, on the node that hosts the source copy (the seeds' Replica VSS writer): a full
backup is a consistent snapshot of the copy's database file (SQLite online backup) and every
closed generation after its waypoint through the point the backup ends; an incremental, the
generations since the last backup.  Either set also holds, from where it begins, the start
of every transaction its first log continues (a staged body pending there, `log/spanning.py`:
its first log's CARRIED record says where they began).  Coordinated through the active
(`active/backup_leases.py`):

    refusals (copy not Healthy/Mounted, destination not empty)   nothing changed
    begin on the active ─▶ a lease (renewed meanwhile)           the active refuses a second
    hold this copy's truncation above what the backup needs
    (full) snapshot the file, consistent at waypoint W
    roll on the active ─▶ R: every write acknowledged before is in generations ≤ R
    wait until this copy has inspected R; copy W+1..R (or P+1..R), each checked as the
    inspector checks a copied log (checksums, signatures, chain), each fsync'd
    manifest.json: temp, fsync, rename, directory fsync
    end on the active ─▶ it commits the stamp (a log record); copies get it by replay

A failure at any step (the active gone, the lease lost, a full disk) aborts the lease,
removes what was written and leaves no manifest; a kill -9 leaves files without a manifest
and a lease that ends by itself.  The one window where a whole backup has its manifest but
no stamp (killed between the rename and the active's answer) loses nothing: the backup is
whole, only the truncation it would allow waits for the next one.  If the active refuses
the end, the manifest is taken back.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import sqlite3
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Protocol

from dag_common.clock import Clock
from dag_common.durable import atomic_write, fsync_dir
from dag_common.model import CopyStatus
from replication_node.admin_api import BackupLease, BackupStamp
from replication_node.backup.files import (
    empty_destination_problem,
    fsync_file,
    sha256_of,
    write_file,
)
from replication_node.backup.manifest import MANIFEST_NAME, FileEntry, LogEntry, Manifest
from replication_node.errors import BackupError, BadRequest, Conflict, InspectionFailed
from replication_node.log import logfile
from replication_node.log.inspector import inspect_generation
from replication_node.log.logfile import RecordType, anchor_header, closed_log_name
from replication_node.log.spanning import decode_carried, required_from
from replication_node.storage.header import DatabaseHeader, read_header
from replication_node.storage.ops import BackupKind
from replication_node.storage.stoppable import Interrupt, run_in_thread

logger = logging.getLogger(__name__)


class BackupSource(Protocol):
    """What a backup needs of the copy it is taken from (passive or active)."""

    role: str
    log_dir: Path

    def status(self) -> CopyStatus: ...

    def usable_status(self) -> CopyStatus: ...

    def waypoint(self) -> int: ...

    def first_required(self) -> int:
        """The first generation the database file needs (`DatabaseHeader.first_required`)."""
        ...

    def inspected(self) -> int:
        """The highest closed generation in `log_dir` that passed inspection."""
        ...

    def hold_truncation(self, generation: int | None) -> None:
        """Keep generations ≥ `generation` in `log_dir` (None: release)."""
        ...

    def snapshot(self, dest: Path, interrupt: Interrupt | None = None) -> None:
        """A consistent copy of the database file at `dest` (SQLite online backup), stopped
        between two steps by `interrupt` (sqlite3.OperationalError)."""
        ...


class ActiveCalls(Protocol):
    """The active's backup routes, as the backing-up node calls them."""

    async def begin(self, node: str, kind: BackupKind) -> BackupLease: ...

    async def renew(self, backup_id: str) -> None: ...

    async def roll(self, backup_id: str) -> int: ...

    async def end(self, backup_id: str, generation: int, ended: datetime) -> BackupStamp: ...

    async def abort(self, backup_id: str) -> None: ...


@dataclass(frozen=True, slots=True)
class BackupRequest:
    database: str
    node: str
    to: Path
    kind: BackupKind


@dataclass(frozen=True, slots=True)
class BackupResult:
    manifest: Manifest
    seconds: float
    stamp: BackupStamp

    def answer(self) -> BackupAnswer:
        """What `POST /v1/databases/{db}/backup` answers: the manifest, how long the backup
        took, and the stamp the active committed."""
        return BackupAnswer(
            **{name: getattr(self.manifest, name) for name in Manifest.model_fields},
            seconds=round(self.seconds, 3),
            stamp=self.stamp,
        )


class BackupAnswer(Manifest):
    """A backup taken: its manifest's fields, with its time and its stamp beside them."""

    seconds: float
    stamp: BackupStamp


def settle_snapshot(path: Path) -> DatabaseHeader:
    """Make a snapshot file stand alone (out of WAL mode, which the copy's file is in and the
    online backup carries over: no -wal/-shm beside it) and read its header."""
    conn = sqlite3.connect(path)
    conn.row_factory = sqlite3.Row
    try:
        conn.execute("PRAGMA journal_mode=DELETE")
        return read_header(conn, path)
    finally:
        conn.close()


async def run_backup(
    request: BackupRequest,
    *,
    source: BackupSource,
    active: ActiveCalls,
    clock: Clock,
    wait_timeout: float = 120.0,
    poll: float = 0.05,
    on_running: Callable[[str | None], None] = lambda _: None,
) -> BackupResult:
    """Take the backup `request` asks for from `source` (see the module docstring)."""
    status = source.status()
    if status is not source.usable_status():
        raise Conflict(
            f"the copy of {request.database} on {request.node} is {status}: a backup is "
            f"taken from a {source.usable_status()} copy"
        )
    problem = empty_destination_problem(request.to)
    if problem:
        raise BadRequest(f"to: {problem}")
    started, t0 = clock.now(), clock.monotonic()
    lease = await active.begin(request.node, request.kind)
    backup_id = lease.backup_id
    lost: list[str] = []
    renewer = asyncio.create_task(_renew(active, backup_id, lease.lease_seconds, clock, lost))
    created = not request.to.exists()
    written: list[Path] = []
    on_running(f"a {request.kind} backup to {request.to} (id {backup_id})")
    try:
        request.to.mkdir(parents=True, exist_ok=True)
        manifest = await _take(
            request, source, active, lease, clock, started, written, lost, wait_timeout, poll
        )
        stamp = await _finish(request, active, manifest, written, lost)
    except BaseException as exc:
        renewer.cancel()
        with contextlib.suppress(Exception):
            await active.abort(backup_id)
        await asyncio.to_thread(_remove, written, request.to if created else None)
        logger.warning("%s: backup %s failed, nothing kept: %s", request.database, backup_id, exc)
        raise
    finally:
        renewer.cancel()
        source.hold_truncation(None)
        on_running(None)
    seconds = clock.monotonic() - t0
    logger.info(
        "%s: %s backup %s through generation %d to %s (%d bytes, %.1fs)",
        request.database,
        request.kind,
        backup_id,
        manifest.last_generation,
        request.to,
        manifest.total_bytes,
        seconds,
    )
    return BackupResult(manifest, seconds, stamp)


async def _renew(
    active: ActiveCalls, backup_id: str, ttl: float, clock: Clock, lost: list[str]
) -> None:
    """Renew the lease every third of its TTL; a refusal is noted in `lost` (the backup
    stops at its next step)."""
    while True:
        await clock.sleep(ttl / 3)
        try:
            await active.renew(backup_id)
        except Exception as exc:  # noted, then the backup stops itself
            lost.append(str(exc))
            return


def _check_lease(lost: list[str]) -> None:
    if lost:
        raise BackupError(f"the backup's lease on the active was lost: {lost[0]}")


async def _take(
    request: BackupRequest,
    source: BackupSource,
    active: ActiveCalls,
    lease: BackupLease,
    clock: Clock,
    started: datetime,
    written: list[Path],
    lost: list[str],
    wait_timeout: float,
    poll: float,
) -> Manifest:
    database_file: FileEntry | None = None
    if request.kind is BackupKind.FULL:
        # Truncation keeps everything the file needs as of now (the snapshot's Logs Required
        # are at least that), before the snapshot is taken.
        source.hold_truncation(source.first_required())
        target = request.to / f"{request.database}.sqlite"
        written.append(target)
        # The whole file: a stop (a cancel) interrupts it rather than waits for it.
        await run_in_thread(lambda interrupt: source.snapshot(target, interrupt))
        header = await asyncio.to_thread(settle_snapshot, target)
        await asyncio.to_thread(fsync_file, target)
        size, digest = await asyncio.to_thread(sha256_of, target)
        database_file = FileEntry(name=target.name, size=size, sha256=digest)
        after = header.waypoint
        signatures = (str(header.database_signature), str(header.log_signature))
        if signatures != (lease.database_signature, lease.log_signature):
            raise BackupError(
                f"the copy of {request.database} on {request.node} is of another database or "
                "log stream than its active's"
            )
    else:
        after = int(lease.last_backup_generation)
        source.hold_truncation(required_start(source.log_dir, after))
    _check_lease(lost)
    last = await active.roll(lease.backup_id)
    deadline = clock.monotonic() + wait_timeout
    while source.inspected() < last:
        _check_lease(lost)
        if clock.monotonic() > deadline:
            raise BackupError(
                f"the copy on {request.node} did not inspect generation {last} within "
                f"{wait_timeout:g}s (inspected through {source.inspected()})"
            )
        await clock.sleep(poll)
    logs = await asyncio.to_thread(
        _copy_logs, source.log_dir, request.to, after, last, lease, written, request.node
    )
    _check_lease(lost)
    return Manifest(
        kind=request.kind,
        backup_id=lease.backup_id,
        database=request.database,
        source_node=request.node,
        source_role=source.role,
        database_signature=uuid.UUID(lease.database_signature),
        log_signature=uuid.UUID(lease.log_signature),
        started_at=started,
        ended_at=clock.now(),
        after_generation=after,
        first_generation=logs[0].generation if logs else after + 1,
        last_generation=last,
        logs=tuple(logs),
        database_file=database_file,
    )


def required_start(log_dir: Path, after: int) -> int:
    """The first generation a set beginning after `after` holds: after + 1, or where the
    oldest staged body pending at `after` began (generation after + 1's CARRIED record), if
    those generations are still here; if not, the sets before hold them (the full backup
    held every start its own last log left pending), and a restore reads them there."""
    path = log_dir / closed_log_name(after + 1)
    try:
        records = logfile.scan(path.read_bytes()).records
    except FileNotFoundError:
        return after + 1  # _copy_logs says it is gone
    if not records or records[0].type is not RecordType.CARRIED:
        return after + 1
    first = min(required_from(decode_carried(records[0])), after + 1)
    if all((log_dir / closed_log_name(g)).exists() for g in range(first, after + 1)):
        return first
    return after + 1


def _copy_logs(
    log_dir: Path,
    to: Path,
    after: int,
    last: int,
    lease: BackupLease,
    written: list[Path],
    node: str,
) -> list[LogEntry]:
    """Copy generations after+1..last from `log_dir` (from `required_start`), each checked as
    the inspector checks a copied log and fsync'd (worker thread)."""
    log_signature = uuid.UUID(lease.log_signature)
    database_signature = uuid.UUID(lease.database_signature)
    first = required_start(log_dir, after)
    prev = anchor_header(log_dir, first - 1)
    out = []
    for gen in range(first, last + 1):
        name = closed_log_name(gen)
        try:
            data = (log_dir / name).read_bytes()
        except FileNotFoundError:
            raise BackupError(
                f"generation {gen} is no longer on {node} (truncated): take a full backup"
            ) from None
        try:
            inspected = inspect_generation(
                data,
                generation=gen,
                log_signature=log_signature,
                database_signature=database_signature,
                prev=prev,
                highest_known=last,
            )
        except InspectionFailed as exc:
            raise BackupError(f"{log_dir / name} on {node}: {exc}") from exc
        target = to / name
        written.append(target)
        entry = write_file(target, data)
        out.append(LogEntry.of(gen, entry, inspected.header.creation_time, inspected.close_time))
        prev = inspected.header
    fsync_dir(to)
    return out


async def _finish(
    request: BackupRequest,
    active: ActiveCalls,
    manifest: Manifest,
    written: list[Path],
    lost: list[str],
) -> BackupStamp:
    """Write the manifest, then have the active stamp the backup; taken back if it refuses."""
    _check_lease(lost)
    path = request.to / MANIFEST_NAME
    written.append(path)
    await asyncio.to_thread(atomic_write, path, manifest.encode())
    return await active.end(manifest.backup_id, manifest.last_generation, manifest.ended_at)


def _remove(written: list[Path], directory: Path | None) -> None:
    """Take back what a failed backup wrote (the manifest first: never a whole-looking set)."""
    for path in reversed(written):
        with contextlib.suppress(OSError):
            os.unlink(path)
    if directory is not None:  # made by this backup: gone again if nothing else is in it
        with contextlib.suppress(OSError):
            os.rmdir(directory)
