"""A body whose UTF-8 size and SHA-256 were counted once, where it entered the process.

A body is text on every path of the store (`rfc822.py`: why), and each stage that needs its
size or its hash (the request's size check, the staging plan, the overlay's row, the
digest's term, the row SQLite is given) used to encode it to UTF-8 again: a copy and a pass
over the body each time, ~1-2 ms a MiB, none of them free for a message that is not ASCII
(an 8-bit message's every byte past 0x7f is two in UTF-8).  A `CountedText` is that text,
a `str` everywhere (orjson writes it, SQLite binds it, slices and comparisons are str's),
carrying what was counted of it: `utf8_size`, `sha256` (hex, of its UTF-8 bytes: the
digest's `body_hash`), and, until the one stage that writes them takes them
(`take_utf8`), its UTF-8 bytes when they came as bytes (a raw message upload) or had to be
made to count it.  What it carries is never recomputed or checked again: it is made only
here, from bytes it decoded or text it encoded.

Pure: no I/O.
"""

from __future__ import annotations

import codecs
import hashlib

# Characters encoded at a time when a text is counted (no whole second copy of a large one
# beside it unless its bytes are kept).
_SLICE = 1 << 20


# A UTF-8 check's slice: its text is made and dropped at once, so it is kept under the
# allocator's mmap threshold (dag_common/memory.py), where the heap reuses its pages; a 1 MiB
# slice was a fresh mapping and 256 page faults per MiB checked.
_CHECK_SLICE = 64 * 1024


class CountedText(str):
    """A str with its UTF-8 size and SHA-256 (see the module)."""

    __slots__ = ("_utf8", "sha256", "utf8_size")

    utf8_size: int
    sha256: str
    _utf8: bytes | bytearray | None

    def take_utf8(self) -> bytes | bytearray | None:
        """The text's UTF-8 bytes, if it holds them, let go of: the stage that writes them
        takes them once (the text alone stays, as every other stage reads it)."""
        utf8, self._utf8 = self._utf8, None
        return utf8

    def __reduce__(self) -> tuple[type[str], tuple[str]]:
        return (str, (str(self),))  # a copy elsewhere is plain text: its counts stay here


def _made(text: str, size: int, digest: str, utf8: bytes | bytearray | None) -> CountedText:
    out = CountedText(text)
    out.utf8_size, out.sha256, out._utf8 = size, digest, utf8
    return out


def known(
    text: str, *, utf8_size: int, sha256: str, utf8: bytes | bytearray | None = None
) -> CountedText:
    """`text` with the counts its caller made of its UTF-8 bytes `utf8` (kept, if given, for
    `take_utf8`): for a caller that lets go of those bytes before the text is made a
    `CountedText` (which copies it: a subclass of str cannot share a str's characters)."""
    return _made(text, utf8_size, sha256, utf8)


def bytes_only(utf8: bytes | bytearray, sha256: str) -> CountedText:
    """A body carried only as its UTF-8 bytes `utf8` (of SHA-256 `sha256`), its text empty:
    for the one stage that writes those bytes (a large raw message staged into the log,
    `item_writes._stage_bodies`; a body read back for SQLite, `tables.put_rows`), where no
    stage reads the text.  `text_of` gives the text where one is needed after all."""
    return _made("", len(utf8), sha256, utf8)


def is_bytes_only(body: str) -> bool:
    """Whether `body` is carried as its UTF-8 bytes alone (`bytes_only`)."""
    return type(body) is CountedText and not body and body.utf8_size > 0


def held_utf8(body: CountedText) -> bytes | bytearray:
    """A bytes-only body's UTF-8 bytes, kept (a write that may be sent again reads them
    each time: `items_payload`)."""
    assert body._utf8 is not None, "a bytes-only body holds its bytes until they are taken"
    return body._utf8


def text_of(body: CountedText) -> CountedText:
    """A bytes-only body as counted text (its bytes decoded, then let go of)."""
    utf8 = body.take_utf8()
    assert utf8 is not None, "a bytes-only body holds its bytes until they are taken"
    return _made(utf8.decode("utf-8"), body.utf8_size, body.sha256, None)


def from_utf8(raw: bytes | bytearray) -> CountedText:
    """The text of the UTF-8 bytes `raw` (UnicodeDecodeError if they are not), counted and
    hashed from the bytes themselves; the bytes kept for `take_utf8` (no copy)."""
    text = raw.decode("utf-8")
    return _made(text, len(raw), hashlib.sha256(raw).hexdigest(), raw)


def counted(text: str, *, keep_utf8: bool = False) -> CountedText:
    """`text` counted (as it is if it already is): an ASCII text from itself, with no copy
    of its bytes; another encoded once (a slice at a time unless `keep_utf8`, which keeps
    its bytes for `take_utf8`)."""
    if type(text) is CountedText:
        return text
    if keep_utf8 and not text.isascii():
        utf8 = text.encode("utf-8", "surrogatepass")
        return _made(text, len(utf8), hashlib.sha256(utf8).hexdigest(), utf8)
    h = hashlib.sha256()
    size = 0
    for start in range(0, len(text), _SLICE):
        part = text[start : start + _SLICE].encode("utf-8", "surrogatepass")
        size += len(part)
        h.update(part)
    return _made(text, size, h.hexdigest(), None)


def is_utf8(raw: bytes | bytearray) -> bool:
    """Whether `raw` is UTF-8: ASCII at once, else decoded a slice at a time (no whole text
    made)."""
    if raw.isascii():
        return True
    decoder = codecs.getincrementaldecoder("utf-8")()
    view = memoryview(raw)
    try:
        for start in range(0, len(raw), _CHECK_SLICE):
            final = start + _CHECK_SLICE >= len(raw)
            decoder.decode(view[start : start + _CHECK_SLICE], final=final)
        decoder.decode(b"", final=True)
    except UnicodeDecodeError:
        return False
    finally:
        view.release()
    return True
