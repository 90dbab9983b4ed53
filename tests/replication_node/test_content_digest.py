"""The database content digest: kept by triggers, it always equals the digest added up from
the rows; copies that apply the same operations in any batching agree on it generation by
generation; a row changed behind SQLite's back is found by adding up again (property-based
with hypothesis over operation sequences, real SQLite files)."""

from __future__ import annotations

import sqlite3
import uuid

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dag_common.mailbox_digest import mailbox_digest, to_hex
from replication_node.log.events import Transaction
from replication_node.storage.database import Database
from replication_node.storage.digest import recompute_digest
from replication_node.storage.scrub import scrub_file
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
    try:
        per_generation: dict[int, str] = {}
        apply(whole, txns, last, per_generation)
        cut = min(split, last)
        apply(parts, [t for t in txns if t.generation <= cut], cut)
        at_cut = parts.content_digest
        apply(parts, [t for t in txns if t.generation > cut], last)
        # kept by the triggers == added up from the rows, on both
        for db in (whole, parts):
            stored, rows = db.recompute_digest()
            assert stored == rows == db.content_digest
        assert whole.content_digest == parts.content_digest
        # as of a generation: what the whole batch reported is what the parts held there
        if cut and any(t.generation == cut for t in txns):
            assert per_generation[cut] == at_cut
        # one mechanism: a mailbox's digest is its live items' part of the sum
        for mailbox in MAILBOXES:
            items = whole.items(mailbox)
            assert mailbox_digest(mailbox, items).item_count == sum(
                1 for i in items if not i["deleted"]
            )
    finally:
        whole.close()
        parts.close()


def test_a_row_changed_inside_a_valid_page_is_found_by_adding_up_again(tmp_path):
    db = fresh(tmp_path / "db.sqlite")
    ops = [{"op": "create_mailbox", "mailbox": "m", "cn": 1}] + [
        {
            "op": "put_item",
            "mailbox": "m",
            "item_id": f"i{n}",
            "folder": "Inbox",
            "subject": f"subject-{n:06d}",
            "body": "b" * 300,
            "cn": n + 2,
        }
        for n in range(200)
    ]
    apply(db, [Transaction(1, 512, T0, ops)], 1)
    kept = db.content_digest
    db.close(clean=True)
    assert scrub_file(tmp_path / "db.sqlite")[1] is None
    # one letter of one subject, in place: the page stays valid, SQLite sees nothing
    data = bytearray((tmp_path / "db.sqlite").read_bytes())
    at = data.index(b"subject-000123")
    data[at] = ord("S")
    (tmp_path / "db.sqlite").write_bytes(bytes(data))
    conn = sqlite3.connect(tmp_path / "db.sqlite")
    assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    assert to_hex(recompute_digest(conn)) != kept
    conn.close()
    problem = scrub_file(tmp_path / "db.sqlite")[1]
    assert problem and "do not add up to the content digest" in problem
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
    """A database file whose items have no body_hash column (and whose triggers passed the
    bodies): opened, it gets the column filled, the new triggers, and its digest added up
    again by the current definition; writes after keep it equal to its rows."""

    def put(item: str, body: str, cn: int) -> dict:
        return {"op": "put_item", "mailbox": "m", "item_id": item, "folder": "Inbox",
                "subject": "", "body": body, "cn": cn}  # fmt: skip

    path = tmp_path / "old.sqlite"
    db = fresh(path)
    create = {"op": "create_mailbox", "mailbox": "m", "cn": 1}
    apply(db, [Transaction(1, 512, T0, [create, put("a", "x" * 5000, 2)])], 1)
    db.close()
    conn = sqlite3.connect(path)
    for name in ("dg_items_ins2", "dg_items_del2", "dg_items_upd2"):
        conn.execute(f"DROP TRIGGER {name}")
    conn.execute("ALTER TABLE items DROP COLUMN body_hash")
    conn.execute("UPDATE db_digest SET digest = ?", ("0" * 63 + "1",))  # the old definition's
    conn.commit()
    conn.close()
    db = Database.open(path)
    stored, rows = db.recompute_digest()
    assert stored == rows == db.content_digest
    apply(db, [Transaction(2, 512, T0, [put("b", "y" * 10, 3), put("a", "z", 4)])], 2)
    stored, rows = db.recompute_digest()
    assert stored == rows == db.content_digest
    assert {r["item_id"]: r["body"] for r in db.items("m")} == {"a": "z", "b": "y" * 10}
    db.close()
