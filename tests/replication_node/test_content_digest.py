"""The database content digest: kept by `apply`, it always equals the digest added up from
the rows, and what the triggers that kept it before issue 33 kept; copies that apply the same
operations in any batching agree on it generation by generation; a row changed behind
SQLite's back is found by adding up again (property-based with hypothesis over operation
sequences, real SQLite files)."""

from __future__ import annotations

import sqlite3
import tracemalloc
import uuid

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dag_common.mailbox_digest import (
    MODULUS,
    folder_term,
    item_term_of_hash,
    mailbox_digest,
    mailbox_term,
    to_hex,
)
from dag_common.model import Position
from replication_node.log.events import Transaction
from replication_node.log.operations import CreateMailbox, PutItem
from replication_node.storage.bodies import PART
from replication_node.storage.database import Database
from replication_node.storage.digest import recompute_digest
from replication_node.storage.reader import ItemRow
from replication_node.storage.scrub import scrub_file
from replication_node.storage.tables import put_rows
from tests.replication_node.strategies import MAILBOXES, T0, history, numbered


def fresh(path):
    return Database.create(
        path, database_signature=uuid.UUID(int=1), log_signature=uuid.UUID(int=2)
    )


def apply(db, txns, through, digests=None):
    return db.apply(txns, waypoint=through, committed=through, last_log_time=T0, digests=digests)


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(generations=history, split=st.integers(min_value=0, max_value=6))
def test_the_kept_digest_is_the_rows_digest_in_any_batching(tmp_path_factory, generations, split):
    txns = numbered(generations)
    last = len(generations)
    root = tmp_path_factory.mktemp("digest")
    whole, parts = fresh(root / "whole.sqlite"), fresh(root / "parts.sqlite")
    prepared = fresh(root / "prepared.sqlite")
    try:
        per_generation: dict[int, str] = {}
        apply(whole, txns, last, per_generation)
        cut = min(split, last)
        apply(parts, [t for t in txns if t.generation <= cut], cut)
        at_cut = parts.content_digest
        apply(parts, [t for t in txns if t.generation > cut], last)
        # the puts' rows and terms computed beforehand, as a replay's read does: the same
        prepared.apply(
            txns, waypoint=last, committed=last, last_log_time=T0, puts=map(put_rows, txns)
        )
        # kept by apply == added up from the rows, on all three
        for db in (whole, parts, prepared):
            stored, rows = db.recompute_digest()
            assert stored == rows == db.content_digest
        assert whole.content_digest == parts.content_digest == prepared.content_digest
        for mailbox in MAILBOXES:
            assert prepared.items(mailbox) == whole.items(mailbox)
        # as of a generation: what the whole batch reported is what the parts held there
        if cut and any(t.generation == cut for t in txns):
            assert per_generation[cut] == at_cut
        # one mechanism: a mailbox's digest is its live items' part of the sum
        for mailbox in MAILBOXES:
            items = whole.items(mailbox)
            assert mailbox_digest(mailbox, map(ItemRow._asdict, items)).item_count == sum(
                1 for i in items if not i.deleted
            )
    finally:
        whole.close()
        parts.close()
        prepared.close()


def found_by_adding_up(path, needle: bytes, letter: int, kept: str) -> None:
    """The first byte of `needle` in the file at `path` made `letter`, in place: SQLite's
    pages stay valid, the digest added up from the rows differs from `kept`, and the scrub
    says so."""
    data = bytearray(path.read_bytes())
    data[data.index(needle)] = letter
    path.write_bytes(bytes(data))
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    assert to_hex(recompute_digest(conn)) != kept
    conn.close()
    problem = scrub_file(path)[1]
    assert problem and "do not add up to the content digest" in problem


def test_a_row_changed_inside_a_valid_page_is_found_by_adding_up_again(tmp_path):
    db = fresh(tmp_path / "db.sqlite")
    ops = [CreateMailbox("m", 1)] + [
        PutItem("m", n + 2, f"i{n}", "Inbox", f"subject-{n:06d}", "b" * 300) for n in range(200)
    ]
    apply(db, [Transaction(Position(1, 512), T0, tuple(ops))], 1)
    kept = db.content_digest
    db.close(clean=True)
    assert scrub_file(tmp_path / "db.sqlite")[1] is None
    # one letter of one subject, in place: the page stays valid, SQLite sees nothing
    found_by_adding_up(tmp_path / "db.sqlite", b"subject-000123", ord("S"), kept)
    reopened = Database.open(tmp_path / "db.sqlite")
    stored, rows = reopened.recompute_digest()
    assert stored == kept != rows
    reopened.close()


