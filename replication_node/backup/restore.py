"""Restore: a full backup set and the incrementals after it become a database file in Clean
Shutdown, through the same checks and the same replay as a passive copy's.

    verify every set (manifest, order, every file's size and SHA-256, every log's
    inspection: checksums, signatures, chain from set to set)  ─▶  place the database file
    (as a temp name)  ─▶  replay the generations in order (`passive.replayer.read_batch` and
    `Database.apply`: the replayer's own code)  ─▶  Clean Shutdown  ─▶  rename into place

Nothing is placed until every set has been verified, and the file gets its final name only
once it is whole: a restore that fails leaves no `<database>.sqlite` behind.  The result
keeps the database's signatures and stands at the last generation replayed, so
`replication-node db header` shows it, a node can mount it (its log stream continues at the
next generation) or a copy be seeded from it.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from dag_common.clock import Clock
from dag_common.durable import durable_rename
from replication_node.backup.files import empty_destination_problem, fsync_file, sha256_of
from replication_node.backup.manifest import (
    MANIFEST_NAME,
    Manifest,
    file_problem,
    parse_manifest,
    sequence_problem,
)
from replication_node.errors import (
    BackupDamaged,
    BackupError,
    CopyFailed,
    DatabaseError,
    InspectionFailed,
)
from replication_node.log.inspector import inspect_generation
from replication_node.log.logfile import LogHeader
from replication_node.log.spanning import Pending, required_from
from replication_node.passive.replayer import read_batch
from replication_node.storage.database import Database
from replication_node.storage.header import DatabaseHeader, DatabaseState

REPLAY_BATCH = 16  # generations per database transaction, as the replayer's batches


@dataclass(frozen=True, slots=True)
class RestoreResult:
    """What a restore made."""

    database: str
    path: Path
    header: DatabaseHeader
    sets: int
    generations: int  # replayed
    bytes: int
    seconds: float

    def as_dict(self) -> dict[str, object]:
        return {
            "database": self.database,
            "file": str(self.path),
            "sets": self.sets,
            "generations_replayed": self.generations,
            "bytes": self.bytes,
            "seconds": round(self.seconds, 3),
            "header": self.header.as_dict(),
        }


def read_sets(dirs: list[Path]) -> list[tuple[Path, Manifest]]:
    """The manifests of the backup sets in `dirs`, in order; BackupDamaged if one is missing
    (an interrupted backup), unusable, or out of order."""
    sets = []
    for d in dirs:
        path = d / MANIFEST_NAME
        if not d.is_dir():
            raise BackupError(f"{d} is not a directory")
        if not path.exists():
            raise BackupDamaged(
                f"{path}: missing: {d} is an incomplete backup (interrupted before it was "
                "whole) or not a backup set"
            )
        sets.append((d, parse_manifest(path.read_bytes(), str(path))))
    problem = sequence_problem([(str(d), m) for d, m in sets])
    if problem:
        raise BackupDamaged(problem)
    return sets


def verify_sets(sets: list[tuple[Path, Manifest]]) -> None:
    """Every file of every set is the one its manifest names, and every log passes the
    inspector's checks (checksums, signatures, the chain across sets); BackupDamaged naming
    the file and the reason."""
    first = sets[0][1]
    # Each generation's header as a set before held it: the chain across sets, where an
    # incremental may hold again the logs of a staged body pending where it begins.
    known: dict[int, LogHeader] = {}
    for d, manifest in sets:
        for entry in manifest.files:
            path = d / entry.name
            try:
                size, digest = sha256_of(path)
            except FileNotFoundError:
                raise BackupDamaged(f"{path}: missing") from None
            problem = file_problem(entry, size, digest)
            if problem:
                raise BackupDamaged(f"{path}: {problem}")
        for log in manifest.logs:
            path = d / log.file.name
            try:
                inspected = inspect_generation(
                    path.read_bytes(),
                    generation=log.generation,
                    log_signature=first.log_signature,
                    database_signature=first.database_signature,
                    prev=known.get(log.generation - 1),
                    highest_known=sets[-1][1].last_generation,
                )
            except InspectionFailed as exc:
                raise BackupDamaged(f"{path}: {exc}") from exc
            if inspected.header.creation_time != log.creation_time:
                raise BackupDamaged(f"{path}: creation time differs from the manifest's")
            held = known.setdefault(log.generation, inspected.header)
            if held.creation_time != inspected.header.creation_time:
                raise BackupDamaged(
                    f"{path}: not the generation {log.generation} a set before held"
                )


def restore(
    dirs: list[Path], *, to: Path, clock: Clock, until_generation: int | None = None
) -> RestoreResult:
    """Restore the backup sets `dirs` (a full one, then incrementals in order) into `to`,
    replaying through `until_generation` (default: the last set's last generation).
    BackupDamaged or BackupError, with nothing placed, if it cannot."""
    started = clock.monotonic()
    sets = read_sets(dirs)
    full_dir, full = sets[0]
    last = sets[-1][1].last_generation
    until = last if until_generation is None else until_generation
    if not full.after_generation <= until <= last:
        raise BackupError(
            f"--until-generation {until}: these sets restore generations "
            f"{full.after_generation} (the full backup's file) to {last}"
        )
    problem = empty_destination_problem(to)
    if problem:
        raise BackupError(f"--to: {problem}")
    verify_sets(sets)

    assert full.database_file is not None  # a full set has one (Manifest.problem)
    target = to / f"{full.database}.sqlite"
    temp = to / f".{full.database}.sqlite.restoring"
    to.mkdir(parents=True, exist_ok=True)
    try:
        shutil.copyfile(full_dir / full.database_file.name, temp)
        fsync_file(temp)
        header, replayed = _replay(temp, sets, full, until)
        durable_rename(temp, target)
    except BaseException:
        for suffix in ("", "-wal", "-shm"):
            with contextlib.suppress(OSError):
                leftover = temp.with_name(temp.name + suffix)
                os.unlink(leftover)
        raise
    return RestoreResult(
        database=full.database,
        path=target,
        header=header,
        sets=len(sets),
        generations=replayed,
        bytes=sum(m.total_bytes for _, m in sets),
        seconds=clock.monotonic() - started,
    )


def _replay(
    path: Path, sets: list[tuple[Path, Manifest]], full: Manifest, until: int
) -> tuple[DatabaseHeader, int]:
    """Replay the sets' generations through `until` into the file at `path`; its header."""
    assert full.database_file is not None
    db_name = str(sets[0][0] / full.database_file.name)
    try:
        db = Database.open(path)
    except DatabaseError as exc:
        raise BackupDamaged(f"{db_name}: {exc}") from exc
    try:
        h = db.header
        if (h.database_signature, h.log_signature) != (
            full.database_signature,
            full.log_signature,
        ):
            raise BackupDamaged(f"{db_name}: its signatures are not the manifest's")
        if h.waypoint != full.after_generation:
            raise BackupDamaged(
                f"{db_name}: consistent through generation {h.waypoint}, the manifest says "
                f"{full.after_generation}"
            )
        prev: LogHeader | None = None
        pending: Pending | None = None
        # Every generation the sets hold, where: a staged body is read back from whichever
        # set holds its parts (an incremental's commit may name a body the full set began).
        where = {log.generation: d / log.file.name for d, m in reversed(sets) for log in m.logs}
        replayed = 0
        for d, manifest in sets:
            gens = [
                log.generation
                for log in manifest.logs
                if manifest.after_generation < log.generation <= until
            ]
            for i in range(0, len(gens), REPLAY_BATCH):
                batch_gens = gens[i : i + REPLAY_BATCH]
                try:
                    batch = read_batch(
                        d,
                        batch_gens,
                        prev=prev,
                        log_signature=h.log_signature,
                        pending=pending,
                        where=where,
                    )
                    db.apply(
                        batch.transactions,
                        waypoint=batch_gens[-1],
                        committed=batch_gens[-1],
                        last_log_time=batch.close_time,
                        required_from=required_from(batch.pending or {}),
                        puts=batch.puts,
                    )
                except (CopyFailed, DatabaseError) as exc:
                    raise BackupDamaged(f"{d}: replay of generations {batch_gens}: {exc}") from exc
                prev, pending = batch.last_header, batch.pending
                replayed += len(batch_gens)
        db.close(clean=True)
    except BaseException:
        with contextlib.suppress(Exception):
            db.close()
        raise
    if db.header.state is not DatabaseState.CLEAN_SHUTDOWN:  # pragma: no cover - close sets it
        raise BackupError(f"{path}: not in Clean Shutdown after the restore")
    return db.header, replayed
