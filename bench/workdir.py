"""A benchmark's work directory: wiped at the start, removed at the end unless `--keep`.

The runs write clusters, logs and mailboxes of hundreds of megabytes to gigabytes; left
behind after each run, they once filled the machine's disk.  Every script that writes more
than a few files takes `--dir` and `--keep` from `add_work_dir` and works inside
`work_dir(args)`.

Inside it a SIGTERM (a `kill`, `timeout`) ends the run as an exception does, so that its
`finally` blocks stop the nodes, transports and servers it started: before, a terminated
`bench/lmtp.py` left its two nodes and its transport running for an hour, one still
replaying, skewing every run after it.

One run at a time in a directory: a second run given the same `--dir` is refused at once (its
lock, `<dir>.lock`, is held), before it wipes anything.  Before, it wiped the first run's
cluster under its running nodes and failed on its own `mkdir`, and the first waited an hour for
deliveries its deleted queue could no longer make.

`work_dir(args, wipe=False)` is the lock and the SIGTERM alone, for a script that keeps what it
made under `--dir` for its next run (bench/spark_history.py's generated input): the directory
is made if missing, neither emptied at the start nor removed at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import fcntl
import os
import shutil
import signal
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any


def add_work_dir(parser: argparse.ArgumentParser, default: str) -> None:
    """`--dir` (wiped at the start) and `--keep` (leave it for inspection)."""
    parser.add_argument(
        "--dir", default=default, help=f"work directory, wiped at the start (default {default})"
    )
    parser.add_argument(
        "--keep", action="store_true", help="leave the work directory for inspection"
    )


def _terminated(signum: int, _frame: object) -> None:
    raise SystemExit(128 + signum)


@contextmanager
def work_dir(args: argparse.Namespace, *, wipe: bool = True) -> Iterator[Path]:
    """The work directory `args.dir`, emptied; removed on the way out unless `args.keep`
    (also when the run fails: `--keep` is how to look at a failed run's files).  A SIGTERM
    meanwhile is a SystemExit (exit 143), so the run's own clean-up runs (see the module).
    `wipe=False`: the directory as it is (made if missing), left as it is at the end
    (`args.keep` is not read): only the lock and the SIGTERM."""
    base = Path(args.dir).resolve()
    base.parent.mkdir(parents=True, exist_ok=True)
    lock = os.open(base.with_name(base.name + ".lock"), os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(lock, 32, 0).decode(errors="replace").strip() or "?"
            raise SystemExit(
                f"{base} is in use by another run (pid {holder}): wait for it, or give --dir"
            ) from None
        os.ftruncate(lock, 0)
        os.pwrite(lock, f"{os.getpid()}\n".encode(), 0)
        if wipe:
            shutil.rmtree(base, ignore_errors=True)
        base.mkdir(parents=True, exist_ok=not wipe)
        main = threading.current_thread() is threading.main_thread()
        previous = signal.signal(signal.SIGTERM, _terminated) if main else None
        try:
            yield base
        finally:
            if main:
                signal.signal(signal.SIGTERM, previous)
            if wipe and not args.keep:
                shutil.rmtree(base, ignore_errors=True)
    finally:
        os.close(lock)  # the lock with it; the small file stays, for the next run to take


def run_and_report(
    args: argparse.Namespace,
    run: Callable[[Path, argparse.Namespace], Awaitable[Any]],
    report: Callable[[argparse.Namespace, Any], None],
) -> None:
    """A benchmark's whole run: `run(base, args)` in `work_dir(args)`, then `report(args,
    what it returned)` and the whole run's time."""
    started = time.perf_counter()
    with work_dir(args) as base:
        out = asyncio.run(run(base, args))
    report(args, out)
    print(f"(whole run: {time.perf_counter() - started:.1f} s)")
