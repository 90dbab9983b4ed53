"""What the SMTP and LMTP listeners answer, and what a message becomes (pure: no I/O).

A message is taken as it came: its bytes are kept, a `Received:` trace header is put in
front (RFC 5321 4.4, as every MTA does), and a `Message-ID:` after it when it has none
(RFC 5322 3.6.4 says it SHOULD have one; the queue and the item id need one).  A message
id made here is derived from the message's bytes and its envelope, not drawn at random:
an MTA that sends the same message again after hearing no answer (RFC 5321 4.5.4.1) gets
the same id, so it is queued once, as a message that has its own id is.

Lines (RFC 5321 2.3.8, 4.5.3.1.6; RFC 5322 2.1.1, 2.3).  A line of the message is at most
998 octets before its CRLF, and CR and LF appear only together.  A message that breaks
either is refused whole (550 5.5.2, Postfix's answer to a bare LF), not normalised:

- the store keeps messages byte for byte; a normalised message would be one the sender
  never sent, with a SHA-256 nobody can check against the sender's copy;
- a bare LF is what SMTP smuggling (CVE-2023-51764/51765/51766) rides on: accepting it in
  any form lets two hops disagree on where a message ends;
- an MTA never sends either (Postfix, Exim and Exchange turn a message into CRLF lines of
  at most 998 octets, or encode it, before they relay it); a client that does is broken,
  and a refusal tells its operator so, where normalising would hide it.

Reply codes are RFC 5321's, with RFC 3463's enhanced status codes.
"""

from __future__ import annotations

import hashlib
import ipaddress
import re
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from email.parser import BytesHeaderParser
from email.policy import compat32
from email.utils import format_datetime

from dag_common.api_types import NAME_PATTERN
from dag_common.rfc822 import ABSENT, Raw, header_block, message_head, message_pieces, plain_header

MAX_LINE = 998  # octets of a line before its CRLF (RFC 5322 2.1.1)
PIECE = 64 * 1024  # bytes of a message submitted whole checked at a time (`message_fault`)
_MESSAGE_ID = re.compile(r"^[\x21-\x7e]{1,998}$")  # transport.messages.MessageId's pattern
_NAME = re.compile(NAME_PATTERN)


@dataclass(frozen=True)
class Reply:
    """One SMTP reply: its code, enhanced status and text."""

    code: int
    status: str
    text: str

    def __str__(self) -> str:
        return f"{self.code} {self.status} {self.text}"

    @property
    def accepted(self) -> bool:
        return 200 <= self.code < 300


OK = Reply(250, "2.1.5", "OK")
LINE_TOO_LONG = Reply(
    550, "5.5.2", f"a line over {MAX_LINE} octets (RFC 5322 2.1.1); nothing queued"
)
BARE_LINE_END = Reply(
    550, "5.5.2", "a bare CR or LF in the message (RFC 5321 2.3.8); nothing queued"
)
TOO_MANY_RECIPIENTS = Reply(452, "4.5.3", "too many recipients; send the rest again")
DIRECTORY_UNREADABLE = Reply(451, "4.3.0", "the mailbox directory cannot be read; try again later")
QUEUE_UNAVAILABLE = Reply(451, "4.3.0", "the queue cannot take the message; try again later")
NO_MEMORY = Reply(452, "4.3.1", "the transport holds too much mail in memory; try again shortly")
AUTH_REQUIRED = Reply(530, "5.7.0", "authentication required (STARTTLS, then AUTH)")
AUTH_FAILED = Reply(535, "5.7.8", "authentication credentials invalid")
AUTH_OK = Reply(235, "2.7.0", "authentication successful")
IDLE = Reply(421, "4.4.2", "idle too long; closing")
BUSY = Reply(421, "4.7.0", "too many sessions from your address; try again later")
UNTRUSTED = Reply(554, "5.7.1", "this listener serves only the trusted networks")


def unknown_recipient(address: str) -> Reply:
    return Reply(550, "5.1.1", f"<{address}>: no such mailbox")


def bad_recipient(address: str) -> Reply:
    return Reply(553, "5.1.3", f"<{address}>: not a mailbox address")


def too_large(size: int, limit: int, database: str) -> Reply:
    return Reply(
        552, "5.3.4",
        f"the message is {size} bytes, over {database}'s max_item_size of {limit} bytes; "
        "nothing queued",
    )  # fmt: skip


def lines_fault(block: bytes, *, stuffed: bool) -> Reply | None:
    """What is wrong with `block`, whole lines each ending in CRLF (or nothing): a bare CR
    or LF, or a line of more than MAX_LINE octets (`stuffed`: once its leading dot is
    undone); None if nothing.  Bytes methods in C, never a line at a time in Python.

    A run of lines of one length (an attachment's base64 or quoted-printable: nearly all of
    a large message) is checked by its columns (`_run`): where each line's CRLF is, that
    they are there, and that no CR or LF is anywhere else.  Only the rest, the lines before
    and after such runs, is cut into lines (`_lines_fault`): the bench's 1 MiB message cut
    into its 13,800 lines was 1.56 ms of CPU, checked so 0.51 (in process, issue 49)."""
    size = len(block)
    end = _run(block, from_end=True)  # block[end:]: lines checked, none at fault
    if end == 0:
        return None
    start = _run(block, from_end=False)  # block[:start]: the same
    if start >= end:
        return None
    return _lines_fault(block[start:end] if start or end < size else block, stuffed=stuffed)


