"""A FETCH of whole messages (`BODY.PEEK[]`, with `UID`, `FLAGS`, `INTERNALDATE`, `MODSEQ`
beside it) written straight from the node's answer: the same bytes as pymap's, made with
one object per message fewer and no copy of a body on the front.

pymap answers each message of a FETCH with a `FetchResponse` whose body value renders its
literal through `LiteralString.tobytes` (a `BytesIO` written and read back), a `%`-format
of the item and the `List` of the line: a 4 KiB body was copied four times before the
command's buffer took it (and once more when the buffer was handed on), and each message
entered an async context (`load_hook`) to load it.  Here (`BodiesLines`) each message's
line is written into the command's buffer (`protocol._Gathered`) as its items are, the body
taken from the read-ahead (`fetching.Bodies`: a view of the node's answer) and put in the
buffer once, or, a body of `DIRECT_AT` bytes or more, handed to the transport as it is
after the buffer before it.  A message gone from the node (no bytes) or expunged is written
by pymap's own `FetchResponse`, as before.

A session holds at most `protocol.WRITE_AT` of lines plus one body here, beside the
read-ahead's window: nothing is gathered for the whole command.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from enum import StrEnum
from typing import Any

from pymap.message import BaseLoadedMessage
from pymap.parsing.response.specials import FetchResponse
from pymap.parsing.specials import FetchAttribute, FetchValue
from pymap.selected import SelectedMailbox

from imap_front.condstore import ModseqAttributes
from imap_front.merged_lines import MergedLines

DIRECT_AT = 16 * 1024  # a body this large goes to the transport as it is, not copied
WRITE_AT = 64 * 1024  # bytes of lines gathered before they are handed on (protocol's)
_BESIDE = frozenset({b"UID", b"FLAGS", b"INTERNALDATE", b"MODSEQ"})

# Writes what the buffer holds, then `data` (if any) as it is, and waits for the transport.
Send = Callable[..., Awaitable[None]]


def whole_body(attr: FetchAttribute) -> bool:
    """`BODY.PEEK[]`: the whole message, no part, no partial, \\Seen left as it is."""
    section = attr.section
    return (
        attr.value == b"BODY.PEEK"
        and section is not None
        and not section.parts
        and section.specifier is None
        and attr.partial is None
    )


def streamable(attributes: Sequence[FetchAttribute]) -> bool:
    """Whether a FETCH of `attributes` is written here: a whole body peeked, and beside it
    only items the listing gives."""
    body = False
    for attr in attributes:
        if whole_body(attr):
            body = True
        elif attr.value not in _BESIDE or attr.section is not None or attr.partial:
            return False
    return body


class BodiesLines(MergedLines[FetchAttribute, FetchValue]):
    """The FETCH lines of a range's messages, each with its whole body (`streamable`),
    written by `stream`; `write` (a log's rendering) writes pymap's placeholders.  A later
    FETCH answer of one of them is merged in as pymap's `FetchResponse.merge` does."""

    def __init__(
        self, messages: list[tuple[int, Any]], attributes: Sequence[FetchAttribute],
        selected: SelectedMailbox,
    ) -> None:  # fmt: skip
        super().__init__()
        self._messages = messages
        self._attributes = attributes
        self._selected = selected

    def _take(
        self, into: dict[FetchAttribute, FetchValue], data: Mapping[FetchAttribute, FetchValue]
    ) -> None:
        into.update(data)

    def _seqs(self) -> set[int]:
        return {seq for seq, _ in self._messages}

    def _data(self, seq: int, msg: Any) -> tuple[ModseqAttributes, dict[Any, FetchValue]]:
        values = ModseqAttributes(msg, self._selected, self._attributes)
        data = {value.attribute: value for value in values}
        merged = self._merged.get(seq)
        if merged:
            data |= merged
        return values, data

    @property
    def text(self) -> bytes:
        return b"FETCH"

    def write(self, writer: Any) -> None:
        for seq, msg in self._messages:
            FetchResponse(seq, self._data(seq, msg)[1].values()).write(writer)

    async def stream(self, out: Any, send: Send) -> None:
        """Every line, into `out` (the command's buffer), `send` called to hand it on once
        it holds `WRITE_AT` bytes and with each body of `DIRECT_AT` bytes or more."""
        # The line's items in pymap's order (its `FetchResponse` keeps the first place of an
        # item asked twice), each told apart once for the command, not once a message.
        plan = [(attr, _kind(attr)) for attr in dict.fromkeys(self._attributes)]
        heads = {attr: bytes(attr.for_response) for attr, kind in plan if kind is _Kind.BODY}
        others = any(kind is _Kind.OTHER for _, kind in plan)
        write = out.write
        for seq, msg in self._messages:
            item_id = getattr(msg, "item_id", None)
            raw = None
            if not msg.expunged and item_id:
                bodies = msg.bodies
                raw = await (msg._api.message if bodies is None else bodies.get)(item_id)
            if raw is None or seq in self._merged:
                values, data = self._data(seq, msg)
                if raw is None:  # expunged, or gone from the node: as pymap writes it
                    loaded = BaseLoadedMessage(msg, values.requirement, None)
                    with values._get_loaded.apply(loaded):
                        FetchResponse(seq, data.values()).write(out)
                else:
                    await _line(out, send, seq, data, raw)
            else:
                values = ModseqAttributes(msg, self._selected, self._attributes) if others else None
                write(b"* %d FETCH (" % seq)
                first = True
                for attr, kind in plan:
                    if first:
                        first = False
                    else:
                        write(b" ")
                    if kind is _Kind.BODY:
                        await _literal(out, send, heads[attr], raw)
                    elif kind is _Kind.UID:
                        write(b"UID %d" % msg.uid)
                    else:
                        write(bytes(values._get(attr)))  # type: ignore[union-attr]
                write(b")\r\n")
            del raw
            if len(out.data) >= WRITE_AT:
                await send(out)


class _Kind(StrEnum):
    BODY = "body"
    UID = "uid"
    OTHER = "other"  # rendered by pymap's value


def _kind(attr: FetchAttribute) -> _Kind:
    if whole_body(attr):
        return _Kind.BODY
    return _Kind.UID if attr.value == b"UID" else _Kind.OTHER


async def _literal(out: Any, send: Send, head: bytes, raw: bytes | memoryview) -> None:
    """`BODY[] {n}` (`head`: the item as answered) and the body: into `out`, or handed on
    as it is if it is large."""
    out.write(b"%b {%d}\r\n" % (head, len(raw)))
    if len(raw) >= DIRECT_AT:
        await send(out, raw)
    else:
        out.write(raw)


async def _line(
    out: Any, send: Send, seq: int, data: dict[Any, FetchValue], raw: bytes | memoryview
) -> None:
    """A line from its values (pymap's, an unsolicited FETCH's merged in) and the body."""
    write = out.write
    write(b"* %d FETCH (" % seq)
    first = True
    for attr, value in data.items():
        if first:
            first = False
        else:
            write(b" ")
        if whole_body(attr):
            await _literal(out, send, bytes(attr.for_response), raw)
        else:
            write(bytes(value))
    write(b")\r\n")
