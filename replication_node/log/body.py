"""A body being staged, read a part at a time in the writer thread (pure, no I/O).

An item's body reaches the store as text (the JSON of a write request), and the log holds its
UTF-8 bytes.  Encoding all of it before staging put a whole copy of the body in memory beside
the text, and its cost (1-6 ms for 8 MiB, most of it the fresh copy's page faults) before the
writer wrote its first part, while the disk waited: the first generation's early fsync starts
only once that part is written (`writer.py`).  `BodyReader` encodes the text as the writer takes
its parts instead: a part's worth at a time, beside the fsyncs of the generations before it.

Measured (2026-11-27, tests/replication_node/test_body_reader.py and an ad-hoc tracemalloc of
`put_items`): writing an 8 MiB item held 2.01 times the item beside its text before, 1.25 times
now; a 36 MiB item 1.88 times before, 0.92 now.  The time from the request to the writer's first
part went from about 2.5 ms to 1.0 ms (an ad-hoc trace); the log's MB/s in
bench/large_items.py part 1 did not change beyond the noise (its flushes bound it).

A body given as bytes is read as it is (a view, no copy).
"""

from __future__ import annotations

from dag_common.mailbox_digest import utf8_size

# Characters encoded at a time beyond what a read needs (a text that is not ASCII has no
# character offset for a byte offset, so its reads are served from encoded slices).
_SLICE = 256 * 1024


class BodyReader:
    """The UTF-8 bytes of a body, read in order: `read(n)` returns the next `n` bytes (fewer
    only at the end).  `size` is the body's length in bytes, known before any is read: given
    by a caller that has counted it (`utf8_size`), it is checked against bytes and against
    an ASCII text; a text that is not ASCII would have to be encoded whole to check it."""

    def __init__(self, body: bytes | memoryview | str, size: int | None = None) -> None:
        if isinstance(body, str):
            self._text: str | None = body
            self._ascii = body.isascii()
            if size is None:
                size = utf8_size(body)
            elif self._ascii and size != len(body):
                raise ValueError(f"a text of {len(body)} bytes said to be of {size}")
            self._encoded = b""  # encoded and not read yet (a text that is not ASCII)
        else:
            self._text = None
            self._view = memoryview(body).cast("B")
            size = len(self._view) if size is None else size
            if size != len(self._view):
                raise ValueError(f"a body of {len(self._view)} bytes said to be of {size}")
        self.size = size
        self._chars = 0  # characters of the text encoded so far (not ASCII)
        self.read_bytes = 0  # how far the body has been read (the writer's progress in it)

    def read(self, n: int) -> memoryview:
        """The next `n` bytes of the body (what is left, if less)."""
        if self._text is None:
            chunk = self._view[self.read_bytes : self.read_bytes + n]
        elif self._ascii:
            # One character, one byte: the slice's own encoding is the chunk.
            chunk = memoryview(self._text[self.read_bytes : self.read_bytes + n].encode("ascii"))
        else:
            chunk = self._read_encoded(n)
        self.read_bytes += len(chunk)
        return chunk

    def _read_encoded(self, n: int) -> memoryview:
        assert self._text is not None
        while len(self._encoded) < n and self._chars < len(self._text):
            # A character is a byte or more: n characters give n bytes or more.
            take = max(n, _SLICE)
            self._encoded += self._text[self._chars : self._chars + take].encode("utf-8")
            self._chars += take
        chunk, self._encoded = self._encoded[:n], self._encoded[n:]
        return memoryview(chunk)
