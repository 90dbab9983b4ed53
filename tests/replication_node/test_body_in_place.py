"""A large body written from the log (the LLR flush's, a passive's replay) goes into its row
of `bodies`, apart from its item's, where SQLite keeps the zeros it is inserted with lazy
(`storage/body_parts.py`, `storage/bodies.py`, issue 52), and so does a large body given
whole: every reader reads it as the text it always read, the digest counts it as before,
and a file from before the table opens, migrates and loses nothing.  In process, over real
SQLite files."""

from __future__ import annotations

import contextlib
import hashlib
import shutil
import sqlite3
import uuid
from pathlib import Path

import pytest

from dag_common.counted_text import known
from dag_common.items_query import ItemsQuery
from dag_common.model import Position
from replication_node.log import operations as ops
from replication_node.log.events import Transaction
from replication_node.log.spanning import BodyParts
from replication_node.storage.body_migration import SCHEMA_VERSION
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


def stored(path: Path) -> dict[str, str]:
    """Where each item's body is as the file holds it: "apart" (its row of `bodies`, `body`
    left '') or "row" (`body`)."""
    with contextlib.closing(sqlite3.connect(path)) as conn:
        rows = conn.execute(
            "SELECT item_id, body='', EXISTS(SELECT 1 FROM bodies"
            " WHERE of_mailbox=items.mailbox AND of_item_id=items.item_id) FROM items"
        ).fetchall()
    assert all(empty for _, empty, apart in rows if apart), "a body kept apart is '' in its row"
    return {r[0]: "apart" if r[2] else "row" for r in rows}


def orphans(path: Path) -> int:
    """Rows of `bodies` without their live item."""
    with contextlib.closing(sqlite3.connect(path)) as conn:
        (n,) = conn.execute(
            "SELECT count(*) FROM bodies WHERE NOT EXISTS(SELECT 1 FROM items"
            " WHERE mailbox=of_mailbox AND item_id=of_item_id AND deleted=0)"
        ).fetchone()
    return int(n)


def before_bodies(path: Path, *, blob_column: bool = True) -> None:
    """Make a (closed) file written by this code one from before `bodies`: each body apart
    put back into its item, in a last column `body_blob` as the code before wrote a body
    from the log, or (not `blob_column`) in `body`'s text as before that; the table gone,
    the schema version 0."""
    with contextlib.closing(sqlite3.connect(path, isolation_level=None)) as conn:
        if blob_column:
            conn.execute("ALTER TABLE items ADD COLUMN body_blob BLOB")
        put = "body_blob=?" if blob_column else "body=CAST(? AS TEXT)"
        for box, item, data in conn.execute("SELECT of_mailbox, of_item_id, data FROM bodies"):
            conn.execute(f"UPDATE items SET {put} WHERE mailbox=? AND item_id=?", (data, box, item))
        conn.execute("DROP TABLE bodies")
        conn.execute("PRAGMA user_version = 0")


