"""Seeding a passive copy: a consistent copy of the database from the active, then logs.

The active takes a SQLite online backup of its database file (consistent at its waypoint;
LLR keeps the newer transactions out of the file) and streams it; the copy lands in a temp
file that is checksummed, checked to be a database of the right signatures, fsync'd and
renamed into place.  The copy then replays from waypoint + 1, which the active still has:
it never truncates above its own checkpoint.  A reseed first removes the old database file
and every log of the copy.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import shutil

from dag_common.durable import durable_rename
from replication_node.active.copy import CopyPaths
from replication_node.errors import DatabaseError, LogShareError
from replication_node.interfaces import LogSource, SeedInfo
from replication_node.storage.database import Database

logger = logging.getLogger(__name__)


def clear_copy(paths: CopyPaths) -> None:
    """Remove a copy's database file and logs (the start of a reseed)."""
    for suffix in ("", "-wal", "-shm"):
        with contextlib.suppress(FileNotFoundError):
            paths.database.with_name(paths.database.name + suffix).unlink()
    shutil.rmtree(paths.logs, ignore_errors=True)
    # A reseeded copy is the active's own: nothing it wrote as active is left to check.
    paths.was_active.unlink(missing_ok=True)


async def seed_copy(source: LogSource, paths: CopyPaths) -> SeedInfo:
    """Replace the copy's files with a fresh seed from `source`; LogShareError if it fails.

    The old files go only once the new seed is whole and checked: a failed or damaged
    transfer leaves the copy as it was.
    """
    paths.root.mkdir(parents=True, exist_ok=True)
    tmp = paths.root / f".{paths.database.name}.seed"
    try:
        info = await source.seed(tmp)
        try:
            seeded = Database.open(tmp)
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
    finally:
        for suffix in ("", "-wal", "-shm"):
            with contextlib.suppress(FileNotFoundError):
                tmp.with_name(tmp.name + suffix).unlink()
    logger.info("%s: seeded at waypoint %d from %s", paths.name, info.waypoint, source)
    return info
