"""The node's hold on a database file (SQLite's POSIX locks) survives what the process does
to the file besides SQLite: a paced LLR write's write-behind, a second `Database` of the
file (a passive copy's reader) closed, a scrub.  Lost, another process closing a connection
(an operator's `db header`) takes itself for the file's last user and checkpoints and deletes
the WAL under the node (`storage/file_handles.py`; `make demo` found it)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from replication_node.storage.database import Database
from replication_node.storage.scrub import scrub_file
from tests.replication_node.test_paced_llr import apply, big_txn, fresh, mailbox_txn


def another_process_opens_and_closes(path: Path) -> None:
    """What `replication-node db header` does to a live file: a connection, then its close."""
    code = (
        f"import sqlite3; c = sqlite3.connect({str(path)!r}); "
        "c.execute('SELECT count(*) FROM sqlite_master').fetchone(); c.close()"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_the_wal_outlives_another_process_after_paced_writes_and_a_second_handle(tmp_path):
    db = fresh(tmp_path / "db.sqlite")
    wal = tmp_path / "db.sqlite-wal"
    apply(db, [mailbox_txn()], 1)
    reader = Database.open(db.path)  # a passive copy's read handle, opened and closed
    apply(db, [big_txn()], 2)  # paced: written behind a chunk at a time
    reader.close()
    assert scrub_file(db.path)[1] is None
    another_process_opens_and_closes(db.path)
    assert wal.exists(), "the WAL was checkpointed and deleted under an open Database"
    db.close(clean=True)
    another_process_opens_and_closes(db.path)  # the last user now: it may tidy up
    again = Database.open(db.path)
    try:
        assert again.item("m", "big") is not None
        assert again.header.waypoint == 2
    finally:
        again.close()
