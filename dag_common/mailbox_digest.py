"""Content digests (pure): one mechanism for a mailbox and for a whole database.

Every live row of the store contributes one 256-bit term, a SHA-256 over its
length-prefixed fields; a digest is the sum of the terms modulo 2^256 (a multiset hash, in
the manner of LtHash).  A sum does not depend on order, and it can be kept up to date row by
row: adding a row adds its term, removing one subtracts it, changing one does both.

- **A mailbox's digest** (what the mover compares between the two ends of a move, with one
  request each instead of a second copy): the sum of its live items' terms.  Equal digests
  mean the same live item ids, each in the same folder with the same subject and body.
- **A database's content digest** (what the copies of a database compare, `database.py`):
  the sum of the terms of every live item, every mailbox row and every folder.  The database
  keeps it current in the same SQLite transaction as the rows it covers; the active writes
  it, as of a generation, into the log at each roll, and each copy compares it with its own
  as of that generation; a copy also recomputes it from its rows to find a row changed
  inside a valid page, which no page check sees.

An item's body counts by its SHA-256 (`body_hash`), the other fields as they are: a database
keeps that hash in the row, so the digest moves without reading a large body back.  Every
field is length-prefixed and each kind of row is tagged, so no two different rows
hash the same byte string.  Deleted items (tombstones) contribute nothing; they still count
for `last_change_number`, the highest change number the mailbox's items have reached, which
is where a sync cursor may go on from once the digests agree.

An item's format (`dag_common.rfc822.BodyFormat`) is content too: a message and a text item
with the same body are different items.  A text item's term is what it always was (the five
fields); an item of another format has its format as a sixth field, so the two can never
hash the same byte string, and no digest of a store of text items moved.
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

from dag_common.counted_text import CountedText
from dag_common.rfc822 import BodyFormat

MODULUS = 1 << 256
TEXT = BodyFormat.TEXT  # the format whose term has no format field


def _term(*fields: str) -> int:
    """SHA-256 of the fields, each as its UTF-8 length (8 bytes) and bytes.  Fields of a
    slice or less (every field of every row but a large body, which is counted by its hash)
    are hashed as one joined string in one call: the same bytes, so the same hash, for a
    third less time than an update per piece; a longer field is encoded a slice at a time
    (`_term_by_slices`)."""
    parts = []
    for value in fields:
        if len(value) > _SLICE:
            return _term_by_slices(fields)
        data = value.encode("utf-8", "surrogatepass")
        parts.append(len(data).to_bytes(8, "big"))
        parts.append(data)
    return int.from_bytes(_sha256(b"".join(parts)).digest(), "big")


def _term_by_slices(fields: tuple[str, ...]) -> int:
    """`_term` for fields that may be long: an item body of 36 MiB costs 1 MiB here, not
    twice its size (code points are encoded one by one, so the slices add up to the whole)."""
    h = _sha256()
    for value in fields:
        h.update(utf8_size(value).to_bytes(8, "big"))
        for i in range(0, len(value), _SLICE):
            h.update(value[i : i + _SLICE].encode("utf-8", "surrogatepass"))
    return int.from_bytes(h.digest(), "big")


def utf8_size(text: str) -> int:
    """The UTF-8 length of `text`, without a whole copy of it (none when it is ASCII, none
    at all when it was counted: `counted_text`)."""
    if type(text) is CountedText:
        return text.utf8_size
    if text.isascii():
        return len(text)
    return sum(
        len(text[i : i + _SLICE].encode("utf-8", "surrogatepass"))
        for i in range(0, len(text), _SLICE)
    )


_sha256 = hashlib.sha256
_SLICE = 1 << 20


def item_term(
    mailbox: str, item_id: str, folder: str, subject: str, body: str, fmt: str = TEXT
) -> int:
    """The term of one live item (`fmt`: its body's format, `rfc822.BodyFormat`)."""
    return item_term_of_hash(mailbox, item_id, folder, subject, body_hash(body), fmt)


def item_term_of_hash(
    mailbox: str, item_id: str, folder: str, subject: str, body: str, fmt: str = TEXT
) -> int:
    """The term of one live item whose body is given by its `body_hash`: a database keeps
    that hash beside the body, so its digest never reads a 36 MiB body back out of SQLite
    (twice its size again, per write).  `_term` spelled out for the five fields (the
    database hashes one per item it writes): the same bytes.  An item whose format is not
    text has it as a sixth field (the module says why)."""
    if fmt != TEXT:
        return _term("item", mailbox, item_id, folder, subject, body, fmt)
    if len(subject) > _SLICE or len(body) > _SLICE:
        return _term("item", mailbox, item_id, folder, subject, body)
    m, i = mailbox.encode("utf-8", "surrogatepass"), item_id.encode("utf-8", "surrogatepass")
    f, s = folder.encode("utf-8", "surrogatepass"), subject.encode("utf-8", "surrogatepass")
    b = body.encode("utf-8", "surrogatepass")
    data = b"".join(
        (_ITEM, _u64(len(m)), m, _u64(len(i)), i, _u64(len(f)), f, _u64(len(s)), s, _u64(len(b)), b)
    )
    return int.from_bytes(_sha256(data).digest(), "big")


_u64 = struct.Struct(">Q").pack
_ITEM = _u64(4) + b"item"


def text_terms(mailbox: str, folder: str) -> Callable[[str, str, str], int]:
    """`item_term_of_hash` of text items of one folder, as a function of an item's id,
    subject and body hash: the same bytes hashed, the mailbox's and the folder's
    length-prefixed fields encoded once for all of them (a replay's transaction puts
    hundreds of items into one folder: a quarter of each term's time, bench/README.md, issue
    51's replay against the base)."""
    m, f = mailbox.encode("utf-8", "surrogatepass"), folder.encode("utf-8", "surrogatepass")
    if len(mailbox) > _SLICE or len(folder) > _SLICE:
        return lambda item_id, subject, body: item_term_of_hash(
            mailbox, item_id, folder, subject, body
        )
    head, middle, join = _ITEM + _u64(len(m)) + m, _u64(len(f)) + f, b"".join

    def term(item_id: str, subject: str, body: str) -> int:
        if len(subject) > _SLICE or len(body) > _SLICE:
            return item_term_of_hash(mailbox, item_id, folder, subject, body)
        i, s = item_id.encode("utf-8", "surrogatepass"), subject.encode("utf-8", "surrogatepass")
        b = body.encode("utf-8", "surrogatepass")
        data = join((head, _u64(len(i)), i, middle, _u64(len(s)), s, _u64(len(b)), b))
        return int.from_bytes(_sha256(data).digest(), "big")

    return term


def body_hash(body: str) -> str:
    """SHA-256 (hex) of a body's UTF-8 bytes, a slice at a time (a body of a slice or less
    in one call: the same bytes); a counted body's, as it was counted (`counted_text`)."""
    if type(body) is CountedText:
        return body.sha256
    if len(body) <= _SLICE:
        return _sha256(body.encode("utf-8", "surrogatepass")).hexdigest()
    h = _sha256()
    for i in range(0, len(body), _SLICE):
        h.update(body[i : i + _SLICE].encode("utf-8", "surrogatepass"))
    return h.hexdigest()


def mailbox_term(mailbox: str, display_name: str, locked: int, soft_deleted: int) -> int:
    """The term of one mailbox row (its flags included: a lock or a soft delete is content)."""
    return _term("mailbox", mailbox, display_name, str(int(locked)), str(int(soft_deleted)))


def folder_term(mailbox: str, folder: str) -> int:
    """The term of one folder."""
    return _term("folder", mailbox, folder)


def to_hex(digest: int) -> str:
    return f"{digest % MODULUS:064x}"


@dataclass(frozen=True, slots=True)
class MailboxDigest:
    """What a copy holds of one mailbox, in three numbers."""

    item_count: int
    digest: str
    last_change_number: int

    def matches(self, other: MailboxDigest) -> bool:
        """The same live items (ids, folders, contents); change numbers are not compared."""
        return (self.item_count, self.digest) == (other.item_count, other.digest)


class DigestRow(NamedTuple):
    """One item or tombstone as its mailbox's digest counts it: the body by the hash a
    database keeps (`body_hash`), or the body itself, hashed when counted."""

    item_id: str
    folder: str
    subject: str
    deleted: bool
    change_number: int
    body_hash: str = ""
    body: str = ""
    format: str = TEXT  # rfc822.BodyFormat's value


def rows_digest(mailbox: str, rows: Iterable[DigestRow]) -> MailboxDigest:
    """The digest of the items of `mailbox` (tombstones included: they count only for the
    last change number)."""
    total, count, last = 0, 0, 0
    for row in rows:
        last = max(last, row.change_number)
        if not row.deleted:
            count += 1
            hashed = row.body_hash or body_hash(row.body)
            total += item_term_of_hash(
                mailbox, row.item_id, row.folder, row.subject, hashed, row.format
            )
    return MailboxDigest(item_count=count, digest=to_hex(total), last_change_number=last)


def mailbox_digest(mailbox: str, items: Iterable[Mapping[str, Any]]) -> MailboxDigest:
    """`rows_digest` of items as JSON objects (rows with item_id, folder, subject, deleted,
    change_number, and either `body_hash` or the `body` itself, and `format` unless it is
    text; tombstones included)."""
    return rows_digest(
        mailbox,
        (
            DigestRow(
                item["item_id"],
                item["folder"],
                item["subject"],
                bool(item["deleted"]),
                int(item["change_number"]),
                item.get("body_hash") or "",
                item.get("body") or "",
                item.get("format") or TEXT,
            )
            for item in items
        ),
    )
