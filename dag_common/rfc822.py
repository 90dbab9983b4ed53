"""An RFC 5322 message as an item's body, kept byte for byte (issue 49).

An item is a subject and a text body (`BodyFormat.TEXT`, the node API's items as they always
were) or a message as it came by SMTP or LMTP, headers, MIME parts and 8-bit bytes included.
The store carries every body as text (the log's records, the database's rows, the JSON of
the API, the mover's pages), so a message is carried as text that gives back its bytes:

- `MESSAGE`: the message is valid UTF-8 (7-bit mail, SMTPUTF8, 8BITMIME in UTF-8: nearly
  all of it), and the body is that text.  `body.encode("utf-8")` is the message, so the log,
  the database and the wire hold exactly its bytes, and a body's SHA-256 is the message's.
- `MESSAGE_8BIT`: the message has bytes that are not UTF-8 (a Latin-1 or GB2312 8BITMIME
  body, a forged header): the body is the bytes read as Latin-1, one character a byte,
  which gives them back exactly (`body.encode("latin-1")`).  Such a body counts its bytes
  past 0x7f twice in UTF-8 (the size a node counts against max_item_size).

Why text and not bytes: every path of the store (the log writer, replay, the LLR overlay,
the listing, the digest, the mover, the transport's queue and dumpster) carries a text body
already and is tested at its faults; a format beside it changes none of them, where a second
kind of body would change all of them.

Where a raw message is needed of a TEXT item (an IMAP FETCH), `message_bytes` presents it as
a text/plain message with its subject.

Pure: no I/O.
"""

from __future__ import annotations

import email.policy
import hashlib
import re
from collections.abc import Iterator
from email.parser import BytesHeaderParser
from enum import StrEnum

from dag_common.counted_text import CountedText, bytes_only, counted, from_utf8, is_utf8

# What a node keeps of a subject (`api_types.Text` has no bound; a header may be long).
MAX_SUBJECT = 998
# Characters of a message's body encoded at a time (`message_slices`).
SLICE = 1 << 20


class BodyFormat(StrEnum):
    """What an item's body is (the `format` field of an item on the wire and in the log;
    absent means TEXT)."""

    TEXT = "text"  # a text body beside a subject
    MESSAGE = "message"  # an RFC 5322 message: its bytes are the body in UTF-8
    MESSAGE_8BIT = "message-8bit"  # an RFC 5322 message: its bytes are the body in Latin-1

    @property
    def is_message(self) -> bool:
        return self is not BodyFormat.TEXT


def body_of_message(raw: bytes) -> tuple[str, BodyFormat]:
    """The body and format that keep the message `raw` byte for byte."""
    try:
        return raw.decode("utf-8"), BodyFormat.MESSAGE
    except UnicodeDecodeError:
        return raw.decode("latin-1"), BodyFormat.MESSAGE_8BIT


# A message's first line: a header field's name and its colon (RFC 5322 ftext), blanks allowed
# before the colon as the obsolete syntax has them.
_FIRST_FIELD = re.compile(rb"[\x21-\x39\x3b-\x7e]+[ \t]*:")


def is_message(raw: bytes | bytearray) -> bool:
    """Whether `raw` can be an RFC 5322 message: it begins with a header field (a file of
    other bytes, an empty body, an mbox `From ` line or a body without headers cannot)."""
    return _FIRST_FIELD.match(raw, 0, 1000) is not None


def counted_message(raw: bytes | bytearray) -> tuple[CountedText, BodyFormat, str]:
    """The body (counted once: `counted_text`), format and message SHA-256 (hex) that keep
    the message `raw` byte for byte.  A UTF-8 message is decoded once and counted and hashed
    from its own bytes, which the body keeps to be staged as they are; an 8-bit one is
    decoded as Latin-1, encoded to UTF-8 once (what the log holds of it) and hashed twice
    (the message's bytes; the body's UTF-8, which the digest counts)."""
    try:
        body = from_utf8(raw)
    except UnicodeDecodeError:
        body = counted(raw.decode("latin-1"), keep_utf8=True)
        return body, BodyFormat.MESSAGE_8BIT, hashlib.sha256(raw).hexdigest()
    return body, BodyFormat.MESSAGE, body.sha256


