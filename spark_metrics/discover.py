"""Finding the history files and telling good ones from damaged ones, before Spark reads any.

A file is read only when its footer opens, its schema is the history schema (an older
version with fewer columns is fine), it has rows, and its `time` column decodes; its first
and last sample times come from that column and decide which dates it touches. Anything
else is a `Skipped` with the path and the reason. A partition directory holding no history
file is reported the same way. Files are examined in a small thread pool: each costs a
footer and one column.

Only `*.parquet` files count; names starting with `.` or `_` are temporary or metadata (the
writer's `.part-….tmp`, Spark's `_SUCCESS`) and are passed over, as Spark does.
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from dag_common.history_schema import schema_problems


@dataclass(frozen=True, slots=True)
class FileInfo:
    """A history file that can be read: where, which version of it, what it holds."""

    path: str  # relative to the history directory
    size: int
    mtime_ns: int
    rows: int
    first: datetime
    last: datetime

    @property
    def stamp(self) -> tuple[int, int]:
        return (self.size, self.mtime_ns)


@dataclass(frozen=True, slots=True)
class Skipped:
    """A file (or an empty partition directory) that was not read, and why."""

    path: str  # relative to the history directory
    reason: str
    size: int = 0
    mtime_ns: int = 0


@dataclass(frozen=True, slots=True)
class Listing:
    """The history files on disk, with their size and modification time."""

    files: tuple[tuple[str, int, int], ...]  # (relative path, size, mtime_ns)
    empty_partitions: tuple[str, ...]


def _hidden(name: str) -> bool:
    return name.startswith((".", "_"))


def list_history(root: Path) -> Listing:
    """Every history file under `root` and every partition directory without one."""
    files = []
    empty = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if not _hidden(d))
        here = Path(dirpath)
        found = False
        for name in sorted(filenames):
            if _hidden(name) or not name.endswith(".parquet"):
                continue
            st = (here / name).stat()
            files.append((str((here / name).relative_to(root)), st.st_size, st.st_mtime_ns))
            found = True
        if not found and not dirnames and here != root and "=" in here.name:
            empty.append(str(here.relative_to(root)))
    return Listing(tuple(files), tuple(empty))


def examine(root: Path, rel: str, size: int, mtime_ns: int) -> FileInfo | Skipped:
    """Open one file's footer and time column; a FileInfo if it is history, else why not."""
    path = root / rel
    try:
        parquet = pq.ParquetFile(path)
    except (OSError, pa.ArrowException) as exc:
        return Skipped(rel, f"not a readable Parquet file: {exc}", size, mtime_ns)
    with parquet:
        try:
            schema = parquet.schema_arrow
        except (OSError, pa.ArrowException) as exc:
            return Skipped(rel, f"unreadable schema: {exc}", size, mtime_ns)
        problems = schema_problems(schema)
        if problems:
            return Skipped(rel, "not the history schema: " + "; ".join(problems), size, mtime_ns)
        if parquet.metadata.num_rows == 0:
            return Skipped(rel, "no rows", size, mtime_ns)
        try:
            times = parquet.read(columns=["time"]).column("time")
        except (OSError, pa.ArrowException) as exc:
            return Skipped(rel, f"damaged data: {exc}", size, mtime_ns)
    if times.null_count == len(times):
        return Skipped(rel, "no sample time in any row", size, mtime_ns)
    bounds = pc.min_max(times)
    first, last = bounds["min"].as_py(), bounds["max"].as_py()
    return FileInfo(rel, size, mtime_ns, parquet.metadata.num_rows, first, last)


def examine_all(
    root: Path, files: list[tuple[str, int, int]], *, threads: int = 4
) -> list[FileInfo | Skipped]:
    """`examine` for each (path, size, mtime_ns), in the listing's order."""
    if not files:
        return []
    with ThreadPoolExecutor(max_workers=threads) as pool:
        return list(pool.map(lambda f: examine(root, *f), files))
