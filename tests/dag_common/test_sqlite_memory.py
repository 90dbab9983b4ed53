"""SQLite's copy of a bound body, and its page cache, given back (dag_common/sqlite_memory.py),
measured by SQLite's own count of the memory it holds."""

from __future__ import annotations

import _sqlite3
import ctypes
import sqlite3
from pathlib import Path

from dag_common.sqlite_memory import release, release_bindings

BODY = "x" * (8 << 20)


def memory_used() -> int:
    lib = ctypes.CDLL(_sqlite3.__file__)
    lib.sqlite3_memory_used.restype = ctypes.c_int64
    return lib.sqlite3_memory_used()


def test_the_last_body_bound_stays_with_its_statement_until_released(tmp_path: Path) -> None:
    path = tmp_path / "t.sqlite"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, body TEXT)")
    before = memory_used()
    with conn:
        conn.execute("INSERT INTO t (body) VALUES (?)", (BODY,))
    assert memory_used() - before > len(BODY)  # the copy SQLite made, still bound
    assert release_bindings(conn, path) >= 1
    assert memory_used() - before < len(BODY) // 2  # the copy gone; the page cache kept
    # The statement works as before: every execution binds afresh.
    with conn:
        conn.execute("INSERT INTO t (body) VALUES (?)", ("small",))
    assert [r[0] for r in conn.execute("SELECT length(body) FROM t ORDER BY id")] == [
        len(BODY),
        5,
    ]
    cached = memory_used()
    release(conn, path)  # and the page cache
    assert memory_used() < cached - (1 << 20)
    conn.close()


def test_a_connection_to_another_file_is_not_touched(tmp_path: Path) -> None:
    conn = sqlite3.connect(tmp_path / "a.sqlite")
    conn.execute("CREATE TABLE t (body TEXT)")
    with conn:
        conn.execute("INSERT INTO t VALUES (?)", (BODY,))
    assert release_bindings(conn, tmp_path / "b.sqlite") == 0
    conn.close()
    assert release_bindings(conn, tmp_path / "a.sqlite") == 0  # closed: nothing to clear
