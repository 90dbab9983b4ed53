"""A FETCH of listing items only (UID, FLAGS, INTERNALDATE, MODSEQ, RFC822.SIZE), written from
the folder's listed rows: one buffer for the whole range, no pymap message or value objects.

pymap answers each message of a FETCH with a `Message`, a `MessageAttributes` and a
`FetchValue` per item, each rendered through its `Writeable` machinery: for `UID FETCH 1:*
(FLAGS)` that was most of the front's time (bench/README.md, *imap*: 1,000 lines in about
90 ms, Dovecot in 4).  Every item here is in the listing the command reads anyway, so its
lines are the same bytes pymap writes, made by `%`-formatting: FLAGS rendered once per
distinct flag set (by pymap's own `List`, so the order and the quoting are its), INTERNALDATE
by pymap's `DateTime`, MODSEQ as a client is shown it (`condstore.shown`), RFC822.SIZE as
the node's listing gives the length of the bytes it serves (`Listed.message_size`: a
message kept as UTF-8; for any other row chosen the FETCH takes pymap's path, which reads
the bytes).  The items keep the command's order, a repeated one written once where it first
appears (as pymap's `FetchResponse` keeps them).  Anything else (a body, a section,
ENVELOPE, BODYSTRUCTURE, a message expunged meanwhile) goes through pymap's path
(`condstore_state`).

An unsolicited FETCH the same command brings (another session's flag change, from the
selected state's update after the listing) is merged into the message's line as pymap's
`FetchResponse.merge` does it (`ListedLines.absorb`): its values replace those of the same
item, and an item the command did not ask for is added at the end of the line.
"""

from __future__ import annotations

from collections.abc import Container, Iterable, Mapping, Sequence
from datetime import UTC, datetime

from pymap.parsing.primitives import List
from pymap.parsing.specials import DateTime, FetchAttribute, FetchValue
from pymap.parsing.specials.flag import Flag
from pymap.selected import SessionFlags

from dag_common.store_api import Listed
from imap_front.condstore import shown
from imap_front.listing import Ordered
from imap_front.merged_lines import MergedLines
from imap_front.selected import FLAG_SETS

LISTED_ITEMS = frozenset({b"UID", b"FLAGS", b"INTERNALDATE", b"MODSEQ", b"RFC822.SIZE"})
_NO_DATE = datetime.fromtimestamp(0, UTC)

# The rows a FETCH chose: (sequence number, row) each, or a folder's rows whole in order
# (`UID FETCH 1:*` of the rows the session was shown), whose arrays render the lines.
Chosen = list[tuple[int, Listed]] | Ordered


def pairs(chosen: Chosen) -> list[tuple[int, Listed]]:
    """(sequence number, row) of each row chosen."""
    return chosen.pairs() if isinstance(chosen, Ordered) else chosen


def listed_only(attributes: Sequence[FetchAttribute]) -> tuple[bytes, ...] | None:
    """The items of a FETCH written from the listing, in order, each once; None if any item
    needs more than the listing (pymap's path answers it)."""
    items: list[bytes] = []
    for attr in attributes:
        if attr.value not in LISTED_ITEMS or attr.section is not None or attr.partial:
            return None
        if attr.value not in items:
            items.append(attr.value)
    return tuple(items)


class _FlagsText:
    """`FLAGS (…)` of each distinct flag set, rendered once by pymap's `List`."""

    def __init__(self) -> None:
        self._known: dict[tuple[str, ...], bytes] = {}

    def __call__(self, names: tuple[str, ...]) -> bytes:
        found = self._known.get(names)
        if found is None:
            if len(self._known) > 4096:  # a mailbox of many keywords: bounded anyway
                self._known.clear()
            found = self._known[names] = self.render(_flags(names))
        return found

    @staticmethod
    def render(flags: Iterable[Flag]) -> bytes:
        return b"FLAGS " + bytes(List(flags, sort=True))


FLAGS_TEXT = _FlagsText()


def _flags(names: Iterable[str]) -> frozenset[Flag]:
    return frozenset(Flag(n.encode()) for n in names)


def render(
    items: tuple[bytes, ...],
    rows: Iterable[tuple[int, Listed]] | Ordered,
    session_flags: SessionFlags,
    merged: dict[int, dict[bytes, bytes]] | None = None,
) -> bytes:
    """The `* n FETCH (…)` lines of `rows` ((sequence number, listed row)), one buffer;
    `merged`: by sequence number, items (name: rendered item) of an unsolicited FETCH."""
    with_session = bool(session_flags.flags) or bool(session_flags.recent_uids)
    if not with_session and not merged:
        if isinstance(rows, Ordered):
            return _whole(items, rows)
        return _plain(items, rows)
    if isinstance(rows, Ordered):
        rows = rows.pairs()
    out: list[bytes] = []
    append = out.append
    flags_text = FLAGS_TEXT
    for seq, row in rows:
        parts = []
        for item in items:
            if item == b"UID":
                parts.append(b"UID %d" % row.uid)
            elif item == b"FLAGS":
                extra = session_flags.get(row.uid) if with_session else None
                if extra:
                    parts.append(flags_text.render(_flags(row.flags) | extra))
                else:
                    parts.append(flags_text(row.flags))
            elif item == b"MODSEQ":
                parts.append(b"MODSEQ (%d)" % shown(row.modseq))
            elif item == b"RFC822.SIZE":
                parts.append(b"RFC822.SIZE %d" % row.message_size)  # type: ignore[str-format]
            else:
                parts.append(b"INTERNALDATE " + bytes(DateTime(row.received or _NO_DATE)))
        if merged and seq in merged:
            parts = _merge(items, parts, merged[seq])
        append(b"* %d FETCH (%b)\r\n" % (seq, b" ".join(parts)))
    return b"".join(out)


