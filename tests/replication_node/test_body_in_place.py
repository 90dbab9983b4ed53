"""A large body written into its row from the log (the LLR flush's, a passive's replay) goes
into `items.body_blob`, the row's last column, where SQLite keeps the zeros it is inserted
with lazy (`storage/body_parts.py`, issue 52): every reader reads it as the text it always
read, the digest counts it as before, and a file from before the column opens, migrates and
loses nothing.  In process, over real SQLite files."""

from __future__ import annotations

import contextlib
import hashlib
import shutil
import sqlite3
import uuid
from pathlib import Path

import pytest

from dag_common.counted_text import known
from dag_common.model import Position
from replication_node.log import operations as ops
from replication_node.log.events import Transaction
from replication_node.log.spanning import BodyParts
from replication_node.storage.database import Database
from replication_node.storage.file_reads import message_body
from tests.replication_node.strategies import T0

LARGE = "grand caf\xe9 \U0001f600 au lait\r\n" * 80_000  # 2.4 MB in UTF-8, not ASCII
SMALL = "petit caf\xe9"


def fresh(path: Path) -> Database:
    return Database.create(
        path, database_signature=uuid.UUID(int=1), log_signature=uuid.UUID(int=2)
    )


def from_log(text: str, part: int = 64 * 1024, *, short: int = 0) -> str:
    """`text` as the LLR flush and the replay give a large staged body: its counts, and its
    bytes as parts to be read (`short`: that many bytes fewer than it says)."""
    data = text.encode()
    given = data[: len(data) - short]
    parts = BodyParts(len(data), lambda: (given[i : i + part] for i in range(0, len(given), part)))
    sha256 = hashlib.sha256(data).hexdigest()
    return known("", utf8_size=len(data), sha256=sha256, utf8=parts)  # type: ignore[arg-type]


def txn(gen: int, *operations: ops.Operation) -> Transaction:
    return Transaction(Position(gen, 512), T0, operations)


def apply(db: Database, gen: int, *operations: ops.Operation) -> None:
    db.apply([txn(gen, *operations)], waypoint=gen, committed=gen, last_log_time=T0)


def columns(path: Path) -> list[str]:
    with contextlib.closing(sqlite3.connect(path)) as conn:
        return [row[1] for row in conn.execute("PRAGMA table_info(items)")]


def stored(path: Path) -> dict[str, tuple[str, str]]:
    """Each item's `typeof(body)` and `typeof(body_blob)` as the file holds them."""
    with contextlib.closing(sqlite3.connect(path)) as conn:
        rows = conn.execute("SELECT item_id, typeof(body), typeof(body_blob) FROM items")
        return {r[0]: (r[1], r[2]) for r in rows}


