"""One operation model: what the log carries decodes to the typed operation and back, and
the database (SQL) and the LLR overlay (rows in memory) end with the same rows for the same
operations, whatever they are (property-based, real SQLite)."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dag_common.clock import ManualClock
from dag_common.mailbox_digest import rows_digest
from replication_node.active.copy import ActiveCopy
from replication_node.active.logged_bodies import without_body
from replication_node.log import operations as ops
from replication_node.storage.database import Database
from replication_node.storage.file_reads import message_body
from replication_node.storage.overlay import LlrOverlay
from replication_node.storage.paths import CopyPaths
from tests.replication_node.helpers import body_of, text_of
from tests.replication_node.strategies import (
    FOLDERS,
    ITEM_IDS,
    MAILBOXES,
    history,
    numbered,
    operation,
)


@settings(max_examples=200, deadline=None)
@given(raw=operation())
def test_an_operation_decodes_and_encodes_to_what_the_log_carries(raw):
    if raw["op"] != "record_backup":
        raw = {**raw, "cn": 7}
    op = ops.decode(raw)
    encoded = ops.encode(op)
    assert ops.decode(encoded) == op
    assert {field: encoded[field] for field in raw} == raw


@pytest.mark.parametrize(
    ("raw", "why"),
    [
        ([], "must be an object"),
        ({"op": "drop_table", "mailbox": "m", "cn": 1}, "unknown operation 'drop_table'"),
        ({"op": "create_folder", "mailbox": "m", "cn": 1, "folder": "f", "x": 1}, "field `x`"),
        ({"op": "put_item", "mailbox": "m", "cn": 1, "folder": "Inbox"}, "field `item_id`"),
        ({"op": "put_item", "mailbox": "m", "cn": "1", "item_id": "a", "folder": "I"}, "cn"),
        ({"op": "delete_item", "mailbox": "m", "cn": True, "item_id": "a"}, "cn"),
        ({"op": "set_mailbox", "mailbox": "m", "cn": 1, "locked": "yes"}, "locked"),
        ({"op": "create_mailbox", "mailbox": "m", "cn": 1, "folders": [1]}, "folder"),
        ({"op": "record_backup", "generation": 3, "time": "2026-11-23T00:00:00+00:00"}, "kind"),
        ({"op": "record_backup", "kind": "differential", "generation": 3, "time": "x"}, "kind"),
        ({"op": "record_backup", "kind": "full", "generation": "3", "time": "x"}, "generation"),
        ({"op": "record_backup", "kind": "full", "generation": 0, "time": "x"}, "generation"),
        ({"op": "record_backup", "kind": "full", "generation": 3, "time": "noon"}, "time"),
        ({"op": "reserve_lost", "cn": 1}, "field `by`"),
        ({"op": "reserve_lost", "cn": 1, "by": 0}, "by"),
        ({"op": "reserve_lost", "cn": 1, "by": -3}, "by"),
        ({"op": "reserve_lost", "cn": 1, "by": 2**62 + 1}, "by"),
        ({"op": "reserve_lost", "cn": 1, "by": "7"}, "by"),
        ({"op": "reserve_lost", "cn": 1, "by": 7, "mailbox": "m"}, "field `mailbox`"),
    ],
)
def test_what_is_not_an_operation_is_refused_naming_why(raw, why):
    with pytest.raises(ops.MalformedOperation, match=why):
        ops.decode(raw)


def test_a_records_operations_name_their_staged_bodies_and_get_them_back():
    put = ops.PutItem("m", 1, "a", "Inbox", "s", "inline")
    big = ops.PutItem("m", 2, "b", "Inbox", "", "staged " * 100)
    drop = ops.DeleteItem("m", 3, "c")
    raw = ops.encode_record_ops([put, big, drop], staged=[1])
    assert raw[1] == {"op": "put_item", "mailbox": "m", "cn": 2, "item_id": "b",
                      "folder": "Inbox", "subject": "", "body_blob": 0}  # fmt: skip
    assert raw[0] == ops.encode(put) and "body" in raw[0]
    assert ops.decode_record_ops(raw, [big.body]) == (put, big, drop)


PUT = {"op": "put_item", "mailbox": "m", "cn": 1, "item_id": "a", "folder": "Inbox"}
DELETE = {"op": "delete_item", "mailbox": "m", "cn": 1, "item_id": "a"}


@pytest.mark.parametrize(
    ("raw", "bodies", "why"),
    [
        ({"ops": 1}, [], "must be a list"),
        ([{**PUT, "body_blob": 1}], ["x"], "staged body 1 of 1"),
        ([{**PUT, "body_blob": 0}], [], "staged body 0 of 0"),
        ([{**PUT, "body_blob": True}], ["x"], "staged body True"),
        ([{**PUT, "body": "y", "body_blob": 0}], ["x"], "both"),
        ([{**DELETE, "body_blob": 0}], ["x"], "only a put"),
        ([{**PUT, "subject": 5}], [], "subject"),
    ],
)
def test_what_a_record_cannot_mean_is_refused_naming_why(raw, bodies, why):
    with pytest.raises(ops.MalformedOperation, match=why):
        ops.decode_record_ops(raw, bodies)


def test_only_a_put_has_a_body_to_stage():
    with pytest.raises(ValueError, match="not a put"):
        ops.encode_record_ops([ops.DeleteItem("m", 1, "a")], staged=[0])


@settings(
    max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(generations=history)
def test_the_database_and_the_overlay_end_with_the_same_rows(tmp_path_factory, generations):
    txns = numbered(generations)
    path = tmp_path_factory.mktemp("ops") / "db.sqlite"
    db = Database.create(path, database_signature=uuid.uuid4(), log_signature=uuid.uuid4())
    empty = Database.create(
        path.with_name("empty.sqlite"), database_signature=uuid.uuid4(), log_signature=uuid.uuid4()
    )
    try:
        db.apply(txns, waypoint=len(generations), committed=len(generations), last_log_time=None)
        overlay = LlrOverlay()
        for txn in txns:
            overlay.add(txn, empty)
        for mailbox in MAILBOXES:
            assert overlay.mailbox(mailbox) == db.mailbox(mailbox)
            for item_id in ITEM_IDS:
                assert overlay.item(mailbox, item_id) == db.item(mailbox, item_id)
            in_overlay = overlay.current_folders(empty, mailbox)
            assert [in_overlay[f] for f in sorted(in_overlay)] == db.folder_rows(mailbox)
            # the UIDs moved out of each folder (a listing since a modseq tells them)
            held = {k[1:]: v[1] for k, v in overlay.moved_out.items() if k[0] == mailbox}
            stored = db._conn.execute(
                "SELECT uidvalidity, uid, modseq FROM moved_out WHERE mailbox=?", (mailbox,)
            ).fetchall()
            assert held == {(v, u): m for v, u, m in stored}
        # the backup stamps: the header as the overlay shows it is the file's after replay
        shown, written = overlay.over_header(empty.header), db.header
        for field in BACKUP_FIELDS:
            assert getattr(shown, field) == getattr(written, field), field
    finally:
        db.close()
        empty.close()


def _live_body(db: Database, mailbox: str, item_id: str) -> str | None:
    """A live item's body as the file holds it (None: none, or a tombstone)."""
    with db.reading_apart() as conn:
        stored = message_body(conn, mailbox, item_id)
    return None if stored is None else stored[0]


