"""What a store kept in the cluster store's engines shares with it: the cluster store's own
engines (`embedded.py`, `etcd.py`) and the mover's move store (`mrs_client.move_store`),
which keeps its records beside the cluster store's, in the same SQLite file or under the
same etcd prefix.

The SQLite file: opened in WAL with fsync on commit (`open_store_file`), written in
IMMEDIATE transactions (`immediate`), its monotonic lease times valid only within the boot
that wrote them (`boot_id`, `LeaseClock`).  etcd's v3 JSON gateway: keys and values in
base64 (`b64`, `unb64`), a prefix's range end (`prefix_end`).  Public here, so that a
store built on an engine does not reach into another store's module for them.
"""

from __future__ import annotations

import base64
import sqlite3
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dag_common.backoff import Backoff


def set_wal(conn: sqlite3.Connection, attempts: int = 200) -> None:
    """Switch a (possibly brand-new) file to WAL.  Node processes opening a new file at the
    same moment can meet 'database is locked' here, which SQLite's busy timeout does not
    cover: retry for up to about ten seconds."""
    retry = Backoff.fixed(0.05)
    while True:
        try:
            conn.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or retry.failures == attempts - 1:
                raise
            time.sleep(retry.next())  # start-up only, before the store serves anything


def open_store_file(path: Path, schema: str) -> sqlite3.Connection:
    """A connection to the cluster store's file (created if need be), shared by threads
    under its owner's lock, in WAL with fsync on commit, `schema` applied."""
    path.parent.mkdir(parents=True, exist_ok=True)
    conn = sqlite3.connect(path, check_same_thread=False, isolation_level=None, timeout=10.0)
    set_wal(conn)
    conn.execute("PRAGMA synchronous=FULL")
    conn.executescript(schema)
    return conn


@contextmanager
def immediate(conn: sqlite3.Connection) -> Iterator[None]:
    """One IMMEDIATE write transaction (the write lock taken at its start, so a check and
    the write it allows are one step for every process): committed when the block ends,
    an early return included (a refusal that wrote nothing commits nothing), rolled back
    if it raises."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")


def boot_id() -> str:
    """This boot of the machine (Linux): monotonic times of another boot mean nothing now."""
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return "unknown"


@dataclass(frozen=True, slots=True)
class LeaseClock:
    """A lease's expiry as the SQLite file keeps it: a time of `monotonic` (this machine's
    clock, which every process on it shares and no one sets) with the boot it was written
    in, as a lease from another boot (its clock began again) is over."""

    monotonic: Callable[[], float]
    boot: str = field(default_factory=boot_id)

    def expires(self, ttl: float) -> float:
        """The expiry to store for a lease of `ttl` seconds from now (with `boot`)."""
        return self.monotonic() + ttl

    def live(self, row: Sequence[Any] | None) -> tuple[Any, Any, float] | None:
        """A lease's row as stored, (holder, what it holds it as, expires, boot): the holder,
        that, and the seconds left while the lease is live; None if none is, or it is over."""
        if row is None:
            return None
        holder, held_as, expires, boot = row
        left = expires - self.monotonic() if boot == self.boot else 0.0
        return (holder, held_as, left) if left > 0 else None


def b64(text: str) -> str:
    """A key or value as the v3 JSON gateway takes it (base64 of its UTF-8)."""
    return base64.b64encode(text.encode()).decode()


def unb64(text: str) -> str:
    """A key or value the gateway answered, decoded."""
    return base64.b64decode(text).decode()


def prefix_end(prefix: str) -> str:
    """The range end that selects every key starting with `prefix`."""
    raw = prefix.encode()
    return base64.b64encode(raw[:-1] + bytes([raw[-1] + 1])).decode()
