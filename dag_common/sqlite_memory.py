"""What SQLite holds of a process's memory after a large write, given back.

**The bound values.**  Python's `sqlite3` binds a text or blob parameter with
`SQLITE_TRANSIENT`: SQLite copies it into memory of its own, and the copy stays with the
prepared statement until the statement is bound again or finalized.  The module keeps up to
128 prepared statements per connection (its statement cache) and resets them after each use,
but a reset does not clear the bindings.  So the last body a statement wrote stays resident,
a whole copy of it, in every process that writes bodies to SQLite: measured on the nodes of
`bench/memory.py` after a burst of 1-30 MiB items, the last item replayed (25 MB) on each
passive and the last item flushed on the active (30 MB), neither a Python object nor free heap
(`malloc_trim` cannot give back memory in use).  `sqlite3_clear_bindings` frees them; the
module binds every parameter afresh at each execution, so clearing a statement that is not
running changes nothing it does.  Python offers no call for it: `release_bindings` walks the
connection's statements (`sqlite3_next_stmt`) with ctypes, through the `sqlite3*` handle
CPython keeps as the first field of its connection object, checked against the file the
connection has open before anything is called on it.

**The page cache** (`PRAGMA cache_size`, 16 MiB for a node's writing connection) stays as
full as the last write left it; `PRAGMA shrink_memory` frees it, and an idle process reads
the pages back from the OS's cache when it writes again.  Both are cheap: call them when a
connection is idle (`release`), and `release_bindings` right after a write of large bodies.
"""

from __future__ import annotations

import ctypes
import logging
import os
import sqlite3
import sys
from functools import cache
from pathlib import Path

logger = logging.getLogger(__name__)

# CPython's `pysqlite_Connection` starts with PyObject_HEAD, then `sqlite3 *db` (3.8-3.13).
_DB_OFFSET = object.__basicsize__


@cache
def _library() -> ctypes.CDLL | None:
    """The SQLite library the `sqlite3` module runs on (the extension module's own handle, so
    its symbols resolve to the copy it linked, never another one); None where unusable."""
    if sys.implementation.name != "cpython" or not (3, 8) <= sys.version_info[:2] <= (3, 13):
        return None  # the connection's layout (`_DB_OFFSET`) is known for these versions only
    try:
        import _sqlite3

        lib = ctypes.CDLL(_sqlite3.__file__)
        lib.sqlite3_libversion.restype = ctypes.c_char_p
        if lib.sqlite3_libversion().decode() != sqlite3.sqlite_version:
            return None
        lib.sqlite3_next_stmt.restype = ctypes.c_void_p
        lib.sqlite3_next_stmt.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
        lib.sqlite3_stmt_busy.argtypes = [ctypes.c_void_p]
        lib.sqlite3_clear_bindings.argtypes = [ctypes.c_void_p]
        lib.sqlite3_db_filename.restype = ctypes.c_char_p
        lib.sqlite3_db_filename.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
    except (OSError, AttributeError, ImportError):
        return None
    return lib


def _handle(lib: ctypes.CDLL, conn: sqlite3.Connection, path: Path) -> int | None:
    """`conn`'s `sqlite3*`, if it is the connection to `path` (else None: not touched)."""
    db = ctypes.c_void_p.from_address(id(conn) + _DB_OFFSET).value
    if not db:
        return None
    name = lib.sqlite3_db_filename(db, b"main")
    if name is None or os.path.realpath(name.decode()) != os.path.realpath(path):
        return None
    return db


def release_bindings(conn: sqlite3.Connection, path: Path) -> int:
    """Free the values bound to `conn`'s idle prepared statements (the copies of the last
    bodies written; module docstring); how many statements were cleared.  `conn` is the
    connection to the file `path`, not in use by another thread (hold its lock)."""
    lib = _library()
    if lib is None:
        return 0
    db = _handle(lib, conn, path)
    if db is None:
        logger.debug("not clearing %s's bindings: its handle is not the expected one", path)
        return 0
    cleared, stmt = 0, None
    while stmt := lib.sqlite3_next_stmt(db, stmt):
        if not lib.sqlite3_stmt_busy(stmt):
            lib.sqlite3_clear_bindings(stmt)
            cleared += 1
    return cleared


def release(conn: sqlite3.Connection, path: Path) -> None:
    """Give back what an idle connection holds: its bound values and its page cache."""
    release_bindings(conn, path)
    conn.execute("PRAGMA shrink_memory")
