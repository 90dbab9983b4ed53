"""A put's row in its two shapes (`storage/puts.py`): a text item with no flags and no
received time of its own is written by the short statement, its format and flags left to
the columns' defaults and its received time bound once with its commit time (issue 51's
replay: three values fewer to bind a row).  The rows in the file are the ones the full
statement writes, whatever the shapes a batch mixes, in the order of the log; and each
folder's counters go past the UIDs and modseqs its rows hold."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from pathlib import Path

from dag_common.model import Position
from dag_common.rfc822 import BodyFormat
from replication_node.log.events import Transaction
from replication_node.log.operations import CreateFolder, CreateMailbox, DeleteItem, PutItem
from replication_node.storage.database import Database
from replication_node.storage.puts import Shape, lifts, put_rows

T0 = datetime(2026, 11, 29, 8, 0, tzinfo=UTC)
T1 = datetime(2026, 11, 29, 9, 0, tzinfo=UTC)
ROW = "item_id, folder, subject, body, size, format, uid, modseq, flags, received, commit_time"


def put(cn: int, item_id: str, **fields: object) -> PutItem:
    return PutItem("m", cn, item_id, fields.pop("folder", "Inbox"), "s", f"body {cn}", **fields)  # type: ignore[arg-type]


def test_a_plain_text_put_has_the_short_row_and_others_the_full_one():
    when = T0.isoformat()
    txn = Transaction(
        Position(1, 512),
        T0,
        (
            put(1, "a", uid=1, modseq=1),
            put(2, "b", uid=2, modseq=2, flags=("\\Seen",)),
            put(3, "c", uid=3, modseq=3, format=BodyFormat.MESSAGE),
            put(4, "d", uid=4, modseq=4, received="2026-01-01T00:00:00+00:00"),
        ),
    )
    rows, terms, shape = put_rows(txn)
    assert len(terms) == 4
    assert shape == Shape(4, full=True, large=False, unique=True, lifts={("m", "Inbox"): (4, 4)})
    assert rows[0] == ("m", "a", "Inbox", "s", "body 1", 6, 1, when, rows[0][8], 1, 1)
    assert [len(r) for r in rows] == [11, 14, 14, 14]
    assert rows[1][11:] == ("text", "\\Seen", when)
    assert rows[2][11:] == ("message", "", when)
    assert rows[3][11:] == ("text", "", "2026-01-01T00:00:00+00:00")


def _apply(path: Path, batches: list[list[Transaction]]) -> tuple[list[tuple[object, ...]], ...]:
    db = Database.create(path, database_signature=uuid.uuid4(), log_signature=uuid.uuid4())
    try:
        for gen, txns in enumerate(batches, start=1):
            db.apply(txns, waypoint=gen, committed=gen, last_log_time=T0)
        assert db.recompute_digest()[0] == db.recompute_digest()[1]
        with db._lock:
            rows = db._conn.execute(f"SELECT {ROW} FROM items ORDER BY item_id").fetchall()
            folders = db._conn.execute(
                "SELECT folder, uid_next, highest_modseq FROM folders ORDER BY folder"
            ).fetchall()
        return [tuple(r) for r in rows], [tuple(f) for f in folders]
    finally:
        db.close()


def test_the_two_shapes_write_the_rows_the_full_one_would_in_log_order(tmp_path: Path):
    setup = Transaction(
        Position(1, 512),
        T0,
        (CreateMailbox("m", 1, "M", uidvalidity=7), CreateFolder("m", 2, "Sent", uidvalidity=9)),
    )
    # One batch: an item put plain then with flags, another the other way round, a
    # message between them, and a put of an item in the file already.
    first = Transaction(Position(1, 600), T0, (put(3, "x", uid=1, modseq=1),))
    mixed = [
        Transaction(
            Position(2, 512),
            T1,
            (
                put(4, "a", uid=2, modseq=2),
                put(5, "b", uid=3, modseq=3, flags=("\\Flagged",)),
                put(6, "c", uid=4, modseq=4, format=BodyFormat.MESSAGE),
            ),
        ),
        Transaction(
            Position(2, 900),
            T1,
            (
                put(7, "a", uid=2, modseq=5, flags=("\\Seen",)),
                put(8, "b", uid=3, modseq=6),
                put(9, "x", uid=1, modseq=7),
            ),
        ),
    ]
    rows, folders = _apply(tmp_path / "f.sqlite", [[setup, first], mixed])
    when = T1.isoformat()
    assert [(r[0], r[5], r[6], r[7], r[8], r[9], r[10]) for r in rows] == [
        ("a", "text", 2, 5, "\\Seen", when, when),
        ("b", "text", 3, 6, "", when, when),
        ("c", "message", 4, 4, "", when, when),
        ("x", "text", 1, 7, "", when, when),
    ]
    assert ("Inbox", 5, 7) in folders and ("Sent", 1, 0) in folders


def test_lifts_each_folder_past_its_numbered_rows():
    def row(folder: str, uid: int, modseq: int, mailbox: str = "m") -> tuple[object, ...]:
        return (mailbox, f"i{uid}", folder, "", "", 0, 1, "t", "h", uid, modseq)

    assert lifts([row("Inbox", 5, 9), row("Inbox", 7, 8)]) == {("m", "Inbox"): (7, 9)}
    assert lifts([row("Inbox", 5, 9), row("Sent", 2, 3), row("Inbox", 6, 1)]) == {
        ("m", "Inbox"): (6, 9),
        ("m", "Sent"): (2, 3),
    }
    assert lifts([row("Inbox", 0, 0), row("Inbox", 4, 4)]) == {("m", "Inbox"): (4, 4)}
    assert lifts([row("Inbox", 0, 0)]) == {}
    assert lifts([row("Inbox", 3, 3), row("Inbox", 4, 4, mailbox="n")]) == {
        ("m", "Inbox"): (3, 3),
        ("n", "Inbox"): (4, 4),
    }


def test_puts_over_rows_the_file_has_count_what_they_replace_whatever_the_ids_range(
    tmp_path: Path,
):
    """A transaction's new ids are looked up only when the file has a row in their range
    (`tables._ANY_BETWEEN`): a put below, between, above and over the file's ids, and over a
    tombstone, each leaves the stored digest what the rows add up to (`_apply` checks it)."""
    setup = Transaction(
        Position(1, 512),
        T0,
        (
            CreateMailbox("m", 1, "M", uidvalidity=7),
            put(2, "b", uid=1, modseq=1),
            put(3, "d", uid=2, modseq=2),
            put(4, "f", uid=3, modseq=3),
            DeleteItem("m", 5, "f", modseq=4),
        ),
    )
    later = [
        Transaction(Position(2, 512), T1, (put(6, "c", uid=4, modseq=5),)),  # none in range
        Transaction(
            Position(2, 700), T1, (put(7, "a", uid=5, modseq=6), put(8, "e", uid=6, modseq=7))
        ),
        Transaction(
            Position(2, 900), T1, (put(9, "d", uid=7, modseq=8), put(10, "z", uid=8, modseq=9))
        ),
        Transaction(Position(2, 990), T1, (put(11, "f", uid=9, modseq=10),)),  # a tombstone's id
        Transaction(  # an item put twice in one transaction: the second replaces the first
            Position(3, 512), T1, (put(12, "y", uid=10, modseq=11), put(13, "y", uid=10, modseq=12))
        ),
    ]
    rows, _ = _apply(tmp_path / "f.sqlite", [[setup], later])
    assert [(r[0], r[3], r[6]) for r in rows] == [
        ("a", "body 7", 5),
        ("b", "body 2", 1),
        ("c", "body 6", 4),
        ("d", "body 9", 7),
        ("e", "body 8", 6),
        ("f", "body 11", 9),
        ("y", "body 13", 10),
        ("z", "body 10", 8),
    ]


def test_a_shape_counts_keys_once_each_by_mailbox_and_item_id():
    def txn(*ops: PutItem) -> Transaction:
        return Transaction(Position(1, 512), T0, ops)

    two = PutItem("n", 2, "a", "Inbox", "s", "b", uid=1, modseq=1)
    assert put_rows(txn(put(1, "a", uid=1, modseq=1), two)).shape.unique  # type: ignore[union-attr]
    twice = txn(put(1, "a", uid=1, modseq=1), put(2, "a", uid=1, modseq=2))
    assert not put_rows(twice).shape.unique  # type: ignore[union-attr]
    assert put_rows(txn()).shape is None
