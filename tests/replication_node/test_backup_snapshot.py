"""`Database.backup_to` copies the file as of one moment while another connection commits
(a passive's replay beside its reader's backup; the active's writes beside a seed or a
backup): the copy ends in one pass, is the file as of its start, and blocks no writer."""

from __future__ import annotations

import sqlite3
import threading
import uuid

from replication_node.storage.database import Database
from replication_node.storage.stoppable import Interrupt


class CommitsBetweenSteps(Interrupt):
    """Never interrupts; at each step of the copy, another connection commits a row (what
    replay does to a passive's file while its reader's connection backs it up)."""

    def __init__(self, path, commits: int) -> None:
        super().__init__()
        self._writer = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        self._left = commits
        self.steps = 0

    @property
    def asked(self) -> bool:
        self.steps += 1
        if self._left:
            self._left -= 1
            self._writer.execute("INSERT INTO filler VALUES (randomblob(4000))")
        return False


def test_a_copy_taken_while_another_connection_commits_ends_in_one_pass(tmp_path):
    path = tmp_path / "db.sqlite"
    db = Database.create(path, database_signature=uuid.uuid4(), log_signature=uuid.uuid4())
    raw = sqlite3.connect(path, isolation_level=None)
    raw.execute("CREATE TABLE filler (x BLOB)")
    raw.execute("BEGIN")
    raw.executemany("INSERT INTO filler VALUES (randomblob(4000))", [()] * 5000)
    raw.execute("COMMIT")
    (pages,) = raw.execute("PRAGMA page_count").fetchone()
    step = 16  # pages a step (32 KiB each): the copy of a file of several GB, scaled down
    assert pages > 20 * step, "the copy takes many steps"
    reader = Database.open(path)  # a passive's reader: a connection of its own

    commits = CommitsBetweenSteps(path, commits=20)
    header = reader.backup_to(tmp_path / "copy.sqlite", commits, step=step)

    steps_one_pass = -(-pages // step)
    assert commits.steps <= steps_one_pass + 1, "the copy started over as others committed"
    copy = sqlite3.connect(tmp_path / "copy.sqlite")
    assert copy.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    assert copy.execute("SELECT count(*) FROM filler").fetchone() == (5000,), "as of its start"
    assert raw.execute("SELECT count(*) FROM filler").fetchone() == (5020,)
    assert header == db.header
    copy.close()
    raw.close()
    reader.close()
    db.close()


def advance(db: Database) -> None:
    """A write through the database's own writer: its header moved on (no transactions)."""
    h = db.header
    db.apply([], waypoint=h.waypoint + 1, committed=h.committed, last_log_time=None)


def test_a_copy_blocks_no_write_of_the_same_database(tmp_path):
    path = tmp_path / "db.sqlite"
    db = Database.create(path, database_signature=uuid.uuid4(), log_signature=uuid.uuid4())
    raw = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    raw.execute("CREATE TABLE filler (x BLOB)")
    raw.execute("BEGIN")
    raw.executemany("INSERT INTO filler VALUES (randomblob(4000))", [()] * 3000)
    raw.execute("COMMIT")

    class WriteDuringTheCopy(Interrupt):
        """At the copy's first step, a write through the database's own writer, from
        another thread (the active's LLR flush): it must not wait for the copy to end."""

        wrote, tried = threading.Event(), threading.Event()

        @property
        def asked(self) -> bool:
            if not self.tried.is_set():
                self.tried.set()
                t = threading.Thread(target=lambda: (advance(db), self.wrote.set()))
                t.start()
                t.join(timeout=10)
            return False

    held = WriteDuringTheCopy()
    db.backup_to(tmp_path / "copy.sqlite", held, step=16)
    assert held.wrote.is_set(), "the writer waited for the copy"
    assert db.header.waypoint == 1
    raw.close()
    db.close()
