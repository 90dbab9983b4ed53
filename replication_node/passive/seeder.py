"""Seeding a passive copy: a consistent copy of the database from the active, then logs.

The active takes a SQLite online backup of its database file (consistent at its waypoint;
LLR keeps the newer transactions out of the file) and streams it; the copy lands in a temp
file that is checksummed, checked to be a database of the right signatures, fsync'd and
renamed into place.  The copy then replays from waypoint + 1, which the active still has:
it never truncates above its own checkpoint.  A reseed first removes the old database file
and every log of the copy.

Progress (`SeedProgress`, what `db reseed --wait` shows): the seed is the database file
(its length announced by the active) and the logs above its waypoint that the active had
closed when it took the copy (their sizes announced with it); those logs come through the
copier as always, and count as done once inspected.  The seed is over when the file is in
place and they are all inspected.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import shutil
from dataclasses import dataclass

from dag_common.durable import durable_rename
from replication_node.errors import DatabaseError, LogShareError
from replication_node.shipping.interfaces import LogSource, SeedInfo
from replication_node.storage.database import Database
from replication_node.storage.paths import CopyPaths

logger = logging.getLogger(__name__)


@dataclass(slots=True)
class SeedProgress:
    """How far a seed has come (a `SeedListener`): written by the seed's transfer; the
    logs are counted from the copier's markers (`last_log_inspected`)."""

    file_total: int | None = None  # None: the active did not say (yet)
    file_done: int = 0
    file_placed: bool = False  # checked and renamed into place
    waypoint: int = 0
    log_sizes: tuple[int, ...] = ()  # generations waypoint+1, waypoint+2, …

    def received(self, done: int, total: int | None) -> None:
        """Bytes of the database file received so far, of `total`."""
        self.file_done, self.file_total = done, total

    def announced(self, info: SeedInfo) -> None:
        """The active's header values of the seed, and the logs it needs from there."""
        self.waypoint, self.log_sizes = info.waypoint, info.log_sizes


def seed_bytes(progress: SeedProgress | None, last_log_inspected: int) -> tuple[int, int | None]:
    """(bytes done, bytes in all) of a running seed: the database file, then its logs, each
    counted once inspected (pure).  A total of None: the file's length is not known yet."""
    if progress is None:
        return 0, None
    logs_done = 0
    if progress.file_placed:
        inspected = max(0, last_log_inspected - progress.waypoint)
        logs_done = sum(progress.log_sizes[:inspected])
    total = None
    if progress.file_total is not None:
        total = progress.file_total + sum(progress.log_sizes)
    return progress.file_done + logs_done, total


def seed_over(progress: SeedProgress, last_log_inspected: int) -> bool:
    """Whether the seed is whole: its file in place and every log it needs inspected."""
    return progress.file_placed and (
        last_log_inspected >= progress.waypoint + len(progress.log_sizes)
    )


def clear_copy(paths: CopyPaths) -> None:
    """Remove a copy's database file and logs (the start of a reseed)."""
    for suffix in ("", "-wal", "-shm"):
        with contextlib.suppress(FileNotFoundError):
            paths.database.with_name(paths.database.name + suffix).unlink()
    shutil.rmtree(paths.logs, ignore_errors=True)
    # A reseeded copy is the active's own: nothing it wrote as active is left to check.
    paths.was_active.unlink(missing_ok=True)


async def seed_copy(
    source: LogSource, paths: CopyPaths, progress: SeedProgress | None = None
) -> SeedInfo:
    """Replace the copy's files with a fresh seed from `source`; LogShareError if it fails.
    `progress` follows the transfer.

    The old files go only once the new seed is whole and checked: a failed or damaged
    transfer leaves the copy as it was.
    """
    paths.root.mkdir(parents=True, exist_ok=True)
    tmp = paths.root / f".{paths.database.name}.seed"
    try:
        info = await source.seed(tmp, progress)
        try:
            seeded = await asyncio.to_thread(Database.open, tmp)
        except DatabaseError as exc:
            raise LogShareError(f"the seed is not a usable database: {exc}") from exc
        header = seeded.header
        seeded.close()
        if (str(header.database_signature), str(header.log_signature), header.waypoint) != (
            info.database_signature,
            info.log_signature,
            info.waypoint,
        ):
            raise LogShareError("the seed's database header does not match what the active said")
        await asyncio.to_thread(clear_copy, paths)
        await asyncio.to_thread(durable_rename, tmp, paths.database)
        if progress is not None:
            progress.file_placed = True
    finally:
        for suffix in ("", "-wal", "-shm"):
            with contextlib.suppress(FileNotFoundError):
                tmp.with_name(tmp.name + suffix).unlink()
    logger.info("%s: seeded at waypoint %d from %s", paths.name, info.waypoint, source)
    return info