BACKUP_FIELDS = [
    f"last_{kind}backup_{what}"
    for kind in ("", "full_", "incremental_")
    for what in ("generation", "time")
]


class _Stream:
    """What ActiveCopy asks of a log stream when it only serves reads."""

    last_closed_generation = 0

    def add_listener(self, listener) -> None:
        pass


@settings(
    max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(generations=history, data=st.data())
def test_reads_merging_the_overlay_over_the_file_are_the_whole_history(
    tmp_path_factory, generations, data
):
    """The active's reads (`ActiveCopy`: the file holding the first generations, the overlay
    the rest) equal a file that has every generation, mailboxes removed and made again
    included."""
    flushed = data.draw(st.integers(0, len(generations)))
    _reads_equal_the_whole_history(tmp_path_factory.mktemp("merge"), generations, flushed)


def test_a_folder_renamed_to_a_name_items_of_the_file_already_have_lists_both(tmp_path):
    """Found by the property above (CI, 2026-11-30): an item put into a folder never made
    leaves no folder row, so a rename to that name is allowed and leaves the item where it
    is. The overlay read that folder from the file under the renamed folder's old name only,
    and the item was missing from its folder's listing until the LLR flush."""
    put = {"op": "put_item", "mailbox": "bob", "item_id": "i0", "folder": "Projects"}
    generations = [
        [[{"op": "create_mailbox", "mailbox": "bob", "display_name": ""}]],
        [[{**put, "subject": "", "body": "x"}]],
        [[{"op": "rename_folder", "mailbox": "bob", "folder": "Inbox", "to": "Projects"}]],
    ]
    _reads_equal_the_whole_history(tmp_path, generations, flushed=2)


def _reads_equal_the_whole_history(
    folder: Path, generations: list[list[list[dict[str, Any]]]], flushed: int
) -> None:
    txns = numbered(generations)

    def database(name: str, through: int) -> Database:
        db = Database.create(
            folder / name, database_signature=uuid.uuid4(), log_signature=uuid.uuid4()
        )
        db.apply(
            [t for t in txns if t.generation <= through],
            waypoint=through,
            committed=through,
            last_log_time=None,
        )
        return db

    whole, part = database("whole.sqlite", len(generations)), database("part.sqlite", flushed)
    try:
        overlay = LlrOverlay()
        for txn in txns:
            if txn.generation > flushed:
                overlay.add(txn, part)
        active = ActiveCopy(
            paths=CopyPaths(folder, "part"), db=part, stream=_Stream(), overlay=overlay,
            llr_depth=2, clock=ManualClock(), close_times={},
        )  # fmt: skip
        assert active.mailboxes() == whole.mailboxes()
        for mailbox in MAILBOXES:
            assert active.mailbox(mailbox) == whole.mailbox(mailbox)
            assert active.folders(mailbox) == whole.folders(mailbox)
            assert active.folder_rows(mailbox) == whole.folder_rows(mailbox)
            assert active.folder_status(mailbox) == whole.folder_status(mailbox)
            # a large body the file holds read a part at a time (`listing.with_body`)
            listed = [r._replace(body=text_of(r.body)) for r in active.items(mailbox)]
            assert listed == whole.items(mailbox)
            # the mailbox's digest (a rename moves its items' terms)
            assert rows_digest(mailbox, active.digest_rows(mailbox)) == rows_digest(
                mailbox, whole.digest_rows(mailbox)
            )
            for folder in FOLDERS:
                # 60: below or above a folder's floor (a reservation's, `modseq_floor`)
                for since in (0, 5, 60):
                    assert active.folder_items(mailbox, folder, since) == whole.folder_items(
                        mailbox, folder, since
                    ), (folder, since)
            for item_id in ITEM_IDS:
                # no body read (its hash), the one the readers send as the file's
                held = active.item(mailbox, item_id)
                assert (held and without_body(held)) == whole.item_head(mailbox, item_id)
                assert body_of(active, mailbox, item_id) == _live_body(whole, mailbox, item_id)
            for row in whole.folder_rows(mailbox):
                for since in (0, 5):
                    assert active.moved_out(mailbox, row.uidvalidity, since) == sorted(
                        whole.moved_out(mailbox, row.uidvalidity, since)
                    ), (row.folder, since)
    finally:
        whole.close()
        part.close()
