"""An item's format (issue 49: a message kept byte for byte, `dag_common.rfc822`) through the
log's records, the database file and the digests, in process over real SQLite files: a text
item's record and digest are what they always were, a message's say its format, a record
with a format this node does not know is malformed, and a file from before formats opens
with its items and its digest."""

from __future__ import annotations

import shutil
import sqlite3
import uuid

import orjson
import pytest

from dag_common.mailbox_digest import mailbox_digest
from dag_common.model import Position
from dag_common.rfc822 import BodyFormat, message_bytes, message_sha256
from dag_common.store_api import Item, ItemIn
from replication_node.log import operations as ops
from replication_node.log.events import Transaction
from replication_node.storage.database import Database
from tests.replication_node.strategies import T0

MESSAGE = "Subject: hello\r\n\r\nhi\r\n"


def test_a_text_items_record_is_what_it_always_was_and_a_messages_says_its_format():
    text = ops.PutItem("m", 1, "a", "Inbox", "s", "b")
    assert ops.encode(text) == {
        "op": "put_item", "mailbox": "m", "cn": 1, "item_id": "a", "folder": "Inbox",
        "subject": "s", "body": "b",
    }  # fmt: skip
    message = ops.PutItem("m", 2, "b", "Inbox", "hello", MESSAGE, BodyFormat.MESSAGE_8BIT)
    raw = ops.encode(message)
    assert raw["format"] == "message-8bit"
    assert ops.decode(raw) == message
    payload = orjson.dumps({"ops": ops.encode_record_ops([text, message], staged=[1])})
    decoded = ops.decode_record_ops(orjson.loads(payload)["ops"], [MESSAGE])
    assert decoded == (text, message)


@pytest.mark.parametrize("fmt", ["mbox", "", "TEXT", 1, None])
def test_a_record_with_a_format_this_node_does_not_know_is_malformed_never_text(fmt):
    raw = {**ops.encode(ops.PutItem("m", 1, "a", "Inbox", "s", "b")), "format": fmt}
    with pytest.raises(ops.MalformedOperation, match="format"):
        ops.decode(raw)
    with pytest.raises(ops.MalformedOperation, match="format"):
        ops.decode_payload(orjson.dumps({"ops": [raw]}))


def _items(fmt: str | None) -> list[dict[str, object]]:
    first = {"item_id": "a", "folder": "Inbox", "subject": "hello", "body": MESSAGE}
    if fmt is not None:
        first["format"] = fmt
    big = {"item_id": "b", "folder": "Inbox", "subject": "x", "body": "y" * (1 << 21)}
    return [{**first, "deleted": False, "change_number": 3}, {**big, "deleted": False,
            "change_number": 4}]  # fmt: skip


def test_text_items_digest_as_before_and_a_message_not_as_the_same_text():
    # taken from main before formats existed (issue 49): a text item's term did not move
    before = "5726eabc8c186d1eedda8938b8b3f282b0679c1a0d3ecb44c92b2d59d0b801d2"
    assert mailbox_digest("alice", _items(None)).digest == before
    assert mailbox_digest("alice", _items("text")).digest == before
    as_message = mailbox_digest("alice", _items("message")).digest
    as_8bit = mailbox_digest("alice", _items("message-8bit")).digest
    assert len({before, as_message, as_8bit}) == 3
    # the mover's items count the same terms, and compare the format as content
    text = Item("a", "Inbox", "hello", MESSAGE, 3)
    message = Item("a", "Inbox", "hello", MESSAGE, 3, format=BodyFormat.MESSAGE)
    assert text.content() != message.content()
    assert text.term("alice") != message.term("alice")