def counted_message_bytes(raw: bytearray) -> tuple[CountedText, BodyFormat, str]:
    """As `counted_message`, with the body carried as its UTF-8 bytes alone
    (`counted_text.bytes_only`): no text of the message is made (a large message is staged
    into the log as it came, issue 52).  A UTF-8 message is checked a slice at a time and
    its bytes are the body's, as they are; an 8-bit one's Latin-1 text is encoded to UTF-8
    a slice at a time (each character alone: the same bytes as the whole)."""
    sha256 = hashlib.sha256(raw).hexdigest()
    if is_utf8(raw):
        return bytes_only(raw, sha256), BodyFormat.MESSAGE, sha256
    utf8 = bytearray()
    view = memoryview(raw)
    for start in range(0, len(raw), SLICE):
        utf8 += str(view[start : start + SLICE], "latin-1").encode("utf-8")
    view.release()
    return bytes_only(utf8, hashlib.sha256(utf8).hexdigest()), BodyFormat.MESSAGE_8BIT, sha256


def message_bytes(body: str, fmt: BodyFormat, subject: str = "") -> bytes:
    """The message an item's body is: the stored bytes of a message, or a TEXT item presented
    as a text/plain message in UTF-8 with its subject."""
    if fmt is BodyFormat.MESSAGE:
        return body.encode("utf-8")
    if fmt is BodyFormat.MESSAGE_8BIT:
        return body.encode("latin-1")
    from email.message import EmailMessage  # only where a text item is presented as mail

    message = EmailMessage(policy=email.policy.SMTP)
    message["Subject"] = subject
    message.set_content(body)
    return message.as_bytes()


def message_sha256(body: str, fmt: BodyFormat) -> str:
    """The SHA-256 (hex) of the message an item of `fmt` holds: the same on the active,
    every passive and a move's target when the bytes are.  A message is hashed a slice at
    a time (`message_slices`): no second copy of a large one."""
    if not fmt.is_message:
        return hashlib.sha256(message_bytes(body, fmt)).hexdigest()
    h = hashlib.sha256()
    for part in message_slices(body, fmt):
        h.update(part)
    return h.hexdigest()


def _codec(fmt: BodyFormat) -> str:
    if fmt is BodyFormat.MESSAGE:
        return "utf-8"
    if fmt is BodyFormat.MESSAGE_8BIT:
        return "latin-1"
    raise ValueError(f"a {fmt.value} body is not a message's bytes")


def message_slices(body: str, fmt: BodyFormat) -> Iterator[bytes]:
    """The bytes of a message item (not TEXT: ValueError), SLICE characters at a time: the
    same bytes as `message_bytes`, as both codecs encode each character alone."""
    codec = _codec(fmt)
    for start in range(0, len(body), SLICE):
        yield body[start : start + SLICE].encode(codec)


def message_size(body: str, fmt: BodyFormat) -> int:
    """How many bytes the message of a message item (not TEXT: ValueError) is, without
    encoding it whole."""
    if _codec(fmt) == "latin-1":
        return len(body)
    if body.isascii():
        return len(body)
    return sum(len(part) for part in message_slices(body, fmt))


def header_block(raw: bytes) -> bytes:
    """The message's header section (up to the first empty line): what the fields are read
    from, never the whole of a large message."""
    for end in (b"\r\n\r\n", b"\n\n"):
        at = raw.find(end)
        if at >= 0:
            return raw[: at + len(end)]
    return raw


# A message's bytes: whole, or in pieces that are never joined (a DATA's, as they were read
# and checked: a large message is not copied whole once more to be written).
Raw = bytes | bytearray | tuple[bytes, ...]


