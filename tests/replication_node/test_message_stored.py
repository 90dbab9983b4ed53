"""The batch read's bytes of a stored message (`file_reads.message_stored`): a message kept
as UTF-8 comes as bytes straight from SQLite, from `body` and from `bodies` (a large body,
kept apart), the same bytes `rfc822.message_bytes` makes of its text; a
Latin-1 message and a text item come as their text, read as before."""

from __future__ import annotations

from dag_common.rfc822 import BodyFormat, message_bytes
from replication_node.log import operations as ops
from replication_node.storage.file_reads import message_body, message_stored
from tests.replication_node.test_body_in_place import LARGE, apply, fresh, from_log, stored

MESSAGE = "Subject: caf\xe9 \U0001f600\r\n\r\nJ\xf6rg's m\xfcsli\r\n"


def test_a_utf8_message_comes_as_sqlites_bytes_from_either_column(tmp_path) -> None:
    db = fresh(tmp_path / "db.sqlite")
    utf8, latin = BodyFormat.MESSAGE, BodyFormat.MESSAGE_8BIT
    apply(db, 1, ops.CreateMailbox("m", 1),
          ops.PutItem("m", 2, "big", "Inbox", "", "Subject: x\r\n\r\n" + LARGE, format=utf8),
          ops.PutItem("m", 3, "small", "Inbox", "", MESSAGE, format=utf8),
          ops.PutItem("m", 4, "latin", "Inbox", "", MESSAGE[:20], format=latin),
          ops.PutItem("m", 5, "text", "Inbox", "Hi", "x\n"),
          ops.PutItem("m", 6, "logged", "Inbox", "", from_log(MESSAGE * 40_000), format=utf8),
          ops.DeleteItem("m", 7, "text", 4))  # fmt: skip
    assert stored(db.path) == {"big": "apart", "small": "row", "latin": "row", "text": "row",
                               "logged": "apart"}  # fmt: skip
    with db.reading_apart() as conn:
        for item in ("big", "small", "logged"):
            got = message_stored(conn, "m", item)
            body, fmt, subject = message_body(conn, "m", item)
            assert got is not None and type(got[0]) is bytes, item
            assert got[0] == message_bytes(body, fmt, subject), item
            assert got[1:] == (fmt, subject)
        assert message_stored(conn, "m", "latin") == message_body(conn, "m", "latin")
        assert type(message_stored(conn, "m", "latin")[0]) is str
        assert message_stored(conn, "m", "text") is None
        assert message_stored(conn, "m", "nope") is None
    db.close()