# Lines of one length in a row, at least, for `_run` to take them by their columns.
RUN = 8


def _run(block: bytes, *, from_end: bool) -> int:
    """Where the run of lines of one length that ends `block` (`from_end`) or begins it
    ends, each of at most MAX_LINE octets and CRLF, with no CR or LF but theirs: the start
    of the run (len(block): none), or its end (0: none).  A run of fewer than RUN lines is
    none."""
    size = len(block)
    none = size if from_end else 0
    if size < RUN * 4:
        return none
    # the last line's length or the first's, with its CRLF
    width = size - block.rfind(b"\n", 0, size - 1) - 1 if from_end else block.find(b"\n") + 1
    if not 2 < width <= MAX_LINE + 2:
        return none
    first = size % width if from_end else 0  # where the lines counted begin
    with memoryview(block) as view:
        crs = view[first + width - 2 :: width].tobytes()  # where each one's CR must be
        lfs = view[first + width - 1 :: width].tobytes()
        if from_end:
            count = min(len(crs) - len(crs.rstrip(b"\r")), len(lfs) - len(lfs.rstrip(b"\n")))
            start = size - count * width
            if start and block[start - 1] != 0x0A:  # the line before goes on into it
                count -= 1
                start += width
        else:
            count = min(len(crs) - len(crs.lstrip(b"\r")), len(lfs) - len(lfs.lstrip(b"\n")))
            start = 0
        if count < RUN:
            return none
        stop = start + count * width
        rest = bytearray(view[start:stop])
    with memoryview(rest) as lines:  # their CRLFs blanked: no CR or LF is left
        lines[width - 2 :: width] = bytes(count)
        lines[width - 1 :: width] = bytes(count)
    if rest.find(b"\r") >= 0 or rest.find(b"\n") >= 0:
        return none
    return start if from_end else stop


def _lines_fault(block: bytes, *, stuffed: bool) -> Reply | None:
    """`lines_fault`, line by line (each cut from `block`, in C)."""
    lines = block.split(b"\r\n")
    rest = b"".join(lines)  # what is left once every CRLF is gone: no CR, no LF
    if rest.find(b"\r") >= 0 or rest.find(b"\n") >= 0:
        return BARE_LINE_END
    if max(map(len, lines)) > MAX_LINE and any(
        len(line) - (stuffed and line[:1] == b".") > MAX_LINE for line in lines
    ):
        return LINE_TOO_LONG
    return None


class Content:
    """A message's content as it arrives in pieces (`data_reader.pieces`, or slices of a
    message submitted whole): its whole lines checked and, `stuffed` (a DATA), their dot-
    stuffing undone (RFC 5321 4.5.2).  A line cut between two pieces is carried to the
    next; a carried line already too long, or with a bare CR or LF, is a fault at once (a
    line without CRLF is never carried past MAX_LINE and a few octets).  Once `fault` is
    set nothing more is kept or checked."""

    def __init__(self, *, stuffed: bool = True) -> None:
        self._stuffed = stuffed
        self._carry = b""  # the start of a line whose CRLF has not come yet
        self.fault: Reply | None = None

    def feed(self, piece: bytes) -> bytes:
        """The whole lines `piece` completes, unstuffed (b"": none, or a fault)."""
        if self.fault is not None:
            return b""
        data = self._carry + piece if self._carry else piece
        at = data.rfind(b"\r\n")
        cut = at + 2 if at >= 0 else 0
        block, self._carry = data[:cut], data[cut:]
        self.fault = lines_fault(block, stuffed=self._stuffed) or self._carry_fault(last=False)
        if self.fault is not None:
            self._carry = b""
            return b""
        if self._stuffed and b"." in block:  # a byte looked for in C (memchr): none in base64
            if block[:1] == b".":
                block = block[1:]
            if b"\r\n." in block:
                block = block.replace(b"\r\n.", b"\r\n")
        return block

    def end(self) -> Reply | None:
        """The content is whole: its fault, if any (a last line without CRLF is checked as
        one; a DATA's content always ends in CRLF)."""
        if self.fault is None:
            self.fault = self._carry_fault(last=True)
        return self.fault

    def _carry_fault(self, *, last: bool) -> Reply | None:
        carry = self._carry
        if not carry:
            return None
        cr = carry.count(b"\r")
        if b"\n" in carry or cr > 1 or (cr and (last or carry[-1:] != b"\r")):
            return BARE_LINE_END  # a CR not at the end could only be bare: no LF follows it
        length = len(carry) - cr - (self._stuffed and carry[:1] == b".")
        return LINE_TOO_LONG if length > MAX_LINE else None


