"""The large bodies of a write of items (`{"items": [...]}` or one item, POST …/items) taken
out of its JSON in place: each unescaped into the request's own buffer, where it was, and
carried as its UTF-8 bytes (`counted_text.bytes_only`) as a raw message's are; the rest of the
JSON, small, parsed as before.  Pure: no I/O.

Why (issue 52): a write parsed whole held an item about twice at the HTTP edge (its bytes and
their text, then the text and the parsed item), then the text and the counted text's copy of it
(a subclass of str cannot share a str's characters).  A move's writes of large items peaked its
target node past rest + 4x the item (bench/README.md, memory).  Here the request's bytes are
the only copy: JSON's escapes are never shorter than what they stand for (`\\n` is two bytes
for one, `\\u00e9` six for two, a surrogate pair twelve for four, and a character written as
itself is the same bytes), so unescaping a string from its start never overtakes what is left
to read, and the body ends in the buffer's first bytes of its span.  A slice of 1 MiB at a
time is decoded and unescaped by the standard library's own scanner (`json.decoder.scanstring`,
strict: a control character or a bad escape is refused as `json.loads` refuses it), cut
before an escape so that none is split.

Where a large body is: a string value (at least `LARGE` bytes as JSON) after the key `"body"`.
In JSON a quote not escaped is a string's start or end and every other quote is escaped
(preceded by an odd run of backslashes), so the strings are found by `find` alone.  Each such
value is replaced in the JSON that is parsed by a placeholder (a random token); the route
then puts in its place, for the item's checks, nothing (a text item's) or the body's header
section (a message's, whose subject is derived from it), and sets the parsed item's body to
the bytes.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import re
import secrets
from dataclasses import dataclass
from json.decoder import scanstring

LARGE = 64 * 1024  # a body this long as JSON, or longer, is taken out in place
SLICE = 1 << 20  # bytes of JSON unescaped at a time
_KEY = b"body"
_SEPARATOR = re.compile(rb"\s*:\s*")
# A character past U+00FF in UTF-8: its first byte (a message_8bit body holds Latin-1 only).
_PAST_LATIN_1 = re.compile(rb"[\xc4-\xf4]")


class BadBody(ValueError):
    """A large body that is not a JSON string of UTF-8 text (the message says why)."""


@dataclass(frozen=True)
class TakenBody:
    """One body taken out: its UTF-8 bytes and their SHA-256."""

    utf8: bytearray
    sha256: str


@dataclass(frozen=True)
class TakenOut:
    """A request's JSON without its large bodies (`placeholders[k]` standing for
    `bodies[k]`), to be parsed as the whole was."""

    json: bytes
    placeholders: tuple[str, ...]
    bodies: tuple[TakenBody, ...]


def _escaped(raw: bytearray, at: int, start: int) -> bool:
    """Whether the byte at `at` is escaped: preceded by an odd run of backslashes (none
    before `start`)."""
    run = 0
    while at - run - 1 >= start and raw[at - run - 1] == 0x5C:
        run += 1
    return run % 2 == 1


def string_spans(raw: bytearray) -> list[tuple[int, int]]:
    """Each JSON string's content as (start, end), its quotes excluded, in order; a string
    not closed ends at the buffer's end (the parse refuses it)."""
    spans: list[tuple[int, int]] = []
    at = raw.find(b'"')
    while at >= 0:
        end = raw.find(b'"', at + 1)
        while end >= 0 and _escaped(raw, end, at + 1):
            end = raw.find(b'"', end + 1)
        if end < 0:
            spans.append((at + 1, len(raw)))
            break
        spans.append((at + 1, end))
        at = raw.find(b'"', end + 1)
    return spans


def large_bodies(raw: bytearray) -> list[tuple[int, int]]:
    """The spans (`string_spans`) of the values of `"body"` keys at least `LARGE` long."""
    spans = string_spans(raw)
    out = []
    for (ks, ke), (vs, ve) in itertools.pairwise(spans):
        if ve - vs < LARGE or raw[ks:ke] != _KEY:
            continue
        if _SEPARATOR.fullmatch(raw, ke + 1, vs - 1):
            out.append((vs, ve))
    return out


