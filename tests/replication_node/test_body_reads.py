"""A body in `items.body_blob` read a part at a time (`storage/body_reads.py`, issue 52): the
bytes written, whatever falls on a part's edge, and never two versions of a row mixed.  In
process, over real SQLite files."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from dag_common.rfc822 import BodyFormat
from replication_node.errors import BodyChanged
from replication_node.log import operations as ops
from replication_node.storage import body_reads
from replication_node.storage.body_reads import (
    blob_head,
    message_parts,
    parts,
    parts_apart,
    text_parts,
)
from tests.replication_node.test_body_in_place import apply, fresh, from_log

MIB = 1 << 20
# 3 MB of UTF-8 of 1 to 4 bytes a character, an emoji across each 1 MiB edge.
TEXT = "abcde" + "caf\xe9 \u20ac \U0001f600 " * 200_000


def split(data: bytes, size: int) -> list[bytes]:
    return [data[i : i + size] for i in range(0, len(data), size)]


@pytest.mark.parametrize("size", [1, 2, 3, 5, 7, 4096])
def test_text_and_8bit_messages_come_whole_across_every_edge(size: int) -> None:
    text = TEXT[:3000]
    assert "".join(text_parts(split(text.encode(), size))) == text
    raw = bytes(range(256)) * 8  # an 8-bit message, kept as its Latin-1 text
    utf8 = raw.decode("latin-1").encode()
    assert b"".join(message_parts(split(utf8, size), BodyFormat.MESSAGE_8BIT)) == raw
    assert b"".join(message_parts(split(utf8, size), BodyFormat.MESSAGE)) == utf8
    with pytest.raises(ValueError):
        list(message_parts([utf8], BodyFormat.TEXT))


def test_a_body_in_its_blob_reads_back_exactly_and_one_in_body_is_not_read_so(
    tmp_path: Path,
) -> None:
    db = fresh(tmp_path / "db.sqlite")
    big = ops.PutItem("m", 2, "big", "Inbox", "s", from_log(TEXT))
    apply(db, 1, ops.CreateMailbox("m", 1), big, ops.PutItem("m", 3, "small", "Inbox", "t", "x"))
    with db.reading_apart() as conn:
        head = blob_head(conn, "m", "big")
        assert head is not None and head.size == len(TEXT.encode()) > 2 * MIB
        assert head.body_hash == hashlib.sha256(TEXT.encode()).hexdigest()
        assert blob_head(conn, "m", "small") is None  # in `body`: read whole, as before
        assert blob_head(conn, "m", "nope") is None
        assert TEXT.encode()[MIB - 1 : MIB + 3] == "\U0001f600".encode()  # across the edge
        assert b"".join(parts(conn, head)) == TEXT.encode()
    assert "".join(text_parts(parts_apart(db, head))) == TEXT
    db.close()


@pytest.mark.parametrize("change", ["put again", "put the same size", "expunge"])
def test_a_row_replaced_between_two_parts_is_never_mixed_into_the_read(
    tmp_path: Path, change: str
) -> None:
    db = fresh(tmp_path / "db.sqlite")
    apply(
        db, 1, ops.CreateMailbox("m", 1), ops.PutItem("m", 2, "big", "Inbox", "s", from_log(TEXT))
    )
    with db.reading_apart() as conn:
        head = blob_head(conn, "m", "big")
    assert head is not None
    other = TEXT.replace("caf", "tea")  # the same size, other bytes
    replaced = {
        "put again": ops.PutItem("m", 3, "big", "Inbox", "s", from_log(TEXT + "more")),
        "put the same size": ops.PutItem("m", 3, "big", "Inbox", "s", from_log(other)),
        "expunge": ops.DeleteItem("m", 3, "big", 2),
    }[change]
    read = parts_apart(db, head)  # each part in a read transaction of its own
    first = next(read)
    assert first == TEXT.encode()[: body_reads.PART]
    apply(db, 2, replaced)
    with pytest.raises(BodyChanged):
        next(read)
    db.close()


def test_a_read_inside_one_transaction_sees_its_snapshot_whatever_is_written_meanwhile(
    tmp_path: Path,
) -> None:
    db = fresh(tmp_path / "db.sqlite")
    apply(
        db, 1, ops.CreateMailbox("m", 1), ops.PutItem("m", 2, "big", "Inbox", "s", from_log(TEXT))
    )
    with db.reading_apart() as conn:
        head = blob_head(conn, "m", "big")
        assert head is not None
        read = parts(conn, head)
        got = [next(read)]
        apply(db, 2, ops.PutItem("m", 3, "big", "Inbox", "s", from_log(TEXT.replace("caf", "tea"))))
        got.extend(read)
    assert b"".join(got) == TEXT.encode()
    db.close()