def test_a_written_message_takes_its_subject_from_its_headers():
    raw = (
        b"From: =?utf-8?q?J=C3=B6rg?= <j@example.org>\r\n"
        b"Subject: =?iso-8859-1?q?Gr=FC=DFe?=\r\n  aus Bonn\r\n\r\nHallo\r\n"
    )
    item = ItemIn.model_validate({"format": "message", "body": raw.decode()})
    assert item.subject == "Grüße aus Bonn"
    assert ItemIn.model_validate({"format": "message", "subject": "Grüße aus Bonn",
                                  "body": raw.decode()}).subject == "Grüße aus Bonn"  # fmt: skip
    with pytest.raises(ValueError, match="not the message's"):
        ItemIn.model_validate({"format": "message", "subject": "Hi", "body": raw.decode()})
    with pytest.raises(ValueError, match="Latin-1"):
        ItemIn.model_validate({"format": "message-8bit", "body": "Subject: x\r\n\r\n\u20ac"})
    with pytest.raises(ValueError, match="format"):
        ItemIn.model_validate({"format": "mbox", "body": "x"})


def test_a_message_is_hashed_and_sized_a_slice_at_a_time_as_it_is_whole():
    from dag_common import rfc822

    body = ("é" * 3 + "x") * (rfc822.SLICE // 2)
    for fmt in (BodyFormat.MESSAGE, BodyFormat.MESSAGE_8BIT):
        whole = message_bytes(body, fmt)
        assert b"".join(rfc822.message_slices(body, fmt)) == whole
        assert rfc822.message_size(body, fmt) == len(whole)
        assert message_sha256(body, fmt) == __import__("hashlib").sha256(whole).hexdigest()


def fresh(path):
    return Database.create(
        path, database_signature=uuid.UUID(int=1), log_signature=uuid.UUID(int=2)
    )


def test_a_file_from_before_formats_opens_with_its_items_and_digest_alike_on_every_copy(
    tmp_path,
):
    """A database file whose items have no format column (and one from before body_hash as
    well): each copy of it gets the column on open, the same schema, the same items, as text,
    the same digest; writes after keep the digest equal to the rows."""
    path = tmp_path / "old.sqlite"
    db = fresh(path)
    txn = Transaction(Position(1, 512), T0, (ops.CreateMailbox("m", 1),
                                   ops.PutItem("m", 2, "a", "Inbox", "s", "x" * 5000)))  # fmt: skip
    db.apply([txn], waypoint=1, committed=1, last_log_time=T0)
    digest = db.content_digest
    db.close()
    conn = sqlite3.connect(path)
    conn.execute("DROP TABLE bodies")  # after formats, too
    conn.execute("PRAGMA user_version = 0")
    conn.execute("ALTER TABLE items DROP COLUMN format")
    conn.commit()
    conn.close()
    older = tmp_path / "older.sqlite"
    shutil.copy(path, older)
    conn = sqlite3.connect(older)
    conn.execute("ALTER TABLE items DROP COLUMN body_hash")
    conn.commit()
    conn.close()
    copies = [path]
    for n in (1, 2):
        copies.append(tmp_path / f"copy{n}.sqlite")
        shutil.copy(path, copies[-1])
    schemas = set()
    for file in [*copies, older]:
        db = Database.open(file)
        assert db.content_digest == digest, file
        assert db.recompute_digest() == (digest, digest), file
        (row,) = db.items("m")
        assert (row.item_id, row.body, row.format) == ("a", "x" * 5000, BodyFormat.TEXT)
        put = ops.PutItem("m", 3, "b", "Inbox", "hello", MESSAGE, BodyFormat.MESSAGE)
        db.apply(
            [Transaction(Position(2, 512), T0, (put,))], waypoint=2, committed=2, last_log_time=T0
        )
        assert db.item("m", "b").format is BodyFormat.MESSAGE
        stored, rows = db.recompute_digest()
        assert stored == rows == db.content_digest != digest
        db.close()
        conn = sqlite3.connect(file)
        if file != older:
            schemas.add(conn.execute("SELECT sql FROM sqlite_master WHERE name='items'").fetchone())
        conn.close()
    assert len(schemas) == 1
