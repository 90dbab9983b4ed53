"""The background scrub of a database copy: every page read and checked, on a cycle.

As ESE's online database checksumming does in Exchange 2010, each copy's file is read whole
every `interval` (a day by default) and checked by SQLite (`PRAGMA quick_check`: every
b-tree page, its structure and its records) on a connection of its own, opened read-only:
in WAL mode a reader never blocks the writer, so the commit path (or replay) goes on while
the scrub reads.  The throttle is the operating system's: each pass runs in a child process
at the lowest CPU priority (nice 19) and, where `ionice` exists, the idle I/O class, so it
reads with what the node leaves unused (bench/scrub.py measures the commit path with and
without a pass running).  A damaged page found while the copy runs is reported to
`on_damage` (the copy stops as it would on open) and in the result, which status shows with
the cycle's figures.

A page can be valid and wrong (a bit flip inside a row): after the pages, the scrub adds the
file's content digest up again from its rows and compares it with the digest the file
stores (`database.py`), in one read snapshot.

`scrub_file` is the one check; `Scrubber` is the loop around it.

A check is never what holds a stop.  Its length grows with the file (every page, then every
row hashed again: seconds per GB, `bench/scrub.py`), and a thread cannot be cancelled: a
node told to stop while a passive's start check read a 2 GB file waited for it (asyncio's
shutdown joins the default executor) past its 30 s grace.  So the cancel of a check stops
it: `check_in_thread` interrupts the SQLite connection from the cancelling side and waits
for the thread to end (it does so at the next page or row), and a pass in a child process
has the child killed.  An interrupted check is no verdict either way (`CheckInterrupted`):
the copy is marked neither damaged nor sound by it.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import shutil
import sqlite3
import sys
import time
from collections.abc import Callable
from contextlib import suppress
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from dag_common.clock import Clock
from dag_common.mailbox_digest import to_hex
from replication_node.errors import CheckInterrupted, CopyFailed
from replication_node.storage import file_handles
from replication_node.storage.digest import recompute_digest, stored_digest
from replication_node.storage.stoppable import Interrupt, run_in_thread, wait_out

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class ScrubResult:
    """One pass of the scrub over a copy's file."""

    finished: datetime
    seconds: float
    bytes_read: int
    problem: str | None  # None: every page checked out

    @property
    def ok(self) -> bool:
        return self.problem is None

    @property
    def mb_per_s(self) -> float:
        return self.bytes_read / 1e6 / self.seconds if self.seconds > 0 else 0.0

    def describe(self) -> str:
        what = "ok" if self.ok else f"DAMAGED: {self.problem}"
        return (
            f"{what} ({self.bytes_read / 1e6:.1f} MB in {self.seconds:.2f}s, "
            f"{self.mb_per_s:.0f} MB/s, at {self.finished.isoformat(timespec='seconds')})"
        )


def scrub_file(
    path: Path, *, max_errors: int = 10, interrupt: Interrupt | None = None
) -> tuple[int, str | None]:
    """Read and check every page of the SQLite file at `path` on a read-only connection of
    its own (worker thread): its size, and None or what SQLite found damaged.
    CheckInterrupted if `interrupt` was called meanwhile (no verdict)."""
    size = path.stat().st_size
    # Held while its connection is open: a `Database` of the file closed meanwhile must not
    # close the process's last descriptor of it under this connection's locks.
    shared = file_handles.acquire(path)
    try:
        return size, _check(path, max_errors, interrupt or Interrupt())
    finally:
        file_handles.release(shared)


def _check(path: Path, max_errors: int, interrupt: Interrupt) -> str | None:
    try:
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=30)
    except sqlite3.Error as exc:
        return f"cannot open {path.name}: {exc}"
    try:
        with interrupt.watching(conn):
            rows = conn.execute(f"PRAGMA quick_check({int(max_errors)})").fetchall()
            found = [str(r[0]) for r in rows]
            problem = "; ".join(found) if found != ["ok"] else _digest_problem(conn)
    except sqlite3.DatabaseError as exc:  # too damaged for the check itself to run
        problem = str(exc)
    finally:
        conn.close()
    if interrupt.asked:  # whatever it found, or the "interrupted" error it ended on
        raise CheckInterrupted(f"the check of {path.name} was interrupted")
    return problem


async def check_in_thread(
    path: Path, *, interrupt: Interrupt | None = None
) -> tuple[int, str | None]:
    """`scrub_file` in a worker thread, stopped by a cancel (`stoppable.py`): no verdict."""
    try:
        return await run_in_thread(
            lambda asked: scrub_file(path, interrupt=asked), interrupt=interrupt
        )
    except asyncio.CancelledError:
        logger.info("check of %s interrupted by a cancel: no verdict", path)
        raise


def _digest_problem(conn: sqlite3.Connection) -> str | None:
    """Whether the rows add up to the content digest the file stores (one snapshot)."""
    conn.execute("BEGIN")
    try:
        stored = stored_digest(conn)
        if stored is None:
            return None  # a file from before digests: its first open adds it
        rows = recompute_digest(conn)
    finally:
        conn.execute("COMMIT")
    if rows == stored:
        return None
    return (
        f"the rows do not add up to the content digest the file stores (stored "
        f"{to_hex(stored)[:16]}…, rows {to_hex(rows)[:16]}…): a row was changed inside a "
        "valid page"
    )


async def scrub_throttled(path: Path) -> tuple[int, str | None]:
    """`scrub_file` in a child process at the lowest CPU and I/O priority."""
    command = [sys.executable, "-m", "replication_node.storage.scrub", str(path)]
    if shutil.which("ionice"):
        command = ["ionice", "-c", "3", *command]
    proc = await asyncio.create_subprocess_exec(
        *command,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        preexec_fn=lambda: os.nice(19),
    )
    try:
        out, err = await proc.communicate()
    except asyncio.CancelledError:
        # The child goes with the task that ran it: left, it would read on, orphaned, past
        # the node's stop (an interrupted pass is no verdict).
        with suppress(ProcessLookupError):
            proc.kill()
        await wait_out(asyncio.ensure_future(proc.wait()))
        raise
    if proc.returncode != 0:
        raise OSError(f"scrub of {path.name} could not run: {err.decode(errors='replace')[-300:]}")
    answer = json.loads(out)
    return int(answer["size"]), answer["problem"]


@dataclass(kw_only=True, eq=False)
class Scrubber:
    """Scrubs one copy's file every `interval` seconds until cancelled."""

    path: Path
    clock: Clock
    interval: float
    on_damage: Callable[[str], None]
    last: ScrubResult | None = field(default=None, init=False)
    passes: int = field(default=0, init=False)

    async def run(self) -> None:
        while True:
            await self.clock.sleep(self.interval)
            result = await self.scrub_once()
            if not result.ok:
                reason = f"the background scrub found {self.path.name} damaged: {result.problem}"
                self.on_damage(reason)
                raise CopyFailed(f"{reason}; reseed the copy")

    async def scrub_once(self) -> ScrubResult:
        """One pass now; the result is kept for status."""
        started = time.perf_counter()  # a duration for the figures, not a decision
        size, problem = await scrub_throttled(self.path)
        self.last = ScrubResult(
            finished=self.clock.now(),
            seconds=time.perf_counter() - started,
            bytes_read=size,
            problem=problem,
        )
        self.passes += 1
        log = logger.info if problem is None else logger.error
        log("scrub of %s: %s", self.path, self.last.describe())
        return self.last


if __name__ == "__main__":  # the child process of `scrub_throttled`
    scanned, found = scrub_file(Path(sys.argv[1]))
    print(json.dumps({"size": scanned, "problem": found}))
