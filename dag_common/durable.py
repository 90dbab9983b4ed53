"""Durable file writes: write a temp file, fsync it, rename it, fsync the directory; and
Linux's `sync_file_range`, which starts (or waits for) a file's writeback without making
anything durable."""

from __future__ import annotations

import ctypes
import ctypes.util
import os
from collections.abc import Callable
from pathlib import Path

SYNC_FILE_RANGE_WAIT_BEFORE = 1
SYNC_FILE_RANGE_WRITE = 2
SYNC_FILE_RANGE_WAIT_AFTER = 4


def _load_sync_file_range() -> Callable[[int, int, int, int], int] | None:
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        func = libc.sync_file_range
    except (OSError, AttributeError):
        return None
    func.argtypes = [ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint]
    func.restype = ctypes.c_int
    return func


_sync_file_range = _load_sync_file_range()
AVAILABLE = _sync_file_range is not None


def sync_file_range(fd: int, offset: int, length: int, flags: int) -> None:
    """Linux `sync_file_range(2)` (`length` 0: to the end of the file); nothing where it
    does not exist (`AVAILABLE` says which)."""
    if _sync_file_range is None:
        return
    if _sync_file_range(fd, offset, length, flags) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))


def start_writeback(fd: int) -> None:
    """Start writing the file's dirty pages to the disk, without waiting and without making
    them durable (an fsync does that later, with less left to write)."""
    sync_file_range(fd, 0, 0, SYNC_FILE_RANGE_WRITE)


def fsync_dir(path: Path) -> None:
    """fsync a directory so that a rename or a new file in it survives a crash."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write(path: Path, data: bytes) -> None:
    """Replace `path` with `data` so that a crash leaves the old or the new file, whole."""
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fsync_dir(path.parent)


def durable_rename(src: Path, dst: Path) -> None:
    """Rename `src` to `dst` (an fsync'd file) and make the rename itself durable."""
    os.replace(src, dst)
    fsync_dir(dst.parent)
    if src.parent != dst.parent:
        fsync_dir(src.parent)
