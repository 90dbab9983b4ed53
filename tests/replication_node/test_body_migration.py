"""A file from before `bodies` has its large bodies moved into the table on open
(`storage/body_migration.py`, issue 52): a kill in the middle leaves a file that opens and
migrates again, losing nothing; the content digest is the same before, during and after, on
every copy; the digest added up again finds a body apart changed behind SQLite's back.  In
process and in a child process killed, over real SQLite files."""

from __future__ import annotations

import contextlib
import shutil
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

from replication_node.log import operations as ops
from replication_node.storage.body_migration import SCHEMA_VERSION, waiting
from replication_node.storage.database import Database
from replication_node.storage.digest import recompute_digest, stored_digest
from tests.replication_node.test_body_in_place import (
    LARGE,
    SMALL,
    apply,
    before_bodies,
    fresh,
    from_log,
    orphans,
    stored,
)

ROOT = Path(__file__).resolve().parents[2]
BODIES = {f"b{i}": LARGE.replace("caf", f"c{i}f") for i in range(4)}


def old_file(path: Path, *, blob_column: bool = True) -> str:
    """A file from before `bodies`: four large bodies (two from the log), a small one, a
    large one deleted; its digest."""
    db = fresh(path)
    puts = [
        ops.PutItem("m", 2 + i, item, "Inbox", "s", from_log(body) if i % 2 else body)
        for i, (item, body) in enumerate(BODIES.items())
    ]
    apply(db, 1, ops.CreateMailbox("m", 1), *puts, ops.PutItem("m", 9, "small", "Inbox", "", SMALL))
    digest = db.content_digest
    db.close()
    before_bodies(path, blob_column=blob_column)
    return digest


def digests(path: Path) -> tuple[int | None, int]:
    """(stored, added up again from the rows) read straight from the file, opened by no
    `Database` (so not migrated)."""
    with contextlib.closing(sqlite3.connect(path)) as conn:
        return stored_digest(conn), recompute_digest(conn)


# A child that moves the bodies and is killed (SIGKILL, inside its second body's write
# transaction, once the body is copied and its item cleared: before the COMMIT).
KILLED = """
import os, signal, sqlite3, sys
from replication_node.storage.body_migration import move_bodies_apart
conn = sqlite3.connect(sys.argv[1], isolation_level=None)
calls = []
def kill():
    calls.append(1)
    if len(calls) == 2:
        os.kill(os.getpid(), signal.SIGKILL)
move_bodies_apart(conn, before_commit=kill)
"""


def test_a_kill_in_the_middle_leaves_a_file_that_opens_and_migrates_again(tmp_path):
    path = tmp_path / "old.sqlite"
    digest = old_file(path)
    stored_before, rows_before = digests(path)
    with contextlib.closing(sqlite3.connect(path)) as conn:
        assert len(waiting(conn)) == 4
    child = subprocess.run(
        [sys.executable, "-c", KILLED, str(path)], cwd=ROOT, env={"PYTHONPATH": str(ROOT)},
        capture_output=True, check=False,
    )  # fmt: skip
    assert child.returncode == -signal.SIGKILL, child.stderr
    # One body moved and committed, the second's transaction lost with the process.
    with contextlib.closing(sqlite3.connect(path)) as conn:
        assert conn.execute("PRAGMA user_version").fetchone() == (0,)
        assert conn.execute("SELECT of_item_id FROM bodies").fetchall() == [("b0",)]
        assert len(waiting(conn)) == 3
    assert digests(path) == (stored_before, rows_before), "the same rows, wherever the bodies"
    db = Database.open(path)
    assert stored(path) == {**dict.fromkeys(BODIES, "apart"), "small": "row"}
    assert orphans(path) == 0
    assert {r.item_id: r.body for r in db.items("m")} == {**BODIES, "small": SMALL}
    assert db.content_digest == digest and db.recompute_digest() == (digest, digest)
    db.close()
    with contextlib.closing(sqlite3.connect(path)) as conn:
        assert conn.execute("PRAGMA user_version").fetchone() == (SCHEMA_VERSION,)
        assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)


def test_two_copies_have_the_same_digest_before_and_after_and_alike_with_a_new_file(tmp_path):
    """One copy migrated, the other not yet (a copy of the same file from before): the same
    digest stored and added up from the rows; then both migrated, and a file made new with
    the same operations: the same again, and the same items."""
    digest = old_file(tmp_path / "a.sqlite", blob_column=False)
    shutil.copy(tmp_path / "a.sqlite", tmp_path / "b.sqlite")
    Database.open(tmp_path / "a.sqlite").close()
    assert digests(tmp_path / "a.sqlite") == digests(tmp_path / "b.sqlite")
    assert digests(tmp_path / "b.sqlite")[1] == int(digest, 16)
    new = fresh(tmp_path / "new.sqlite")
    puts = [ops.PutItem("m", 2 + i, item, "Inbox", "s", body)
            for i, (item, body) in enumerate(BODIES.items())]  # fmt: skip
    small = ops.PutItem("m", 9, "small", "Inbox", "", SMALL)
    apply(new, 1, ops.CreateMailbox("m", 1), *puts, small)
    later = (ops.SetFlags("m", 10, "Inbox", ("b1", "small"), 2, add=("\\Seen",)),
             ops.DeleteItem("m", 11, "b2", 3))  # fmt: skip
    apply(new, 2, *later)
    for name in ("a.sqlite", "b.sqlite"):
        db = Database.open(tmp_path / name)
        apply(db, 2, *later)
        assert db.content_digest == new.content_digest
        assert db.recompute_digest() == (new.content_digest, new.content_digest)
        assert db.items("m") == new.items("m")
        assert stored(db.path) == stored(new.path)
        db.close()
    new.close()


def test_a_body_apart_changed_behind_sqlites_back_is_found_by_adding_up_again(tmp_path):
    db = fresh(tmp_path / "db.sqlite")
    apply(db, 1, ops.CreateMailbox("m", 1), ops.PutItem("m", 2, "big", "Inbox", "s", LARGE))
    assert db.recompute_digest() == (db.content_digest, db.content_digest)
    with contextlib.closing(sqlite3.connect(db.path, isolation_level=None)) as conn:
        (rowid,) = conn.execute("SELECT rowid FROM bodies").fetchone()
        with conn.blobopen("bodies", "data", rowid) as blob:
            blob.seek(len(blob) // 2)
            blob.write(b"#")
    stored_hex, rows_hex = db.recompute_digest()
    assert stored_hex == db.content_digest and rows_hex != stored_hex
    db.close()
