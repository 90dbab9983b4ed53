"""A benchmark's work directory: wiped at the start, removed at the end unless `--keep`.

The runs write clusters, logs and mailboxes of hundreds of megabytes to gigabytes; left
behind after each run, they once filled the machine's disk.  Every script that writes more
than a few files takes `--dir` and `--keep` from `add_work_dir` and works inside
`work_dir(args)`.
"""

from __future__ import annotations

import argparse
import shutil
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


@contextmanager
def work_dir(args: argparse.Namespace) -> Iterator[Path]:
    """The work directory `args.dir`, emptied; removed on the way out unless `args.keep`
    (also when the run fails: `--keep` is how to look at a failed run's files)."""
    base = Path(args.dir).resolve()
    shutil.rmtree(base, ignore_errors=True)
    base.mkdir(parents=True)
    try:
        yield base
    finally:
        if not args.keep:
            shutil.rmtree(base, ignore_errors=True)
