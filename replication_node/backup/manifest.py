"""The manifest of a backup set (pure): what a backup holds, and the checks a restore makes
of it before anything is placed.

A backup set is a directory: the database file (a full backup only), the closed log
generations it needs, and `manifest.json`, written last (temp, fsync, rename, directory
fsync) once every other file is whole and checked.  So a directory without a manifest is an
interrupted backup, never a whole one.  The manifest names the database and log signatures,
the generations and times, and every file's size and SHA-256.

The generations, for a full backup through R taken from a copy whose file stood at waypoint
W: the file (consistent at W) and generations W+1..R.  For an incremental through R after a
backup through P: generations P+1..R.  A restore takes one full set and then incrementals,
each beginning where the one before it ends (`sequence_problem`), all of one database and
one log stream.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import orjson

from replication_node.errors import BackupDamaged
from replication_node.storage.ops import BackupKind

MANIFEST_NAME = "manifest.json"
FORMAT = 1


@dataclass(frozen=True, slots=True)
class FileEntry:
    """One file of a backup set: its name in the set's directory, size and SHA-256 (hex)."""

    name: str
    size: int
    sha256: str

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "size": self.size, "sha256": self.sha256}


@dataclass(frozen=True, slots=True)
class LogEntry:
    """A closed log generation in a backup set, with the times its header and CLOSE hold."""

    generation: int
    file: FileEntry
    creation_time: datetime
    close_time: datetime

    def as_dict(self) -> dict[str, Any]:
        return {
            "generation": self.generation,
            **self.file.as_dict(),
            "creation_time": self.creation_time.isoformat(),
            "close_time": self.close_time.isoformat(),
        }


@dataclass(frozen=True, slots=True)
class Manifest:
    """What one backup set holds."""

    kind: BackupKind
    backup_id: str
    database: str
    source_node: str
    source_role: str
    database_signature: uuid.UUID
    log_signature: uuid.UUID
    started_at: datetime
    ended_at: datetime
    # The generation the set begins after: the file's waypoint (full), or the last
    # generation of the backup it follows (incremental).
    after_generation: int
    last_generation: int
    logs: tuple[LogEntry, ...]
    database_file: FileEntry | None = None  # a full backup's
    # The first generation the set holds: after_generation + 1, or lower when a staged body
    # pending there began before it (Logs Required, `log/spanning.py`): the set holds the
    # start of every transaction its first log continues.  Those logs are read, not replayed.
    first_generation: int = 0

    def __post_init__(self) -> None:
        if self.first_generation == self.after_generation + 1:  # one spelling of the default
            object.__setattr__(self, "first_generation", 0)

    @property
    def first(self) -> int:
        return self.first_generation or self.after_generation + 1

    @property
    def files(self) -> tuple[FileEntry, ...]:
        """Every file the set holds besides its manifest."""
        db = (self.database_file,) if self.database_file else ()
        return db + tuple(log.file for log in self.logs)

    @property
    def total_bytes(self) -> int:
        return sum(f.size for f in self.files)

    def as_dict(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "kind": str(self.kind),
            "backup_id": self.backup_id,
            "database": self.database,
            "source_node": self.source_node,
            "source_role": self.source_role,
            "database_signature": str(self.database_signature),
            "log_signature": str(self.log_signature),
            "started_at": self.started_at.isoformat(),
            "ended_at": self.ended_at.isoformat(),
            "after_generation": self.after_generation,
            "first_generation": self.first,
            "last_generation": self.last_generation,
            "database_file": self.database_file.as_dict() if self.database_file else None,
            "logs": [log.as_dict() for log in self.logs],
            "bytes": self.total_bytes,
        }

    def encode(self) -> bytes:
        return orjson.dumps(self.as_dict(), option=orjson.OPT_INDENT_2) + b"\n"

    def problem(self) -> str | None:
        """Why the manifest contradicts itself (generations not contiguous, a full set
        without its file, an incremental with one), or None."""
        if (self.kind is BackupKind.FULL) != (self.database_file is not None):
            has = "without" if self.kind is BackupKind.FULL else "with"
            return f"a {self.kind} backup {has} a database file"
        if not 1 <= self.first <= self.after_generation + 1:
            return (
                f"its first generation {self.first} is not between 1 and the one after "
                f"{self.after_generation}"
            )
        expected = list(range(self.first, self.last_generation + 1))
        if [log.generation for log in self.logs] != expected:
            return f"the logs are not generations {self.first}-{self.last_generation} in order"
        names = [f.name for f in self.files]
        if len(set(names)) != len(names) or any("/" in n or n.startswith(".") for n in names):
            return "file names repeat or leave the set's directory"
        return None