def test_a_body_from_the_log_is_the_rows_last_column_and_every_reader_reads_its_text(tmp_path):
    db, plain = fresh(tmp_path / "db.sqlite"), fresh(tmp_path / "plain.sqlite")
    create = (ops.CreateMailbox("m", 1), ops.CreateFolder("m", 2, "Archive"))
    for each, body in ((db, from_log(LARGE)), (plain, LARGE)):
        apply(each, 1, *create, ops.PutItem("m", 3, "big", "Inbox", "s", body),
              ops.PutItem("m", 4, "small", "Inbox", "t", SMALL))  # fmt: skip
    assert columns(db.path)[-1] == "body_blob", "last: only there is a zeroblob kept lazy"
    assert stored(db.path) == {"big": ("text", "blob"), "small": ("text", "null")}
    assert stored(plain.path) == {"big": ("text", "null"), "small": ("text", "null")}
    # The same text to every reader, and the same digest as the body bound whole.
    assert db.item("m", "big").body == LARGE and type(db.item("m", "big").body) is str
    assert [(r.item_id, r.body, r.size) for r in db.items("m")] == [
        ("big", LARGE, len(LARGE.encode())), ("small", SMALL, len(SMALL.encode()))
    ]  # fmt: skip
    assert [r.body for r in db.items_page("m", 0, 10, 1).items] == [LARGE]
    assert [r.body for r in db.items_page("m", 0, 10, bodies=False).items] == ["", ""]
    with db.reading_apart() as conn:
        assert message_body(conn, "m", "big")[0] == LARGE
    assert db.content_digest == plain.content_digest
    assert db.recompute_digest() == (db.content_digest, db.content_digest)
    # A copy keeps it where it is; an expunge leaves no byte of it.
    copy = ops.CopyItems("m", 5, "Inbox", "Archive", (("big", "big2", 1),), 3)
    apply(db, 2, copy, ops.DeleteItem("m", 6, "big", 4))
    apply(plain, 2, copy, ops.DeleteItem("m", 6, "big", 4))
    assert stored(db.path)["big2"] == ("text", "blob")
    assert stored(db.path)["big"] == ("text", "null")
    assert db.item("m", "big2").body == LARGE and db.item("m", "big").deleted
    assert db.content_digest == plain.content_digest
    assert db.recompute_digest() == (db.content_digest, db.content_digest)
    # Put again as a plain text: the row is replaced whole, its BLOB gone.
    apply(db, 3, ops.PutItem("m", 7, "big2", "Archive", "s", SMALL))
    assert stored(db.path)["big2"] == ("text", "null") and db.item("m", "big2").body == SMALL
    db.close()
    plain.close()


def test_parts_short_of_the_bodys_size_write_nothing(tmp_path):
    db = fresh(tmp_path / "db.sqlite")
    apply(db, 1, ops.CreateMailbox("m", 1))
    digest = db.content_digest
    with pytest.raises(sqlite3.DataError):
        apply(db, 2, ops.PutItem("m", 2, "big", "Inbox", "s", from_log(LARGE, short=10)))
    assert db.header.waypoint == 1 and db.content_digest == digest
    assert db.item("m", "big") is None
    db.close()


def test_a_file_from_before_the_column_opens_with_everything_and_takes_bodies_in_place(tmp_path):
    """A database file whose items have no `body_blob` (every body in `body`, a large one
    too): each copy of it gets the column on open, last, as a new file has it; every item
    reads the same, the digest is the same; a body from the log is then written in place."""
    path = tmp_path / "old.sqlite"
    db = fresh(path)
    apply(db, 1, ops.CreateMailbox("m", 1), ops.PutItem("m", 2, "big", "Inbox", "s", LARGE),
          ops.PutItem("m", 3, "small", "Inbox", "t", SMALL))  # fmt: skip
    digest = db.content_digest
    db.close()
    with contextlib.closing(sqlite3.connect(path)) as conn:  # closed: the WAL checkpointed
        conn.execute("ALTER TABLE items DROP COLUMN body_blob")
    copies = [path, tmp_path / "copy.sqlite"]
    shutil.copy(path, copies[1])
    new = fresh(tmp_path / "new.sqlite")
    new.close()
    for file in copies:
        assert "body_blob" not in columns(file)
        db = Database.open(file)
        assert columns(file) == columns(new.path), "the same columns in the same order"
        assert [(r.item_id, r.body) for r in db.items("m")] == [("big", LARGE), ("small", SMALL)]
        assert db.content_digest == digest
        assert db.recompute_digest() == (digest, digest)
        apply(db, 2, ops.PutItem("m", 4, "new", "Inbox", "u", from_log(LARGE)))
        assert stored(file) == {
            "big": ("text", "null"), "small": ("text", "null"), "new": ("text", "blob")
        }  # fmt: skip
        assert db.item("m", "new").body == LARGE
        assert db.recompute_digest() == (db.content_digest, db.content_digest)
        db.close()
        again = Database.open(file)  # opened again: nothing more to migrate
        assert columns(file) == columns(new.path)
        assert [r.item_id for r in again.items("m")] == ["big", "small", "new"]
        again.close()
