"""One descriptor of a database file per process, shared by its users, closed by the last.

Why: POSIX record locks belong to a process and a file, not to a descriptor, and closing
*any* descriptor of a file drops every lock the process holds on it, SQLite's included
(https://sqlite.org/howtocorrupt.html, 2.2).  SQLite keeps its own connections safe from
this (it holds a closed connection's descriptor while another connection of the process has
a lock); a descriptor of our own must do the same.  The paced write-behind
(`writebehind.py`) used to open and close the database file by its path after each large
LLR write: the node's locks were gone, and the next process to close a connection to the
file (an operator's `db header`) took itself for the file's last user and checkpointed and
deleted the WAL under the node, whose stop then failed and left the file in Dirty Shutdown.

So a descriptor this process keeps on a database file comes from `acquire`, and is closed
only once every user of that file (each `Database`, a scrub) has called `release`, after
closing its own SQLite connections.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass, field
from pathlib import Path

_Key = tuple[int, int]  # (st_dev, st_ino): one file whatever the path it is opened by


@dataclass(frozen=True)
class SharedFile:
    """A user's hold on a file's shared descriptor (read-only): give it back to `release`."""

    key: _Key
    fd: int


@dataclass
class _Entry:
    fds: list[int] = field(default_factory=list)
    users: int = 0


_lock = threading.Lock()
_files: dict[_Key, _Entry] = {}


def _key(st: os.stat_result) -> _Key:
    return st.st_dev, st.st_ino


def acquire(path: Path) -> SharedFile:
    """The file at `path`'s descriptor, shared with this process's other users of the file
    (opened if it has none): OSError if it cannot be opened."""
    with _lock:
        key = _key(os.stat(path))
        if key not in _files:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
            # Keyed by what was opened: the path may name another file by now (a rename
            # over it).  Were that one shared already, this descriptor is kept beside it:
            # closing it now would drop that file's locks.
            key = _key(os.fstat(fd))
            _files.setdefault(key, _Entry()).fds.append(fd)
        entry = _files[key]
        entry.users += 1
        return SharedFile(key, entry.fds[0])


def release(shared: SharedFile) -> None:
    """Let go of `shared`; the last user of the file closes its descriptors (its SQLite
    connections closed before, so no lock is dropped that anyone still holds)."""
    with _lock:
        entry = _files[shared.key]
        entry.users -= 1
        if entry.users == 0:
            del _files[shared.key]
            for fd in entry.fds:
                os.close(fd)
