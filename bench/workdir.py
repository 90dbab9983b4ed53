"""A benchmark's work directory: wiped at the start, removed at the end unless `--keep`.

The runs write clusters, logs and mailboxes of hundreds of megabytes to gigabytes; left
behind after each run, they once filled the machine's disk.  Every script that writes more
than a few files takes `--dir` and `--keep` from `add_work_dir` and works inside
`work_dir(args)`.

Inside it a SIGTERM (a `kill`, `timeout`) ends the run as an exception does, so that its
`finally` blocks stop the nodes, transports and servers it started: before, a terminated
`bench/lmtp.py` left its two nodes and its transport running for an hour, one still
replaying, skewing every run after it.
"""

from __future__ import annotations

import argparse
import shutil
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


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
def work_dir(args: argparse.Namespace) -> Iterator[Path]:
    """The work directory `args.dir`, emptied; removed on the way out unless `args.keep`
    (also when the run fails: `--keep` is how to look at a failed run's files).  A SIGTERM
    meanwhile is a SystemExit (exit 143), so the run's own clean-up runs (see the module)."""
    base = Path(args.dir).resolve()
    shutil.rmtree(base, ignore_errors=True)
    base.mkdir(parents=True)
    main = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, _terminated) if main else None
    try:
        yield base
    finally:
        if main:
            signal.signal(signal.SIGTERM, previous)
        if not args.keep:
            shutil.rmtree(base, ignore_errors=True)
