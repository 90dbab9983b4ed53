"""Which sequence of file steps makes an item spread over nine log generations durable fastest,
against a raw fsync'd append of the same bytes (issue 29, target 1: >= 0.8)?

    .venv/bin/python bench/log_fsync_shapes.py [--rounds 30] [--item-mib 8] [--dir DIR]
        [--keep]

No log, no LLR, no Python objects: only the file system calls, so each figure is a ceiling for
a log that took that shape.  An item of `--item-mib` MiB is cut as the log cuts a staged body
into 1 MiB generations (the rest of the open generation, full ones, the last part: 0.5 MiB,
seven of 1 MiB, 0.5 MiB for 8 MiB), each generation written with one `write` into an E00.log
that a helper prepared beforehand (made, fsync'd, its directory entry fsync'd: off the clock,
as the log's helper thread does it beside the commit), then renamed to its closed name, and
the next prepared file renamed to E00.log (two renames a roll, as the writer did then).
Every shape ends in the same durable state: every generation's bytes and both renames of every
roll on disk.  Shapes:

- `raw`: the baseline: the same bytes appended to one file, one `write` + `fsync`.
- `now`: the log today: each generation fsync'd at its roll (its CLOSE record's fsync), the
  directory fsync'd after its renames, before the next generation's bytes.
- `batch-fsync`: every generation written and renamed first, then each file fsync'd and the
  directory fsync'd once (a spanning transaction's intermediate generations hold only parts
  of a transaction nobody was answered for yet; only its end needs to be durable to answer).
- `batch-fdatasync`: the same with `fdatasync` for the files.
- `sfr-fsync`: as `batch-fsync`, and each generation's writeback started
  (`sync_file_range(WRITE)`) as soon as it is written, so the disk works while the next
  generation is written.
- `sfr-fdatasync`: the same with `fdatasync`.
- `pipelined`: today's durable order kept (each generation fsync'd before it is renamed to its
  closed name, the directory fsync'd after each roll's renames), but each generation's bytes
  are written, and their writeback started, before the previous generation's fsync and roll:
  generation i + 1 goes into the prepared file that becomes E00.log at the roll, so the disk
  writes it while generation i is made durable and closed.
- `pipelined-dir-once`: the same, the directory fsync'd once at the end (each file's fsync
  still makes it whole before its rename; the renames reach the disk with the next file
  fsync's journal commit, or the last directory fsync; closed generations would be shipped
  only after that).
- `syncfs`: every generation written and renamed, then one `syncfs` (the whole file system:
  other processes' dirty data too, so it is noisy on a shared disk).
- `early-2`: the writer as it is (run 9): each generation's file made on the clock, its
  writeback started, and fsync'd at once on one of two syncer threads while the next is
  written; every fsync waited for, the files renamed, the directory fsync'd once.
- `recycled-early-2`: the same over files that exist already, written whole and fsync'd
  before the clock (truncated generations kept for reuse, as ESE's pre-created logs and
  PostgreSQL's recycled WAL segments), each generation written over one and `fdatasync`'d:
  no new blocks or sizes for the journal to commit.  What a log format that tells a stale
  record from a new one could reach (not built: bench/README.md large_items run 9).
- `sfr-one-fsync` (ext4 only, not a POSIX guarantee): writeback started and waited for on
  every file, then one `fsync` of the last file and one of the directory: on ext4 with one
  journal, that fsync's journal commit carries every file's size and blocks and its cache
  flush every file's data.  Shown as the floor of what fewer flushes could give.

Rounds: every shape once a round, in a rotated order, each after `sync` (a quiet disk: none
pays for another's writeback); the ratio raw / shape is taken within the round (the disk's
rate varies by 5x from minute to minute here).  Prints each shape's median MB/s and the
median and quartiles of its per-round ratio, and the load.  `--dir` (default
var/bench-log-fsync-shapes) is wiped at the start and removed at the end unless `--keep`
(`bench/workdir.py`: one run at a time in it).
"""

from __future__ import annotations

import argparse
import ctypes
import ctypes.util
import os
import platform
import shutil
import statistics
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.workdir import add_work_dir, work_dir  # noqa: E402
from dag_common import durable  # noqa: E402
from dag_common.durable import fsync_dir  # noqa: E402

WRITE = durable.SYNC_FILE_RANGE_WRITE
WAIT_BEFORE = durable.SYNC_FILE_RANGE_WAIT_BEFORE
WAIT_AFTER = durable.SYNC_FILE_RANGE_WAIT_AFTER

MIB = 1 << 20
MB = 1e6

_libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
_libc.syncfs.argtypes = [ctypes.c_int]


def sync_file_range(fd: int, flags: int) -> None:
    """The whole file's range (`dag_common.durable.sync_file_range`, the product's binding)."""
    durable.sync_file_range(fd, 0, 0, flags)


