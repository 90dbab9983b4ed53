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
from datetime import datetime
from typing import Literal

import orjson
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    computed_field,
    field_serializer,
    model_validator,
)

from dag_common.json_object import JsonObject
from replication_node.errors import BackupDamaged
from replication_node.storage.ops import BackupKind

MANIFEST_NAME = "manifest.json"
FORMAT = 1

# Types are held strictly (an integer is not a string, a bool not an integer), and the JSON
# carries keys this version does not know without complaint, so that a newer writer's
# additions do not make a set unreadable.
_STRICT = ConfigDict(frozen=True, strict=True, extra="ignore")


class FileEntry(BaseModel):
    """One file of a backup set: its name in the set's directory, size and SHA-256 (hex)."""

    model_config = _STRICT

    name: str = Field(min_length=1)
    size: int = Field(ge=0)
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")


class LogEntry(BaseModel):
    """A closed log generation in a backup set, with the times its header and CLOSE hold
    (its file's name, size and SHA-256 beside them: one flat object in the manifest)."""

    model_config = _STRICT

    generation: int = Field(ge=1)
    name: str = Field(min_length=1)
    size: int = Field(ge=0)
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    creation_time: datetime
    close_time: datetime

    @classmethod
    def of(
        cls, generation: int, file: FileEntry, creation_time: datetime, close_time: datetime
    ) -> LogEntry:
        """The entry of generation `generation`, held in `file`."""
        return cls(
            generation=generation,
            name=file.name,
            size=file.size,
            sha256=file.sha256,
            creation_time=creation_time,
            close_time=close_time,
        )

    @property
    def file(self) -> FileEntry:
        return FileEntry(name=self.name, size=self.size, sha256=self.sha256)

    @field_serializer("creation_time", "close_time")
    def _iso(self, value: datetime) -> str:
        return value.isoformat()  # "+00:00", as manifests have always said, not "Z"


class Manifest(BaseModel):
    """What one backup set holds, as `manifest.json` says it (`encode`, `parse_manifest`)."""

    model_config = _STRICT

    format: Literal[1] = FORMAT
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
    after_generation: int = Field(ge=0)
    # The first generation the set holds: after_generation + 1, or lower when a staged body
    # pending there began before it (Logs Required, `log/spanning.py`): the set holds the
    # start of every transaction its first log continues.  Those logs are read, not
    # replayed.  0 (or absent, from a set written before it was kept) is after + 1.
    first_generation: int = Field(default=0, ge=0)
    last_generation: int = Field(ge=0)
    database_file: FileEntry | None = None  # a full backup's
    logs: tuple[LogEntry, ...]

    @model_validator(mode="after")
    def _one_spelling(self) -> Manifest:
        """first_generation as after_generation + 1 is the default (0), whoever wrote it."""
        if self.first_generation == self.after_generation + 1:
            object.__setattr__(self, "first_generation", 0)  # frozen: set once, here
        return self

    @property
    def first(self) -> int:
        return self.first_generation or self.after_generation + 1

    @property
    def files(self) -> tuple[FileEntry, ...]:
        """Every file the set holds besides its manifest."""
        db = (self.database_file,) if self.database_file else ()
        return db + tuple(log.file for log in self.logs)

    @computed_field(alias="bytes")  # type: ignore[prop-decorator]
    @property
    def total_bytes(self) -> int:
        return sum(f.size for f in self.files)

    @field_serializer("first_generation")
    def _first(self, _: int) -> int:
        return self.first  # written out whole, for a reader that does not know the default

    @field_serializer("started_at", "ended_at")
    def _iso(self, value: datetime) -> str:
        return value.isoformat()

    def as_dict(self) -> JsonObject:
        """The manifest as JSON values, as `manifest.json` holds it (and the backup route
        answers it)."""
        return self.model_dump(mode="json", by_alias=True)

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


def _reasons(exc: ValidationError) -> str:
    """A validation's errors as one line: each field's path and what is wrong with it."""
    said = []
    for error in exc.errors(include_url=False):
        where = ".".join(str(part) for part in error["loc"])
        what = error["msg"]
        if error["type"] != "missing" and isinstance(error["input"], str | int | float):
            what += f", not {error['input']!r}"
        said.append(f"{where}: {what}" if where else what)
    return "; ".join(said)


def parse_manifest(data: bytes, where: str) -> Manifest:
    """The manifest in `data` (read from `where`); BackupDamaged naming it and the reason."""
    try:
        raw = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise BackupDamaged(f"{where}: not a usable manifest: not JSON ({exc})") from exc
    if not isinstance(raw, dict):
        raise BackupDamaged(f"{where}: not a usable manifest: not a JSON object")
    if raw.get("format") != FORMAT:
        raise BackupDamaged(
            f"{where}: not a usable manifest: format {raw.get('format')!r} is not {FORMAT}"
        )
    try:
        manifest = Manifest.model_validate_json(data)
    except ValidationError as exc:
        raise BackupDamaged(f"{where}: not a usable manifest: {_reasons(exc)}") from exc
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
