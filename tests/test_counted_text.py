"""`counted_text`: a body counted and hashed once where it came in, and never again.

The stages that count or hash a body (`utf8_size`, `body_hash`, the HTTP edge's size check)
take what was counted: shown by a CountedText whose counts are deliberately not its own
(made by hand here; the module never makes one), which those stages then report as they
are, where an encoding of the text would have found the truth.  A raw message's bytes are
the very bytes the staging is given (the same object), taken once."""

from __future__ import annotations

import hashlib

import pytest

from dag_common import http_body, mailbox_digest
from dag_common.counted_text import (
    CountedText,
    counted,
    from_utf8,
    is_bytes_only,
    known,
    text_of,
)
from dag_common.rfc822 import BodyFormat, counted_message, counted_message_bytes, message_bytes

TEXTS = [
    "",
    "plain ascii\r\n",
    "Grüße — 测试 \U0001f600",
    "Café crème" * 50_000,  # past a slice of 1 MiB in UTF-8
    "a" * (1 << 20) + "é",  # the slice's edge
]


@pytest.mark.parametrize("text", TEXTS)
@pytest.mark.parametrize("keep", [False, True])
def test_the_counts_are_the_texts(text: str, keep: bool) -> None:
    utf8 = text.encode("utf-8")
    got = counted(text, keep_utf8=keep)
    assert got == text and type(got) is CountedText
    assert (got.utf8_size, got.sha256) == (len(utf8), hashlib.sha256(utf8).hexdigest())
    assert mailbox_digest.utf8_size(got) == mailbox_digest.utf8_size(text)
    assert mailbox_digest.body_hash(got) == mailbox_digest.body_hash(text)
    held = got.take_utf8()
    assert held == (utf8 if keep and not text.isascii() else None)
    assert got.take_utf8() is None  # taken once
    assert counted(got) is got


@pytest.mark.parametrize(
    ("raw", "fmt"),
    [
        (b"Subject: x\r\n\r\nhello\r\n", BodyFormat.MESSAGE),
        ("Subject: Grüße\r\n\r\n测试\r\n".encode(), BodyFormat.MESSAGE),
        (b"Subject: Caf\xe9\r\n\r\ncr\xe8me\r\n", BodyFormat.MESSAGE_8BIT),
    ],
)
def test_a_message_is_kept_and_its_utf8_bytes_are_the_uploads(raw: bytes, fmt: BodyFormat):
    upload = bytearray(raw)  # as the HTTP edge reads it
    body, got_fmt, sha = counted_message(upload)
    assert got_fmt is fmt and sha == hashlib.sha256(raw).hexdigest()
    assert message_bytes(body, fmt) == raw
    assert body.sha256 == mailbox_digest.body_hash(str(body))
    staged = body.take_utf8()
    if fmt is BodyFormat.MESSAGE:
        assert staged is upload  # the upload's own bytes, not a copy, not encoded again
    else:
        assert staged == str(body).encode("utf-8")


def test_the_stages_take_the_counts_and_do_not_count_again() -> None:
    text = "Grüße " * 1000
    forged = CountedText(text)
    forged.utf8_size, forged.sha256, forged._utf8 = 7, "not-a-hash", None
    assert mailbox_digest.utf8_size(forged) == 7
    assert mailbox_digest.body_hash(forged) == "not-a-hash"
    assert http_body.utf8_size(forged) == 7
    # a plain str of the same text is counted as ever
    assert mailbox_digest.utf8_size(str(forged)) == len(text.encode())


def test_from_utf8_refuses_bytes_that_are_not() -> None:
    with pytest.raises(UnicodeDecodeError):
        from_utf8(b"caf\xe9")


def test_known_keeps_the_counts_it_is_given_and_the_bytes_until_taken():
    raw = "caf\xe9".encode()
    body = known(raw.decode(), utf8_size=len(raw), sha256="ab" * 32, utf8=raw)
    assert body == "caf\xe9" and body.utf8_size == 5 and body.sha256 == "ab" * 32
    assert body.take_utf8() is raw and body.take_utf8() is None


MESSAGES = [
    b"Subject: plain\r\n\r\nascii body\r\n",
    "Subject: Grüße\r\n\r\n测试 \U0001f600\r\n".encode() * 60_000,  # slices split characters
    b"Subject: caf\xe9\r\n\r\n" + b"cr\xe8me \xff\r\n" * 200_000,  # 8-bit: not UTF-8
    b"Subject: x\r\n\r\n" + b"a" * ((1 << 20) - 15) + "é".encode(),  # é across the slice
    b"Subject: x\r\n\r\n" + b"a" * ((1 << 20) - 15) + b"\xc3",  # cut mid-character
    b"Subject: x\r\n\r\n" + b"a" * ((1 << 16) - 15) + "é".encode() + b"b",  # the check's slice
    b"Subject: x\r\n\r\n" + b"a" * ((1 << 16) - 15) + b"\xc3b",  # bad across the check's
]


@pytest.mark.parametrize("raw", MESSAGES)
def test_a_message_carried_as_its_bytes_counts_as_the_text_would(raw: bytes) -> None:
    body, fmt, sha256 = counted_message_bytes(bytearray(raw))
    text, text_fmt, text_sha256 = counted_message(bytearray(raw))
    assert is_bytes_only(body) and body == ""
    assert (fmt, sha256, body.utf8_size, body.sha256) == (
        text_fmt, text_sha256, text.utf8_size, text.sha256,
    )  # fmt: skip
    assert mailbox_digest.body_hash(body) == mailbox_digest.body_hash(str(text))
    decoded = text_of(body)
    assert decoded == text and message_bytes(decoded, fmt) == raw