def _get(raw: dict[str, Any], name: str, kind: type | tuple[type, ...]) -> Any:
    value = raw.get(name)
    if not isinstance(value, kind) or (isinstance(value, bool) and kind is int):
        raise ValueError(f"{name} is missing or not a {getattr(kind, '__name__', kind)}")
    return value


def _file(raw: Any) -> FileEntry:
    if not isinstance(raw, dict):
        raise ValueError("a file entry is not an object")
    digest = _get(raw, "sha256", str)
    if len(digest) != 64:
        raise ValueError(f"sha256 of {raw.get('name')!r} is not 64 hex digits")
    return FileEntry(_get(raw, "name", str), _get(raw, "size", int), digest)


def parse_manifest(data: bytes, where: str) -> Manifest:
    """The manifest in `data` (read from `where`); BackupDamaged naming it and the reason."""
    try:
        raw = orjson.loads(data)
        if not isinstance(raw, dict):
            raise ValueError("not a JSON object")
        if raw.get("format") != FORMAT:
            raise ValueError(f"format {raw.get('format')!r} is not {FORMAT}")
        logs = []
        for entry in _get(raw, "logs", list):
            logs.append(
                LogEntry(
                    _get(entry, "generation", int),
                    _file(entry),
                    datetime.fromisoformat(_get(entry, "creation_time", str)),
                    datetime.fromisoformat(_get(entry, "close_time", str)),
                )
            )
        db_file = raw.get("database_file")
        manifest = Manifest(
            kind=BackupKind(_get(raw, "kind", str)),
            backup_id=_get(raw, "backup_id", str),
            database=_get(raw, "database", str),
            source_node=_get(raw, "source_node", str),
            source_role=_get(raw, "source_role", str),
            database_signature=uuid.UUID(_get(raw, "database_signature", str)),
            log_signature=uuid.UUID(_get(raw, "log_signature", str)),
            started_at=datetime.fromisoformat(_get(raw, "started_at", str)),
            ended_at=datetime.fromisoformat(_get(raw, "ended_at", str)),
            after_generation=_get(raw, "after_generation", int),
            first_generation=(
                _get(raw, "first_generation", int) if "first_generation" in raw else 0
            ),
            last_generation=_get(raw, "last_generation", int),
            logs=tuple(logs),
            database_file=_file(db_file) if db_file is not None else None,
        )
    except (ValueError, TypeError, AttributeError) as exc:
        raise BackupDamaged(f"{where}: not a usable manifest: {exc}") from exc
    problem = manifest.problem()
    if problem:
        raise BackupDamaged(f"{where}: {problem}")
    return manifest


def file_problem(entry: FileEntry, size: int, sha256: str) -> str | None:
    """Why a file read back is not the one the manifest names, or None."""
    if size != entry.size:
        return f"{entry.size} bytes expected, {size} found"
    if sha256 != entry.sha256:
        return f"checksum mismatch (SHA-256 {sha256[:16]}…, the manifest says {entry.sha256[:16]}…)"
    return None


def sequence_problem(sets: list[tuple[str, Manifest]]) -> str | None:
    """Why the backup sets, in the order given (each named by its directory), are not one
    full backup followed by incrementals that each begin where the one before ended, all of
    one database and one log stream; None if they are."""
    if not sets:
        return "no backup set given"
    first_dir, first = sets[0]
    if first.kind is not BackupKind.FULL:
        return f"{first_dir}: an incremental backup; a restore begins with a full backup"
    prev_dir, prev = first_dir, first
    for where, manifest in sets[1:]:
        if manifest.kind is not BackupKind.INCREMENTAL:
            return f"{where}: a second full backup; give one full backup, then incrementals"
        if (manifest.database_signature, manifest.log_signature) != (
            first.database_signature,
            first.log_signature,
        ):
            return f"{where}: a backup of another database or log stream than {first_dir}"
        if manifest.after_generation != prev.last_generation:
            return (
                f"{where}: begins after generation {manifest.after_generation}, but {prev_dir} "
                f"ends at generation {prev.last_generation}"
            )
        prev_dir, prev = where, manifest
    return None