def syncfs(fd: int) -> None:
    if _libc.syncfs(fd) != 0:
        raise OSError(ctypes.get_errno(), "syncfs")


def parts_of(item: int) -> list[int]:
    """The item's bytes per generation: half a generation, full ones, the rest."""
    first = MIB // 2
    parts = [first]
    left = item - first
    while left > MIB // 2:
        parts.append(MIB)
        left -= MIB
    parts.append(left)
    return parts


def append(path: Path, part: memoryview) -> int:
    """`part` appended to the file at `path`; its descriptor, left open."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND)
    os.write(fd, part)
    return fd


class Round:
    """One shape's files: prepared E00.log files made and made durable before the clock."""

    def __init__(self, root: Path, parts: list[int]) -> None:
        shutil.rmtree(root, ignore_errors=True)
        root.mkdir(parents=True)
        self.root = root
        self.parts = parts
        for i in range(len(parts) + 1):
            fd = os.open(root / f".prepared.{i}", os.O_WRONLY | os.O_CREAT, 0o644)
            os.write(fd, b"H" * 4096)  # the prepared file's header
            os.fsync(fd)
            os.close(fd)
        os.rename(root / ".prepared.0", root / "E00.log")
        fsync_dir(root)

    def roll(self, i: int) -> None:
        """Close generation i: E00.log to its closed name, the next prepared file in."""
        os.rename(self.root / "E00.log", self.root / f"{i + 1:08d}.log")
        os.rename(self.root / f".prepared.{i + 1}", self.root / "E00.log")