def _cut(raw: bytearray, start: int, end: int) -> int:
    """Where a slice of the string content starting at `start` may end at or before `end`
    without splitting an escape (nor a surrogate pair's two), nor a character's UTF-8."""
    p = raw.rfind(b"\\", max(start, end - 12), end)
    if p < 0:  # nor a character written as itself: cut before its first byte
        while end > start and raw[end] & 0xC0 == 0x80:
            end -= 1
        return end
    q = p
    while q > start and raw[q - 1] == 0x5C:
        q -= 1
    c = p - (p - q) % 2  # the escape p is part of begins here
    if raw[c + 1 : c + 3].lower() == b"ud" and raw[c + 3 : c + 4].lower() in b"cdef":
        # A pair's second half: cut before its first, if that is what precedes it.
        h = c - 6
        if (
            h >= start
            and raw[h : h + 3].lower() == b"\\ud"
            and raw[h + 3 : h + 4].lower() in b"89ab"
            and not _escaped(raw, h, start)
        ):
            return h
    return c


def unescape_in_place(raw: bytearray, start: int, end: int) -> tuple[int, str]:
    """Unescape the JSON string content raw[start:end] into raw[start:], a slice at a time;
    its UTF-8 length and SHA-256.  BadBody if it is not UTF-8 or not a valid JSON string."""
    h = hashlib.sha256()
    at, out = start, start
    while at < end:
        stop = end if end - at <= SLICE else _cut(raw, at, at + SLICE)
        if stop <= at:  # only at a slice's first byte, which no cut moves before
            stop = min(end, at + SLICE)
        try:
            text = raw[at:stop].decode("utf-8")
            value, _ = scanstring(text + '"', 0, True)
            data = value.encode("utf-8")
        except UnicodeDecodeError as exc:
            raise BadBody(f"not UTF-8 ({exc.reason} at byte {at - start + exc.start})") from None
        except UnicodeEncodeError as exc:
            raise BadBody(f"not valid UTF-8 text ({exc.reason})") from None
        except json.JSONDecodeError as exc:
            where = at - start + exc.pos
            raise BadBody(
                f"not a JSON string ({exc.msg.removesuffix(' at')} at byte {where})"
            ) from None
        raw[out : out + len(data)] = data
        h.update(data)
        out += len(data)
        at = stop
    return out - start, h.hexdigest()


def header_section(utf8: bytearray) -> str:
    """A message body's text up to and including its first blank line (its header section,
    all `rfc822.subject_of_body` reads of it), or the whole text if it has none."""
    for end in (b"\r\n\r\n", b"\n\n"):
        at = utf8.find(end)
        if at >= 0:
            return utf8[: at + len(end)].decode("utf-8")
    return utf8.decode("utf-8")


def take_out(raw: bytearray) -> TakenOut | None:
    """The large bodies of the JSON `raw` taken out (see the module); None if it has none.
    `raw` is the last body's buffer afterwards (cut to it, no copy); each other body is
    copied out of it as it is taken.  BadBody if a body is not a JSON string of UTF-8."""
    spans = large_bodies(raw)
    if not spans:
        return None
    token = secrets.token_hex(8)
    placeholders = tuple(f"\0{token}:{k}" for k in range(len(spans)))
    pieces, last = [], 0
    for placeholder, (vs, ve) in zip(placeholders, spans, strict=True):
        pieces += [raw[last:vs], json.dumps(placeholder)[1:-1].encode()]
        last = ve
    pieces.append(raw[last:])
    rest = b"".join(pieces)
    del pieces
    bodies = []
    for n, (vs, ve) in enumerate(spans):
        size, sha256 = unescape_in_place(raw, vs, ve)
        if n + 1 < len(spans):
            utf8 = raw[vs : vs + size]  # a copy; the last one keeps the buffer
        else:
            del raw[vs + size :]
            del raw[:vs]  # moves the buffer's start: no copy
            utf8 = raw
        bodies.append(TakenBody(utf8, sha256))
    return TakenOut(rest, placeholders, tuple(bodies))


def past_latin_1(utf8: bytearray) -> int | None:
    """Where the first character past U+00FF is in the UTF-8 bytes `utf8` (a byte offset),
    or None: a message_8bit body holds Latin-1 characters only."""
    bad = _PAST_LATIN_1.search(utf8)
    return None if bad is None else bad.start()
