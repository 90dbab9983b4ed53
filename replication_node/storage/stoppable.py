"""Reads of a whole database file in a worker thread that a cancel stops.

A thread cannot be cancelled: `asyncio.to_thread` cancelled leaves its thread running, and
`asyncio.run`'s shutdown joins the default executor, so a read of a whole file (the scrub,
the content digest added up again) held a node's stop for as long as the file takes: past
its 30 s grace on a 2 GB copy (issue 52's run).  Here the cancel interrupts the SQLite
connection the work reads on (`Connection.interrupt` ends the statement running: SQLite
looks at it on every page of a `quick_check` and every row stepped; a progress handler
stops the work between two statements, where SQLite would forget it), then waits for the
thread to end, so that nothing of the work outlives the task that asked for it.  What an
interrupted read found is no answer: the cancel is raised, never a result.
"""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from typing import TypeVar

T = TypeVar("T")


class Interrupt:
    """Stops work on a SQLite connection from another thread (`__call__`)."""

    def __init__(self) -> None:
        self._asked = threading.Event()
        self._lock = threading.Lock()  # a connection is never interrupted once let go
        self._conn: sqlite3.Connection | None = None
        self.started = threading.Event()  # the work has its connection: it is reading

    def __call__(self) -> None:
        with self._lock:
            self._asked.set()
            if self._conn is not None:
                self._conn.interrupt()

    @property
    def asked(self) -> bool:
        return self._asked.is_set()

    @contextmanager
    def watching(self, conn: sqlite3.Connection) -> Iterator[None]:
        """While inside, a call interrupts `conn`'s statements (and none after)."""
        with self._lock:
            self._conn = conn
        conn.set_progress_handler(self._asked.is_set, 10_000)
        self.started.set()
        try:
            yield
        finally:
            conn.set_progress_handler(None, 0)
            with self._lock:
                self._conn = None


async def run_in_thread(work: Callable[[Interrupt], T], *, interrupt: Interrupt | None = None) -> T:
    """`work(interrupt)` in a worker thread; a cancel interrupts it and is raised once the
    thread has ended."""
    interrupt = interrupt or Interrupt()
    running = asyncio.ensure_future(asyncio.to_thread(work, interrupt))
    try:
        return await asyncio.shield(running)
    except asyncio.CancelledError:
        interrupt()
        await wait_out(running)
        raise


async def wait_out(work: asyncio.Future[object]) -> None:
    """Until `work` has ended, even if cancelled again meanwhile; its end is not told."""
    while not work.done():
        with suppress(asyncio.CancelledError):
            await asyncio.wait({work})
    if not work.cancelled():
        work.exception()  # retrieved: after an interrupt, an error is the expected end