def test_a_file_from_before_digests_gets_its_digest_on_first_open(tmp_path):
    db = fresh(tmp_path / "db.sqlite")
    apply(db, numbered([[[{"op": "create_mailbox", "mailbox": "m"}]]]), 1)
    expected = db.content_digest
    db.close()
    conn = sqlite3.connect(tmp_path / "db.sqlite")
    conn.executescript(
        "DROP TABLE db_digest;"
        + "".join(
            f"DROP TRIGGER {t};"
            for (t,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'trigger'")
        )
    )
    conn.close()
    upgraded = Database.open(tmp_path / "db.sqlite")
    assert upgraded.content_digest == expected
    upgraded.close()


def test_a_file_from_before_body_hashes_is_migrated_and_its_digest_added_up_again(tmp_path):
    """A database file whose items have no body_hash column: opened, it gets the column
    filled and its digest added up again by the current definition; writes after keep it
    equal to its rows."""

    def put(item: str, body: str, cn: int) -> PutItem:
        return PutItem("m", cn, item, "Inbox", "", body)

    path = tmp_path / "old.sqlite"
    db = fresh(path)
    create = CreateMailbox("m", 1)
    apply(db, [Transaction(Position(1, 512), T0, (create, put("a", "x" * 5000, 2)))], 1)
    db.close()
    conn = sqlite3.connect(path)
    conn.execute("DROP TABLE bodies")  # after it, too
    conn.execute("PRAGMA user_version = 0")
    conn.execute("ALTER TABLE items DROP COLUMN body_hash")
    conn.execute("UPDATE db_digest SET digest = ?", ("0" * 63 + "1",))  # the old definition's
    conn.commit()
    conn.close()
    db = Database.open(path)
    stored, rows = db.recompute_digest()
    assert stored == rows == db.content_digest
    apply(db, [Transaction(Position(2, 512), T0, (put("b", "y" * 10, 3), put("a", "z", 4)))], 2)
    stored, rows = db.recompute_digest()
    assert stored == rows == db.content_digest
    assert {r.item_id: r.body for r in db.items("m")} == {"a": "z", "b": "y" * 10}
    db.close()


# How files kept their content digest before issue 33: a trigger per table and change,
# calling a Python function per row (an item's format, issue 49, passed as well: a text
# item's term is the old one).  The oracle of the two tests below.
TRIGGERS_BEFORE_33 = """
CREATE TRIGGER dg_items_ins2 AFTER INSERT ON items WHEN NEW.deleted = 0 BEGIN
  SELECT dg_item(1, NEW.mailbox, NEW.item_id, NEW.folder, NEW.subject, NEW.body_hash,
    NEW.format); END;
CREATE TRIGGER dg_items_del2 AFTER DELETE ON items WHEN OLD.deleted = 0 BEGIN
  SELECT dg_item(-1, OLD.mailbox, OLD.item_id, OLD.folder, OLD.subject, OLD.body_hash,
    OLD.format); END;
CREATE TRIGGER dg_items_upd2 AFTER UPDATE ON items BEGIN
  SELECT dg_item(-1, OLD.mailbox, OLD.item_id, OLD.folder, OLD.subject, OLD.body_hash, OLD.format)
    WHERE OLD.deleted = 0;
  SELECT dg_item(1, NEW.mailbox, NEW.item_id, NEW.folder, NEW.subject, NEW.body_hash, NEW.format)
    WHERE NEW.deleted = 0; END;
CREATE TRIGGER dg_mbx_ins AFTER INSERT ON mailboxes BEGIN
  SELECT dg_mailbox(1, NEW.mailbox, NEW.display_name, NEW.locked, NEW.soft_deleted); END;
CREATE TRIGGER dg_mbx_del AFTER DELETE ON mailboxes BEGIN
  SELECT dg_mailbox(-1, OLD.mailbox, OLD.display_name, OLD.locked, OLD.soft_deleted); END;
CREATE TRIGGER dg_mbx_upd AFTER UPDATE ON mailboxes BEGIN
  SELECT dg_mailbox(-1, OLD.mailbox, OLD.display_name, OLD.locked, OLD.soft_deleted);
  SELECT dg_mailbox(1, NEW.mailbox, NEW.display_name, NEW.locked, NEW.soft_deleted); END;
CREATE TRIGGER dg_fld_ins AFTER INSERT ON folders BEGIN
  SELECT dg_folder(1, NEW.mailbox, NEW.folder); END;
CREATE TRIGGER dg_fld_del AFTER DELETE ON folders BEGIN
  SELECT dg_folder(-1, OLD.mailbox, OLD.folder); END;
"""
# The oracle's term for a folder renamed (issue 50's rename_folder): no file from before issue 33
# had renames, nor this trigger.
RENAME_TRIGGER = """
CREATE TRIGGER dg_fld_upd AFTER UPDATE ON folders BEGIN
  SELECT dg_folder(-1, OLD.mailbox, OLD.folder);
  SELECT dg_folder(1, NEW.mailbox, NEW.folder); END;
"""


def with_old_triggers(conn: sqlite3.Connection, kept: list[int]) -> None:
    """Give `conn` the pre-issue-33 trigger functions, adding each term into `kept[0]`."""

    def term(sign: int, value: int) -> None:
        kept[0] = (kept[0] + sign * value) % MODULUS

    conn.execute("PRAGMA recursive_triggers = ON")
    conn.create_function("dg_item", 7, lambda s, *f: term(s, item_term_of_hash(*f)))
    conn.create_function("dg_mailbox", 5, lambda s, *f: term(s, mailbox_term(*f)))
    conn.create_function("dg_folder", 3, lambda s, *f: term(s, folder_term(*f)))


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(generations=history)
def test_apply_keeps_the_digest_the_old_triggers_kept(tmp_path_factory, generations):
    """The same writes, the old triggers watching them on the same connection: after every
    transaction, the digest apply keeps is the one the triggers add up, row by row."""
    txns = numbered(generations)
    db = fresh(tmp_path_factory.mktemp("oracle") / "db.sqlite")
    kept = [0]
    try:
        with_old_triggers(db._conn, kept)
        db._conn.executescript(TRIGGERS_BEFORE_33 + RENAME_TRIGGER)
        for txn in txns:
            apply(db, [txn], txn.generation)
            assert db.content_digest == to_hex(kept[0])
        stored, rows = db.recompute_digest()
        assert stored == rows == db.content_digest
    finally:
        db.close()


def test_a_file_from_before_33_loses_its_triggers_and_keeps_its_digest(tmp_path):
    """A file whose digest triggers called Python functions: opened, the triggers are
    dropped (their functions are no longer registered: a write would fail) and the digest
    they kept stays; writes after keep it equal to its rows."""
    path = tmp_path / "db.sqlite"
    fresh(path).close()
    conn = sqlite3.connect(path, isolation_level=None)
    kept = [0]
    with_old_triggers(conn, kept)
    conn.executescript(TRIGGERS_BEFORE_33)
    conn.execute("BEGIN")  # rows written as before issue 33, the triggers keeping the digest
    conn.execute(
        "INSERT INTO mailboxes (mailbox, display_name, locked, soft_deleted, change_number)"
        " VALUES ('m', 'M', 0, 0, 1)"
    )
    conn.execute("INSERT INTO folders (mailbox, folder, change_number) VALUES ('m', 'Inbox', 1)")
    conn.execute("UPDATE db_digest SET digest = ?", (to_hex(kept[0]),))
    conn.execute("COMMIT")
    conn.close()
    db = Database.open(path)
    names = db._conn.execute("SELECT name FROM sqlite_master WHERE type = 'trigger'").fetchall()
    assert names == []
    assert db.content_digest == to_hex(kept[0])
    apply(db, [Transaction(Position(1, 512), T0, (PutItem("m", 2, "a", "Inbox"),))], 1)
    stored, rows = db.recompute_digest()
    assert stored == rows == db.content_digest != to_hex(kept[0])
    db.close()


def test_a_letter_changed_in_a_body_kept_apart_is_found_by_adding_up_again(tmp_path):
    # A body of a MiB or more is kept apart (`bodies`) and hashed again a part at a time,
    # from its bytes, not read whole as a value (Python would hold a str of it, SQLite its
    # own copy: a passive checks its file so before replay, in the node): a change inside
    # it shows all the same.
    db = fresh(tmp_path / "db.sqlite")
    large = "".join(f"line {n:07d} of a large body\n" for n in range(200_000))  # 5.8 MB
    ops = [CreateMailbox("m", 1), PutItem("m", 2, "big", "Inbox", "s", large)]
    apply(db, [Transaction(Position(1, 512), T0, tuple(ops))], 1)
    kept = db.content_digest
    db.close(clean=True)
    conn = sqlite3.connect(tmp_path / "db.sqlite")
    assert conn.execute("SELECT count(*) FROM bodies").fetchone() == (1,)
    tracemalloc.start()
    try:
        assert to_hex(recompute_digest(conn)) == kept
        held = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert held < 3 * PART < len(large), held  # a part or two, not the body
    conn.close()
    found_by_adding_up(tmp_path / "db.sqlite", b"line 0031234 of", ord("L"), kept)