def message_fault(raw: bytes | bytearray) -> Reply | None:
    """What is wrong with the lines of a whole message (no dot-stuffing): the checks a DATA
    makes, for a message submitted over HTTP (its last line may lack its CRLF)."""
    content = Content(stuffed=False)
    for start in range(0, len(raw), PIECE):
        content.feed(raw[start : start + PIECE])
    return content.end()


def mailboxes_of(address: str) -> list[str]:
    """The mailbox names an address may be, in the order the directory is asked: the
    address itself (a mailbox may be named `bob@example.com`), then its local part (the
    MTA routed the domain here: it is one of ours).  Empty: no mailbox can be named so."""
    local = address.rpartition("@")[0] if "@" in address else address
    return [name for name in dict.fromkeys((address, local)) if name and _NAME.match(name)]


def trusted(peer: str | None, networks: Iterable[str]) -> bool:
    """Whether the client at `peer` (an IP address) is in one of `networks`."""
    if not peer:
        return False
    try:
        address = ipaddress.ip_address(peer.split("%", 1)[0])
    except ValueError:
        return False
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return any(address in ipaddress.ip_network(n, strict=False) for n in networks)


def message_id_of(raw: bytes | bytearray) -> str | None:
    """The message's own Message-ID, as the queue keys it (None: it has none usable)."""
    block = header_block(raw)
    plain = plain_header(block, b"message-id")  # what the parser reads, without its cost
    if plain is ABSENT:
        return None
    if plain is not None:
        text = "".join(plain.decode("ascii").split())
    else:
        value = BytesHeaderParser(policy=compat32).parsebytes(block).get("Message-ID")
        if value is None:
            return None
        text = "".join(str(value).split())  # unfolded
    return text if _MESSAGE_ID.match(text) else None


def made_message_id(raw: Raw, sender: str, recipients: Iterable[str], host: str) -> str:
    """A Message-ID for a message without one: the same for the same message sent again
    (its bytes and envelope), so an MTA's retry is queued once."""
    h = hashlib.sha256()
    for part in (sender, *recipients):
        h.update(part.encode("utf-8", "surrogateescape") + b"\0")
    for piece in message_pieces(raw):
        h.update(piece)
    return f"<{h.hexdigest()[:40]}@{host}>"


@dataclass(frozen=True)
class Hop:
    """What a `Received:` header says of the hop that brought the message here."""

    helo: str  # what the client called itself
    peer: str  # its address
    by: str  # this listener's host name
    protocol: str  # RFC 3848's: ESMTP, ESMTPS, ESMTPSA, LMTP, LMTPS ...
    when: datetime  # aware
    recipient: str | None = None  # said only for a message of one recipient (privacy)


def received(hop: Hop, message_id: str) -> bytes:
    """The `Received:` header (RFC 5321 4.4), folded, with its CRLF."""
    helo = "".join(c for c in hop.helo if 0x21 <= ord(c) < 0x7F and c not in "()")[:255]
    lines = [
        f"Received: from {helo or 'unknown'} ([{hop.peer}])",
        f"\tby {hop.by} with {hop.protocol} id {message_id[:120]}",
    ]
    if hop.recipient:
        lines.append(f"\tfor <{hop.recipient}>")
    lines[-1] += f"; {format_datetime(hop.when)}"
    return ("\r\n".join(lines) + "\r\n").encode("ascii", "replace")


@dataclass(frozen=True)
class Prepared:
    """A message as it is queued: the header fields put in front of it (its trace and, if it
    had none, a Message-ID), the bytes that came (never copied behind them: the queue
    writes one after the other), and the id it is queued under."""

    head: bytes
    # A bytearray as an HTTP body is read, not copied to bytes; a DATA's pieces as they
    # were read (`Content.feed`'s blocks), not joined: written one after the other.
    body: Raw
    message_id: str

    @property
    def raw(self) -> bytes:
        """The message whole (a copy: for tests and small messages)."""
        return self.head + b"".join(message_pieces(self.body))


def prepare(raw: Raw, hop: Hop, *, sender: str, recipients: list[str]) -> Prepared:
    """`raw` (the message whole, or a DATA's pieces) as it is queued (see the module's
    docstring)."""
    head = message_head(raw)
    own = message_id_of(head)
    if own is not None:
        return Prepared(received(hop, own), raw, own)
    made = made_message_id(raw, sender, recipients, hop.by)
    added = f"Message-ID: {made}\r\n".encode("ascii")
    if b"message-id:" in header_block(head).lower():  # one it has, unusable: not a second
        added = b""
    return Prepared(received(hop, made) + added, raw, made)


class SessionCount:
    """Sessions open per client address, against a bound (`admit`, then `leave`)."""

    def __init__(self, limit: int) -> None:
        self._limit = limit
        self._open: dict[str, int] = {}

    def admit(self, peer: str) -> bool:
        """Count one more session of `peer`; False (nothing counted) past the bound."""
        n = self._open.get(peer, 0)
        if n >= self._limit:
            return False
        self._open[peer] = n + 1
        return True

    def leave(self, peer: str) -> None:
        n = self._open.get(peer, 0) - 1
        if n > 0:
            self._open[peer] = n
        else:
            self._open.pop(peer, None)

    @property
    def total(self) -> int:
        return sum(self._open.values())