def message_pieces(raw: Raw) -> tuple[bytes | bytearray, ...]:
    """The message `raw`'s bytes as pieces, in order (a message whole: one)."""
    return (raw,) if isinstance(raw, bytes | bytearray) else raw


def message_head(raw: Raw) -> bytes | bytearray:
    """What the header fields of the message `raw` are read from: the message whole, or the
    first of its pieces through the end of its header section (CRLF CRLF), so that
    `header_block` reads the same of it.  The first piece itself when the end is in it
    (nearly always: no copy), else the pieces joined up to the one it is in (all of them if
    it has none).  A message in pieces is a DATA's, whose lines all end in CRLF (a bare LF
    is refused): it has no LF LF before its CRLF CRLF."""
    if isinstance(raw, bytes | bytearray):
        return raw
    head = b""
    for piece in raw:
        seen = len(head)
        head += piece
        if head.find(b"\r\n\r\n", max(0, seen - 3)) >= 0:
            break
    return head


def subject_of(raw: bytes) -> str:
    """The message's Subject, decoded (RFC 2047 encoded words, UTF-8 headers), unfolded and
    cut to MAX_SUBJECT characters; "" when it has none.  A header the parser cannot decode
    is kept as it reads (the standard library's `policy.default` never raises on one)."""
    block = header_block(raw)
    value = plain_header(block, b"subject")
    if value is ABSENT:
        return ""
    if value is not None and b"=?" not in value:  # nothing to decode: as the parser reads it
        return " ".join(value.decode("ascii").split())[:MAX_SUBJECT]
    headers = BytesHeaderParser(policy=email.policy.default).parsebytes(block)
    try:
        subject = headers.get("Subject")
    except (ValueError, TypeError, IndexError):  # a header too broken to be read as one
        subject = None
    if subject is None:
        return ""
    text = " ".join(str(subject).split())
    return text[:MAX_SUBJECT]


# `plain_header`'s answer for a plain header section without the field.
ABSENT = b"\0absent"
_FIELD_NAME = re.compile(rb"[\x21-\x39\x3b-\x7e]+")  # RFC 5322 ftext
_PLAIN_VALUE = re.compile(rb"[\x20-\x7e\t]*")


def plain_header(block: bytes, name: bytes) -> bytes | None:
    """The first field `name` (lower case) of a plain header section, unfolded as the
    `email` package reads it (the value after the colon, its leading blanks and every CR
    and LF gone), ABSENT if it has none; None when the section is not plain and only the
    `email` package can tell: not ASCII, not CRLF lines of `name: value` and their
    continuations, or a value with a control character.  What the listeners and the node
    read of nearly every message, without the parser's cost (0.3 ms a Subject)."""
    if not block.isascii():
        return None
    crlf = block.count(b"\r\n")
    if block.count(b"\r") != crlf or block.count(b"\n") != crlf:
        return None
    if block.startswith((b"From ", b" ", b"\t")):  # an mbox line; a continuation of nothing
        return None
    value: list[bytes] | None = None
    taking = False  # the lines read are the field's
    for line in block.split(b"\r\n"):
        if not line:
            break  # the end of the section
        if line[:1] in (b" ", b"\t"):  # a continuation of the field before
            if taking:
                value.append(line)  # type: ignore[union-attr]
            continue
        field, colon, rest = line.partition(b":")
        if not colon or not _FIELD_NAME.fullmatch(field):
            return None
        taking = value is None and field.lower() == name
        if taking:
            value = [rest.lstrip(b" \t")]
    if value is None:
        return ABSENT
    text = b"".join(value)
    return text if _PLAIN_VALUE.fullmatch(text) else None


def subject_of_body(body: str, fmt: BodyFormat) -> str:
    """The subject a message item carries, derived from its body as `subject_of` does."""
    if not fmt.is_message:
        return ""
    for end in ("\r\n\r\n", "\n\n"):  # the header section alone is encoded, not the body
        at = body.find(end)
        if at >= 0:
            body = body[: at + len(end)]
            break
    return subject_of(message_bytes(body, fmt))
