"""Large message bodies of the transport's queue, one file each beside the queue's file.

A body of FILE_FROM bytes or more is not a column of the queue's rows: it is written to a
file of its own, fsync'd, before the row that names it is committed (the directory fsync'd
once per group commit, before it).  SQLite would write it twice (its WAL, then the queue's
file at the checkpoint), through its pages, and hold a copy of it while it does; a file is
written once, from the bytes as they came, and read back for a delivery that does not send
it from memory (`delivery.FreshBodies`: a message's first try, just after it was queued).

The order that keeps an accepted message: file written and fsync'd, directory fsync'd, row
committed, then the acknowledgement.  A file whose row was never committed (a kill before
the commit, a retry of a message already queued, a commit that failed) is named by no row:
it is removed when the queue opens (`sweep`) or at once.  A row's file is removed only after
the transaction that deleted the row committed.

Names are drawn at random, not derived from the Message-ID: two submissions of one message
at once each write their own file, and the one whose row is not committed loses only its
own.
"""

from __future__ import annotations

import logging
import os
import secrets
from collections.abc import Iterable
from pathlib import Path

logger = logging.getLogger(__name__)

# A body this large or larger goes to a file; a smaller one stays in its row, where the
# group commit's one fsync covers it (a file's own fsync would cost a small message more
# than its bytes do).
FILE_FROM = 64 * 1024
SUFFIX = ".eml"


class BodyFiles:
    """The directory of the queue's body files."""

    def __init__(self, directory: Path) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self.directory = directory

    def write(self, parts: Iterable[bytes]) -> str:
        """Write `parts` (one body, in order) to a new file, fsync'd; its name.  The
        directory's entry is not fsync'd here (`sync`, once for a group commit)."""
        name = secrets.token_hex(16) + SUFFIX
        path = self.directory / name
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            for part in parts:
                view = memoryview(part)
                while view:
                    view = view[os.write(fd, view) :]
            os.fsync(fd)
        except BaseException:
            os.close(fd)
            path.unlink(missing_ok=True)
            raise
        os.close(fd)
        return name

    def sync(self) -> None:
        """Make the files written so far durable by their names (fsync of the directory)."""
        fd = os.open(self.directory, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def path(self, name: str) -> Path:
        """Where the body named `name` is (to be read a slice at a time)."""
        return self.directory / _checked(name)

    def read(self, name: str) -> bytes:
        """The body in file `name` (FileNotFoundError: none)."""
        with open(self.directory / _checked(name), "rb", buffering=0) as f:
            return f.read()

    def remove(self, names: Iterable[str]) -> None:
        """Remove the files `names` (one already gone is not an error)."""
        for name in names:
            try:
                (self.directory / _checked(name)).unlink()
            except FileNotFoundError:
                pass
            except OSError as exc:  # left for the next `sweep`; nothing names it any more
                logger.warning("the body file %s could not be removed: %s", name, exc)

    def sweep(self, kept: set[str]) -> int:
        """Remove every file not in `kept` (bodies whose rows were never committed); how
        many."""
        gone = [p.name for p in self.directory.iterdir() if p.name not in kept]
        if gone:
            logger.info("%d body files of no queued message removed", len(gone))
        self.remove(gone)
        return len(gone)


def _checked(name: str) -> str:
    if "/" in name or name.startswith("."):
        raise ValueError(f"not a body file's name: {name!r}")
    return name