def shape_raw(root: Path, data: list[memoryview]) -> float:
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    whole = b"".join(data)
    fd = os.open(root / "raw", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        start = time.perf_counter()
        os.write(fd, whole)
        os.fsync(fd)
        return time.perf_counter() - start
    finally:
        os.close(fd)


def shape_now(root: Path, data: list[memoryview]) -> float:
    r = Round(root, [len(d) for d in data])
    start = time.perf_counter()
    for i, part in enumerate(data):
        fd = append(root / "E00.log", part)
        os.fsync(fd)
        os.close(fd)
        r.roll(i)
        fsync_dir(root)
    return time.perf_counter() - start


def batched(start_writeback: bool, file_sync: Callable[[int], None]) -> Callable[..., float]:
    def shape(root: Path, data: list[memoryview]) -> float:
        r = Round(root, [len(d) for d in data])
        fds = []
        start = time.perf_counter()
        for i, part in enumerate(data):
            fd = append(root / "E00.log", part)
            if start_writeback:
                sync_file_range(fd, WRITE)
            fds.append(fd)
            r.roll(i)
        for fd in fds:
            file_sync(fd)
            os.close(fd)
        fsync_dir(root)
        return time.perf_counter() - start

    return shape


def pipelined(dir_each_roll: bool) -> Callable[..., float]:
    return lambda root, data: shape_pipelined(root, data, dir_each_roll)


def shape_pipelined(root: Path, data: list[memoryview], dir_each_roll: bool = True) -> float:
    r = Round(root, [len(d) for d in data])
    start = time.perf_counter()
    prev: int | None = None
    for i, part in enumerate(data):
        # Generation i's bytes go into its file before generation i - 1 is closed: E00.log
        # for the first, the prepared file that becomes E00.log at the roll for the rest.
        name = "E00.log" if i == 0 else f".prepared.{i}"
        fd = append(root / name, part)
        sync_file_range(fd, WRITE)
        if prev is not None:
            os.fsync(prev)
            os.close(prev)
            r.roll(i - 1)
            if dir_each_roll:
                fsync_dir(root)
        prev = fd
    assert prev is not None
    os.fsync(prev)
    os.close(prev)
    r.roll(len(data) - 1)
    fsync_dir(root)
    return time.perf_counter() - start


def shape_syncfs(root: Path, data: list[memoryview]) -> float:
    r = Round(root, [len(d) for d in data])
    start = time.perf_counter()
    for i, part in enumerate(data):
        fd = append(root / "E00.log", part)
        os.close(fd)
        r.roll(i)
    fd = os.open(root, os.O_RDONLY)
    try:
        syncfs(fd)
    finally:
        os.close(fd)
    return time.perf_counter() - start


def shape_sfr_one_fsync(root: Path, data: list[memoryview]) -> float:
    r = Round(root, [len(d) for d in data])
    fds = []
    start = time.perf_counter()
    for i, part in enumerate(data):
        fd = append(root / "E00.log", part)
        sync_file_range(fd, WRITE)
        fds.append(fd)
        r.roll(i)
    for fd in fds:
        sync_file_range(fd, WAIT_BEFORE | WRITE | WAIT_AFTER)
    os.fsync(fds[-1])
    for fd in fds:
        os.close(fd)
    fsync_dir(root)
    return time.perf_counter() - start


def early(recycled: bool, file_sync: Callable[[int], None]) -> Callable[..., float]:
    """The writer as it is (run 9): each generation's file made on the clock (header, then
    its bytes, writeback started), fsync'd at once on one of two syncer threads while the next
    is written; at the end every fsync waited for, the files renamed, the directory fsync'd
    once.  `recycled`: the files exist already, written whole and fsync'd before the clock
    (truncated generations kept for reuse), and each generation is written over one."""

    def shape(root: Path, data: list[memoryview]) -> float:
        shutil.rmtree(root, ignore_errors=True)
        root.mkdir(parents=True)
        paths = [root / f".prepared.{i}" for i in range(len(data) + 1)]
        if recycled:
            for path in paths:
                fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
                os.write(fd, b"\0" * (MIB + 4096))
                os.fsync(fd)
                os.close(fd)
            fsync_dir(root)
        flags = os.O_WRONLY if recycled else os.O_WRONLY | os.O_CREAT | os.O_EXCL
        fds: list[int] = []
        with ThreadPoolExecutor(2) as syncer:
            start = time.perf_counter()
            synced = []
            for i, part in enumerate(data):
                fds.append(fd := os.open(paths[i], flags, 0o644))
                os.pwrite(fd, b"H" * 4096 + part, 0)
                sync_file_range(fd, WRITE)
                synced.append(syncer.submit(file_sync, fd))
            fds.append(last := os.open(paths[-1], flags, 0o644))
            os.pwrite(last, b"H" * 4096 + b"C" * 300, 0)  # the commit, in the next generation
            for done in synced:
                done.result()
            file_sync(last)
            for i, path in enumerate(paths[:-1]):
                os.rename(path, root / f"{i + 1:08d}.log")
            os.rename(paths[-1], root / "E00.log")
            fsync_dir(root)
            took = time.perf_counter() - start
        for fd in fds:
            os.close(fd)
        return took

    return shape


SHAPES: dict[str, Callable[[Path, list[memoryview]], float]] = {
    "raw": shape_raw,
    "now": shape_now,
    "batch-fsync": batched(False, os.fsync),
    "batch-fdatasync": batched(False, os.fdatasync),
    "sfr-fsync": batched(True, os.fsync),
    "sfr-fdatasync": batched(True, os.fdatasync),
    "pipelined": pipelined(True),
    "pipelined-dir-once": pipelined(False),
    "syncfs": shape_syncfs,
    "sfr-one-fsync": shape_sfr_one_fsync,
    "early-2": early(False, os.fsync),
    "recycled-early-2": early(True, os.fdatasync),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--item-mib", type=int, default=8)
    add_work_dir(parser, "var/bench-log-fsync-shapes")
    args = parser.parse_args()
    if not durable.AVAILABLE:
        sys.exit("log_fsync_shapes: sync_file_range(2) is not available here (Linux only)")
    with work_dir(args) as base:  # the lock first: a refused run prints one line
        parts = parts_of(args.item_mib * MIB)
        blob = os.urandom(args.item_mib * MIB)
        data, at = [], 0
        for size in parts:
            data.append(memoryview(blob)[at : at + size])
            at += size
        one, five, _ = os.getloadavg()
        print(
            f"{platform.platform()}, nproc {os.cpu_count()}; item {args.item_mib} MiB in "
            f"{len(parts)} generations; {args.rounds} rounds; "
            f"load {one:.2f} (1 min) {five:.2f} (5 min)"
        )
        names = list(SHAPES)
        seconds: dict[str, list[float]] = {n: [] for n in names}
        ratios: dict[str, list[float]] = {n: [] for n in names}
        for r in range(args.rounds):
            order = names[r % len(names) :] + names[: r % len(names)]
            took: dict[str, float] = {}
            for name in order:
                os.sync()
                took[name] = SHAPES[name](base / name, data)
            for name in names:
                seconds[name].append(took[name])
                ratios[name].append(took["raw"] / took[name])
    mb = args.item_mib * MIB / MB
    print("\n| shape | MB/s, median | vs raw, median of rounds | quartiles | min-max |")
    print("|---|---:|---:|---:|---:|")
    for name in names:
        q = statistics.quantiles(ratios[name], n=4)
        print(
            f"| {name} | {mb / statistics.median(seconds[name]):.0f} | "
            f"{statistics.median(ratios[name]):.2f} | {q[0]:.2f}-{q[2]:.2f} | "
            f"{min(ratios[name]):.2f}-{max(ratios[name]):.2f} |"
        )
    one, five, _ = os.getloadavg()
    print(f"\nload after: {one:.2f} (1 min) {five:.2f} (5 min)")


if __name__ == "__main__":
    main()
