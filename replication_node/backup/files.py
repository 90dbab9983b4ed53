"""File steps shared by backup and restore: copy a file durably while hashing it, hash a
file, and the "a directory that exists must be empty" rule of both destinations."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from replication_node.backup.manifest import FileEntry
from replication_node.log.files import write_all

_CHUNK = 1024 * 1024


def sha256_of(path: Path) -> tuple[int, str]:
    """(size, SHA-256 hex) of the file at `path`."""
    digest, size = hashlib.sha256(), 0
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            digest.update(chunk)
            size += len(chunk)
    return size, digest.hexdigest()


def write_file(path: Path, data: bytes) -> FileEntry:
    """Write `data` to a new file at `path` and fsync it; its manifest entry."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        write_all(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    return FileEntry(name=path.name, size=len(data), sha256=hashlib.sha256(data).hexdigest())


def fsync_file(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def empty_destination_problem(path: Path) -> str | None:
    """Why `path` cannot take a backup or a restore (it exists and is not an empty
    directory), or None."""
    if not path.exists():
        return None
    if not path.is_dir():
        return f"{path} exists and is not a directory"
    if any(path.iterdir()):
        return f"{path} exists and is not empty"
    return None