def test_a_large_body_is_kept_apart_and_every_reader_reads_its_text(tmp_path):
    db, plain = fresh(tmp_path / "db.sqlite"), fresh(tmp_path / "plain.sqlite")
    create = (ops.CreateMailbox("m", 1), ops.CreateFolder("m", 2, "Archive"))
    for each, body in ((db, from_log(LARGE)), (plain, LARGE)):
        apply(each, 1, *create, ops.PutItem("m", 3, "big", "Inbox", "s", body),
              ops.PutItem("m", 4, "small", "Inbox", "t", SMALL))  # fmt: skip
    # Apart whether read from the log a part at a time or given whole: by its size alone.
    assert stored(db.path) == stored(plain.path) == {"big": "apart", "small": "row"}
    # The same text to every reader, and the same digest as the body bound whole.
    assert db.item("m", "big").body == LARGE and type(db.item("m", "big").body) is str
    assert [(r.item_id, r.body, r.size) for r in db.items("m")] == [
        ("big", LARGE, len(LARGE.encode())), ("small", SMALL, len(SMALL.encode()))
    ]  # fmt: skip
    assert [r.body for r in db.items_page("m", ItemsQuery(0, 10, page_bytes=1)).items] == [LARGE]
    assert [r.body for r in db.items_page("m", ItemsQuery(0, 10, bodies=False)).items] == ["", ""]
    with db.reading_apart() as conn:
        assert message_body(conn, "m", "big")[0] == LARGE
    assert db.content_digest == plain.content_digest
    assert db.recompute_digest() == (db.content_digest, db.content_digest)
    # A flag change and a move keep it; a copy has its own; an expunge leaves no byte of it.
    for each in (db, plain):
        apply(each, 2, ops.SetFlags("m", 5, "Inbox", ("big",), 3, add=("\\Seen",)),
              ops.MoveItems("m", 6, "Inbox", "Archive", (("big", 7),), 4))  # fmt: skip
        copy = ops.CopyItems("m", 7, "Archive", "Inbox", (("big", "big2", 1),), 5)
        apply(each, 3, copy, ops.DeleteItem("m", 8, "big", 6))
        assert stored(each.path) == {"big": "row", "big2": "apart", "small": "row"}
        assert orphans(each.path) == 0
    assert db.item("m", "big2").body == LARGE and db.item("m", "big").deleted
    assert db.content_digest == plain.content_digest
    assert db.recompute_digest() == (db.content_digest, db.content_digest)
    # Put again as a plain text: its body apart is gone with it; large again, back apart.
    apply(db, 4, ops.PutItem("m", 9, "big2", "Archive", "s", SMALL))
    assert stored(db.path)["big2"] == "row" and db.item("m", "big2").body == SMALL
    assert orphans(db.path) == 0
    apply(db, 5, ops.PutItem("m", 10, "big2", "Archive", "s", from_log(LARGE)),
          ops.PutItem("m", 11, "small", "Inbox", "t", LARGE))  # fmt: skip
    assert stored(db.path) == {"big": "row", "big2": "apart", "small": "apart"}
    # A mailbox removed takes its bodies with it.
    apply(db, 6, ops.DeleteMailbox("m", 12))
    assert stored(db.path) == {} and orphans(db.path) == 0
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


@pytest.mark.parametrize("blob_column", [True, False], ids=["body_blob", "body"])
def test_a_file_from_before_the_table_has_its_bodies_moved_and_reads_the_same(
    tmp_path, blob_column
):
    """A database file from before `bodies`, its large bodies in `body_blob` (or, older, in
    `body`'s text): each copy of it has them moved on open, every item reads the same, the
    digest is the same, the schema version is set; nothing more is moved at the next open."""
    path = tmp_path / "old.sqlite"
    db = fresh(path)
    apply(db, 1, ops.CreateMailbox("m", 1), ops.PutItem("m", 2, "big", "Inbox", "s", LARGE),
          ops.PutItem("m", 3, "logged", "Inbox", "s", from_log(LARGE[::-1])),
          ops.PutItem("m", 4, "small", "Inbox", "t", SMALL),
          ops.PutItem("m", 5, "gone", "Inbox", "t", LARGE),
          ops.DeleteItem("m", 6, "gone", 4))  # fmt: skip
    digest = db.content_digest
    db.close()
    before_bodies(path, blob_column=blob_column)
    assert "body_blob" in columns(path) or not blob_column
    copies = [path, tmp_path / "copy.sqlite"]
    shutil.copy(path, copies[1])
    for file in copies:
        db = Database.open(file)
        assert stored(file) == {"big": "apart", "logged": "apart", "small": "row", "gone": "row"}
        assert orphans(file) == 0
        assert [(r.item_id, r.body) for r in db.items("m") if not r.deleted] == [
            ("big", LARGE), ("logged", LARGE[::-1]), ("small", SMALL)
        ]  # fmt: skip
        assert db.content_digest == digest
        assert db.recompute_digest() == (digest, digest)
        with contextlib.closing(sqlite3.connect(file)) as conn:
            assert conn.execute("PRAGMA user_version").fetchone() == (SCHEMA_VERSION,)
            if blob_column:  # the column stays, NULL everywhere: dropping it rewrites rows
                assert conn.execute("SELECT count(*) FROM items WHERE body_blob IS NOT NULL"
                                    ).fetchone() == (0,)  # fmt: skip
        apply(db, 2, ops.PutItem("m", 7, "new", "Inbox", "u", from_log(LARGE)),
              ops.SetFlags("m", 8, "Inbox", ("big",), 5, add=("x",)))  # fmt: skip
        assert stored(file)["new"] == "apart" and db.item("m", "new").body == LARGE
        assert db.recompute_digest() == (db.content_digest, db.content_digest)
        db.close()
        again = Database.open(file)  # opened again: nothing more to move
        assert [r.item_id for r in again.items("m")][-2:] == ["new", "big"]
        assert again.item("m", "big").body == LARGE
        again.close()