_FORMATS = {b"UID": b"UID %d", b"FLAGS": b"%b", b"MODSEQ": b"MODSEQ (%d)",
            b"INTERNALDATE": b"INTERNALDATE %b", b"RFC822.SIZE": b"RFC822.SIZE %d"}  # fmt: skip


def _plain(items: tuple[bytes, ...], rows: Iterable[tuple[int, Listed]]) -> bytes:
    """`render` with no session flags and nothing merged: one format for every line."""
    line = b"* %%d FETCH (%b)\r\n" % b" ".join(_FORMATS[i] for i in items)
    flags_text = FLAGS_TEXT
    if items == (b"FLAGS", b"UID"):  # what mail clients and mbsync ask most
        return b"".join([line % (seq, flags_text(row.flags), row.uid) for seq, row in rows])
    if items == (b"UID", b"FLAGS"):
        return b"".join([line % (seq, row.uid, flags_text(row.flags)) for seq, row in rows])
    values = [_VALUES[i] for i in items]
    return b"".join([line % (seq, *[v(row) for v in values]) for seq, row in rows])


def _whole(items: tuple[bytes, ...], ordered: Ordered) -> bytes:
    """`_plain` of a folder's rows whole: `FLAGS` from the flag-set numbers, each distinct
    set rendered once, and UIDs from the array (a row's flags hashed for each line made
    most of the time of 10,000 lines)."""
    uids, numbers = ordered.uids, ordered.flags
    if items not in ((b"FLAGS", b"UID"), (b"UID", b"FLAGS")):
        return _plain(items, ordered.pairs())
    texts = {n: FLAGS_TEXT.render(FLAG_SETS[n]) for n in set(numbers)}
    line = b"* %%d FETCH (%b)\r\n" % b" ".join(_FORMATS[i] for i in items)
    seqs = range(1, len(uids) + 1)
    if items == (b"FLAGS", b"UID"):
        return b"".join(
            [line % (seq, texts[n], uid) for seq, n, uid in zip(seqs, numbers, uids, strict=True)]
        )
    return b"".join(
        [line % (seq, uid, texts[n]) for seq, n, uid in zip(seqs, numbers, uids, strict=True)]
    )


_VALUES = {
    b"UID": lambda row: row.uid,
    b"FLAGS": lambda row: FLAGS_TEXT(row.flags),
    b"MODSEQ": lambda row: shown(row.modseq),
    b"INTERNALDATE": lambda row: bytes(DateTime(row.received or _NO_DATE)),
    b"RFC822.SIZE": lambda row: row.message_size,
}


def answerable(items: tuple[bytes, ...], chosen: Chosen) -> bool:
    """Whether the rows tell every item asked of them: RFC822.SIZE only where the node
    gave the size of the bytes it serves (`Listed.message_size`)."""
    if b"RFC822.SIZE" not in items:
        return True
    rows = chosen.rows if isinstance(chosen, Ordered) else (row for _, row in chosen)
    return all(row.message_size is not None for row in rows)


def _merge(items: tuple[bytes, ...], parts: list[bytes], other: dict[bytes, bytes]) -> list[bytes]:
    """pymap's `FetchResponse.merge`: `other`'s values win, its new items go last."""
    at = dict(zip(items, parts, strict=True))
    at.update(other)
    return list(at.values())


class ListedLines(MergedLines[bytes, bytes]):
    """A range's FETCH lines from the listed rows (`render`), rendered when written; a
    later FETCH answer of one of them is kept as its items' bytes, merged in as rendered."""

    def __init__(
        self, items: tuple[bytes, ...], rows: Chosen, session_flags: SessionFlags,
    ) -> None:  # fmt: skip
        super().__init__()
        self._items = items
        self._rows = rows
        self._session_flags = session_flags

    def _take(self, into: dict[bytes, bytes], data: Mapping[FetchAttribute, FetchValue]) -> None:
        for attr, value in data.items():
            into[attr.value] = bytes(value)

    def _seqs(self) -> Container[int]:
        if isinstance(self._rows, Ordered):
            return range(1, len(self._rows) + 1)
        return frozenset(seq for seq, _ in self._rows)

    @property
    def lines(self) -> bytes:
        return render(self._items, self._rows, self._session_flags, self._merged)

    @property
    def text(self) -> bytes:
        return self.lines[2:].rstrip(b"\r\n")

    def write(self, writer: object) -> None:
        writer.write(self.lines)  # type: ignore[attr-defined]
