"""The file steps of the log's writer, its roll, its spares and its directory, behind one seam.

`LogFiles` is every call the log makes to change a file of its directory: open for writing,
write, truncate, seek, `fdatasync`/`fsync`, start a writeback, close, rename, unlink, and
fsync the directory.  `OsLogFiles` (the default, `OS_FILES`) is the operating system's; a
test passes its own (a disk that records each call and fails, or crashes, at a chosen one)
to build the crash states of a roll and a settle without patching the writer.  Reading a
log (a scan, a header, the directory's listing) is not here: nothing a crash does depends
on it.

`write_all` is the log's own rule over the seam: every byte written or an error;
`write_pieces` writes a batch's records as their pieces, without joining a large one.
"""

from __future__ import annotations

import errno
import os
from enum import StrEnum
from pathlib import Path
from typing import Protocol

from dag_common import durable


class OpenMode(StrEnum):
    """How a file is opened for writing."""

    EXISTING = "existing"  # a file that is there, written from its start
    NEW = "new"  # a new file: an error if the name is taken
    REPLACE = "replace"  # a file created or emptied


class LogFiles(Protocol):
    """The file steps the log stream takes (every one may raise OSError)."""

    def open(self, path: Path, mode: OpenMode) -> int:
        """A write-only descriptor of `path`."""
        ...

    def write(self, fd: int, data: bytes | memoryview) -> int:
        """Write some of `data` at the descriptor's position; how much was written."""
        ...

    def truncate(self, fd: int, size: int) -> None:
        """Cut the file at `size` bytes."""
        ...

    def seek(self, fd: int, offset: int) -> None:
        """Move the descriptor's position to `offset`."""
        ...

    def fdatasync(self, fd: int) -> None:
        """Make the file's data durable (and what reading it back needs: size, blocks)."""
        ...

    def fsync(self, fd: int) -> None:
        """Make the file's data and metadata durable."""
        ...

    def start_writeback(self, fd: int) -> None:
        """Start writing the file's dirty pages out, without waiting, without durability."""
        ...

    def close(self, fd: int) -> None:
        """Close the descriptor."""
        ...

    def replace(self, src: Path, dst: Path) -> None:
        """Rename `src` to `dst`, replacing it (atomic, not durable until `fsync_dir`)."""
        ...

    def unlink(self, path: Path) -> None:
        """Remove `path` (FileNotFoundError if it is gone)."""
        ...

    def fsync_dir(self, path: Path) -> None:
        """Make the renames, creations and removals in the directory `path` durable."""
        ...


_FLAGS = {
    OpenMode.EXISTING: os.O_WRONLY,
    OpenMode.NEW: os.O_WRONLY | os.O_CREAT | os.O_EXCL,
    OpenMode.REPLACE: os.O_WRONLY | os.O_CREAT | os.O_TRUNC,
}
# A new log file's mode: 0o644 as the roll always made them; a replaced one as `open(path,
# "wb")` made the first E00.log (0o666 less the umask).
_MODES = {OpenMode.EXISTING: 0, OpenMode.NEW: 0o644, OpenMode.REPLACE: 0o666}


class OsLogFiles:
    """The operating system's file steps (the functions are looked up at each call, so a
    bench timing `os.fdatasync` or `os.write` sees the log's own)."""

    def open(self, path: Path, mode: OpenMode) -> int:
        return os.open(path, _FLAGS[mode], _MODES[mode])

    def write(self, fd: int, data: bytes | memoryview) -> int:
        return os.write(fd, data)

    def truncate(self, fd: int, size: int) -> None:
        os.ftruncate(fd, size)

    def seek(self, fd: int, offset: int) -> None:
        os.lseek(fd, offset, os.SEEK_SET)

    def fdatasync(self, fd: int) -> None:
        os.fdatasync(fd)

    def fsync(self, fd: int) -> None:
        os.fsync(fd)

    def start_writeback(self, fd: int) -> None:
        durable.start_writeback(fd)

    def close(self, fd: int) -> None:
        os.close(fd)

    def replace(self, src: Path, dst: Path) -> None:
        os.replace(src, dst)

    def unlink(self, path: Path) -> None:
        os.unlink(path)

    def fsync_dir(self, path: Path) -> None:
        durable.fsync_dir(path)


OS_FILES: LogFiles = OsLogFiles()

# A piece of a record at least this long is written from where it is by `write_pieces` (a
# staged part's chunk: a view of the body); the small ones around it are joined first.
WRITTEN_ALONE = 64 * 1024


def write_all(fd: int, data: bytes | memoryview, files: LogFiles = OS_FILES) -> None:
    """Write every byte of `data` or raise.  `os.write` may write less than asked without
    an error (a nearly full filesystem does): the rest is written again, and a disk that
    takes nothing more raises ENOSPC then.  Ignoring a short write once acknowledged a record
    that was only partly on disk, and crash recovery cut it as a torn tail."""
    view = memoryview(data)
    while view:
        written = files.write(fd, view)
        if written <= 0:
            raise OSError(errno.ENOSPC, f"write of {len(view)} bytes made no progress")
        view = view[written:]


def write_pieces(fd: int, pieces: list[bytes | memoryview], files: LogFiles = OS_FILES) -> None:
    """Write records given as pieces, in order: each large piece from where it is, the small
    ones between them joined (`write_all` each)."""
    small: list[bytes | memoryview] = []
    for piece in pieces:
        if len(piece) < WRITTEN_ALONE:
            small.append(piece)
            continue
        if small:
            write_all(fd, b"".join(small), files)
            small.clear()
        write_all(fd, piece, files)
    if small:
        write_all(fd, b"".join(small), files)
