"""A check of a database file never holds a stop: cancelling the passive's start check
interrupts it (nothing of it left reading the file when the stop returns), cancelling a
background scrub pass kills its child process, and an interrupted check marks the copy
neither damaged nor sound.  Found in bench/memory.py's 2 GB run: a node told to stop while
its passive's start check read the file waited for the check's thread past its 30 s grace.

The files are made large by writing their items' rows straight into SQLite, behind the
content digest's back: a check that ran to its end would call such a file damaged, so one
that let an interrupted check's "verdict" through would show it."""

from __future__ import annotations

import asyncio
import os
import sqlite3
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path

import pytest

from dag_common.clock import ManualClock
from dag_common.model import CopyStatus
from replication_node.storage.database import Database
from replication_node.storage.scrub import Scrubber, check_in_thread
from replication_node.storage.stoppable import Interrupt, run_in_thread
from tests.cluster_harness import wait_until
from tests.replication_node.helpers import add_item_rows, passive

ROWS = 200_000  # some seconds of checking here, far more than a stop may take


def large_database(path: Path, rows: int = ROWS) -> Path:
    """A database file of `rows` small items."""
    path.parent.mkdir(parents=True, exist_ok=True)
    Database.create(path, database_signature=uuid.uuid4(), log_signature=uuid.uuid4()).close()
    add_item_rows(path, rows)
    return path


def open_here(path: Path) -> bool:
    """Whether this process has `path` open (a check reading it holds a descriptor)."""
    fds = Path("/proc/self/fd")
    for fd in os.listdir(fds):
        try:
            if os.readlink(fds / fd) == str(path):
                return True
        except OSError:
            pass  # closed meanwhile
    return False


def children_reading(path: Path) -> list[int]:
    """This process's child processes whose command line names `path` (a scrub pass)."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue  # not a process, or gone
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        if ppid == os.getpid() and str(path).encode() in cmdline:
            found.append(int(entry.name))
    return found


async def test_a_cancelled_check_ends_at_once_with_no_verdict(tmp_path):
    path = large_database(tmp_path / "DB1.sqlite")
    interrupt = Interrupt()
    check = asyncio.create_task(check_in_thread(path, interrupt=interrupt))
    await wait_until("the check reading the file", interrupt.started.is_set)
    asked = time.monotonic()
    check.cancel()
    done, _ = await asyncio.wait({check}, timeout=20)  # generous: it takes milliseconds
    assert done and check.cancelled()  # no verdict: neither a problem nor None
    assert time.monotonic() - asked < 20
    assert not open_here(path)  # the thread has ended: nothing holds the file


async def test_a_passive_stopped_during_its_start_check_leaves_nothing_reading(share, tmp_path):
    copy = passive(share, tmp_path)
    large_database(copy.paths.database)
    await copy.start()
    await wait_until("the start check reading the file", lambda: open_here(copy.paths.database))
    asked = time.monotonic()
    await asyncio.wait_for(copy.stop(), timeout=20)  # generous: it takes milliseconds
    assert time.monotonic() - asked < 20
    # On main the stop returned too, but the check's thread read on (for as long as the
    # file takes) and a node's asyncio shutdown waited for it.
    assert not open_here(copy.paths.database)
    status = copy.status()
    assert status.status not in (CopyStatus.HEALTHY, CopyStatus.FAILED_AND_SUSPENDED), status


async def test_a_cancelled_background_pass_kills_its_child(tmp_path):
    path = large_database(tmp_path / "DB1.sqlite")
    clock = ManualClock(start=datetime.now(UTC))
    scrubber = Scrubber(path=path, clock=clock, interval=3600, on_damage=lambda _: None)
    scrub = asyncio.create_task(scrubber.scrub_once())
    await wait_until("the pass's child process", lambda: children_reading(path))
    (child,) = children_reading(path)
    scrub.cancel()
    done, _ = await asyncio.wait({scrub}, timeout=20)
    assert done and scrub.cancelled()
    assert not Path(f"/proc/{child}").exists()  # killed and reaped, not left reading
    assert scrubber.last is None and scrubber.passes == 0  # no verdict kept


async def test_a_cancelled_digest_recompute_leaves_its_database_as_it_was(tmp_path):
    # The replayer's `content_check_every` recompute reads the whole file on the database's
    # own connection, the one replay writes on: interrupted, it must leave it usable.
    db = Database.open(large_database(tmp_path / "DB1.sqlite"))
    try:
        interrupt = Interrupt()
        recompute = asyncio.create_task(run_in_thread(db.recompute_digest, interrupt=interrupt))
        await wait_until("the recompute reading the file", interrupt.started.is_set)
        recompute.cancel()
        done, _ = await asyncio.wait({recompute}, timeout=20)  # generous: milliseconds
        assert done and recompute.cancelled()
        # Not left in a transaction nor with the interrupt's handler: it runs to its end.
        stored, rows = await asyncio.to_thread(db.recompute_digest)
        assert stored != rows  # the rows written behind the digest's back
    finally:
        db.close()


def test_an_interrupted_backup_of_the_file_stops_and_the_next_one_is_whole(tmp_path):
    # A seed's source copies the whole file under the database's lock, in steps: asked to
    # stop (by `run_in_thread`, on a cancel), it stops at the next step and frees the lock.
    db = Database.open(large_database(tmp_path / "DB1.sqlite"))
    try:
        interrupt = Interrupt()
        interrupt()
        with pytest.raises(sqlite3.OperationalError, match="interrupted"):
            db.backup_to(tmp_path / "seed.sqlite", interrupt)
        whole = tmp_path / "whole.sqlite"
        header = db.backup_to(whole)
        assert header.database_signature == db.header.database_signature
        conn = sqlite3.connect(whole)
        assert conn.execute("SELECT count(*) FROM items").fetchone()[0] == ROWS
        conn.close()
    finally:
        db.close()
