"""The transport's SMTP and LMTP listeners (aiosmtpd): sessions, their checks, what they queue.

    LMTP (RFC 2033)  final delivery from an MTA (Postfix `mailbox_transport = lmtp:inet:…`):
                     served only to the trusted networks, no AUTH; after DATA one reply per
                     accepted recipient, each recipient's own.
    SMTP (RFC 5321)  submission and relay: STARTTLS with the cluster's certificate, AUTH
                     PLAIN or LOGIN only after it (a credential holding the `store` role:
                     the login is its name, the password its secret); a trusted network may
                     send without AUTH.  One reply after DATA: a message that one recipient's
                     database cannot take is refused whole.

A recipient is checked at RCPT (550 5.1.1 unknown, 451 4.3.0 directory unreadable,
452 4.5.3 too many, 552 5.3.4 over its database's max_item_size by the SIZE the client
declared); the message at the end of DATA (its lines, its size against each recipient's
database).  `250` is answered only once the message is in the queue's file with fsync
(`Transport.enqueue`, the group commit the HTTP route's 201 shares).  What a message
becomes (its `Received:` header, its Message-ID) and every reply's code are
`mail_policy.py`'s.

A DATA is read here rather than by aiosmtpd (`smtp_DATA`): aiosmtpd answers its own
refusals once for an LMTP DATA where RFC 2033 wants one per recipient, takes bare LF as
data, and holds a message's bytes outside the transport's memory budget.  Its other
private parts used: `_handle_client` (to count and refuse a session before its greeting),
`_timeout_cb` (to say 421 before an idle session is closed), `_getaddr` (aiosmtpd's
makes a `Protocol` class at each call, for its type checker alone: a class made for every
MAIL and RCPT, issue 49); aiosmtpd is pinned below 2.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import sqlite3
import ssl
from collections.abc import Callable
from datetime import UTC
from email._header_value_parser import get_addr_spec, get_angle_addr
from email.errors import HeaderParseError
from enum import StrEnum
from typing import Any

from aiosmtpd.lmtp import LMTP
from aiosmtpd.smtp import SMTP, AuthResult, Envelope, LoginPassword, Session
from pydantic import ValidationError

from dag_common.api_types import item_id_for
from dag_common.config import MailSettings
from dag_common.credentials import Credentials, Role
from dag_common.errors import ClusterStoreError
from dag_common.memory import MemoryBudget, Overloaded
from dag_common.rfc822 import Raw
from transport import data_reader
from transport import mail_policy as policy
from transport.mail_policy import Hop, Reply
from transport.messages import Queued
from transport.service import Resolved, Transport

logger = logging.getLogger(__name__)

FIRST_SHARE = 64 * 1024  # bytes of the memory budget a DATA takes first; doubled as it grows
READ_LIMIT = 64 * 1024  # a command line at most; a DATA is read in pieces of about this


class Listener(StrEnum):
    SMTP = "smtp"
    LMTP = "lmtp"


class _Envelope(Envelope):
    """aiosmtpd's envelope, with each accepted recipient's mailbox and the declared SIZE."""

    def __init__(self) -> None:
        super().__init__()
        self.accepted: list[Resolved] = []  # one per entry of rcpt_tos
        self.declared_size: int | None = None


class _Share:
    """Bytes of the transport's memory budget a DATA holds, grown as the message is read."""

    def __init__(self, budget: MemoryBudget, limit: int) -> None:
        self._budget = budget
        self._limit = limit
        self.held = 0

    async def cover(self, size: int) -> None:
        """Hold at least `size` bytes (Overloaded: no room in time)."""
        if size <= self.held:
            return
        want = min(max(size, 2 * self.held, FIRST_SHARE), max(self._limit, size))
        await self._budget.acquire(want - self.held, "a message read by SMTP/LMTP")
        self.held = want

    def release(self) -> None:
        self._budget.release(self.held)
        self.held = 0


class MailService:
    """What every session of one listener shares; aiosmtpd's handler (its `handle_*`)."""

    def __init__(
        self,
        *,
        transport: Transport,
        listener: Listener,
        settings: MailSettings,
        credentials: Callable[[], Credentials],
        tls: ssl.SSLContext | None = None,
    ) -> None:
        self.transport = transport
        self.listener = listener
        self.settings = settings
        self.credentials = credentials
        self.tls = tls if listener is Listener.SMTP else None
        self.hostname = settings.hostname or transport.name
        self.sessions = policy.SessionCount(settings.max_sessions_per_client)
        metrics = transport.metrics
        self._sessions = metrics.mail_sessions.labels(listener)
        self._open = metrics.mail_sessions_open.labels(listener)
        self._messages = metrics.mail_messages.labels(listener)
        self._bytes = metrics.mail_bytes.labels(listener)
        self._errors = metrics.mail_errors.labels(listener)

    @property
    def size_limit(self) -> int:
        """The largest message any database takes (EHLO's SIZE)."""
        return self.transport.config.largest_max_item_size()

    def protocol(self) -> SMTP:
        """A session (one connection)."""
        kind = _LmtpSession if self.listener is Listener.LMTP else _SmtpSession
        return kind(
            self,
            hostname=self.hostname,
            ident="dag-replication transport",
            data_size_limit=self.size_limit,
            enable_SMTPUTF8=True,
            tls_context=self.tls,
            timeout=self.settings.idle_timeout.total_seconds(),
            auth_require_tls=True,
            authenticator=self.authenticate,
            auth_exclude_mechanism=[] if self.tls else ["PLAIN", "LOGIN"],
        )

    async def start(self, sockets: list[socket.socket]) -> list[asyncio.Server]:
        loop = asyncio.get_running_loop()
        return [await loop.create_server(self.protocol, sock=sock) for sock in sockets]

    def refused(self, line: str) -> None:
        code, _, rest = line.partition(" ")
        status = rest.split(" ", 1)[0] if rest[:1] in ("4", "5") and "." in rest[:4] else ""
        self.transport.metrics.mail_refusals.labels(self.listener, code[:3], status).inc()

    # ---- aiosmtpd's hooks -----------------------------------------------------------------

    def authenticate(
        self, server: SMTP, session: Session, envelope: Envelope, mechanism: str, data: Any
    ) -> AuthResult:
        """AUTH PLAIN/LOGIN: the login names a credential holding `store`, the password is
        one of its secrets (compared as every credential's are: `Credentials.identify`)."""
        if not isinstance(data, LoginPassword):
            return AuthResult(success=False, handled=False)
        login = data.login.decode("utf-8", "replace")
        found = self.credentials().identify(data.password.decode("utf-8", "replace"))
        if found is None or found.name != login or not found.holds(Role.STORE):
            logger.info("%s AUTH %s refused for %r from %s", self.listener, mechanism, login,
                        session.peer)  # fmt: skip
            return AuthResult(success=False, handled=False)
        return AuthResult(success=True, auth_data=found.name)

    async def handle_EHLO(
        self, server: SMTP, session: Session, envelope: Envelope, hostname: str,
        responses: list[str],
    ) -> list[str]:  # fmt: skip
        session.host_name = hostname
        return [*responses[:-1], "250-PIPELINING", "250-ENHANCEDSTATUSCODES", responses[-1]]

    async def handle_MAIL(
        self, server: SMTP, session: Session, envelope: _Envelope, address: str,
        options: list[str],
    ) -> str:  # fmt: skip
        if (
            self.listener is Listener.SMTP
            and not session.authenticated
            and not policy.trusted(_peer(session), self.settings.trusted_networks)
        ):
            return str(policy.AUTH_REQUIRED)
        for option in options:
            key, _, value = option.partition("=")
            if key.upper() == "SIZE" and value.isdigit():
                envelope.declared_size = int(value)
        envelope.mail_from = address
        envelope.mail_options.extend(options)
        return "250 2.1.0 OK"

    async def handle_RCPT(
        self, server: SMTP, session: Session, envelope: _Envelope, address: str,
        options: list[str],
    ) -> str:  # fmt: skip
        if len(envelope.rcpt_tos) >= self.settings.max_recipients:
            return str(policy.TOO_MANY_RECIPIENTS)
        try:
            found = await self.transport.resolve_first(policy.mailboxes_of(address))
        except ClusterStoreError as exc:
            logger.warning("%s RCPT %s: the directory cannot be read: %s", self.listener,
                           address, exc)  # fmt: skip
            return str(policy.DIRECTORY_UNREADABLE)
        if found is None:
            return str(policy.unknown_recipient(address))
        declared = envelope.declared_size
        if declared is not None and declared > found.max_item_size:
            return str(policy.too_large(declared, found.max_item_size, found.database))
        envelope.rcpt_tos.append(address)
        envelope.rcpt_options.extend(options)
        envelope.accepted.append(found)
        return str(policy.OK)

    async def handle_exception(self, error: Exception) -> str:
        self._errors.inc()
        logger.exception("%s session: unexpected %s", self.listener, type(error).__name__)
        return "451 4.3.0 an error of the transport; try again later"

    # ---- the session's life and its message ----------------------------------------------

    def opened(self, peer: str) -> Reply | None:
        """A session from `peer` begins: the refusal that ends it at once, or None."""
        self._sessions.inc()
        if self.listener is Listener.LMTP and not policy.trusted(
            peer, self.settings.trusted_networks
        ):
            return policy.UNTRUSTED
        if not self.sessions.admit(peer):
            return policy.BUSY
        self._open.inc()
        return None

    def closed(self, peer: str) -> None:
        self.sessions.leave(peer)
        self._open.dec()

    async def take(
        self, *, session: Session, envelope: _Envelope, raw: Raw, protocol: str
    ) -> list[Reply]:
        """Queue the message `raw` (a DATA's pieces) for the envelope's accepted recipients:
        one reply for each (LMTP), in their order."""
        recipients = envelope.rcpt_tos
        hop = Hop(
            helo=session.host_name or "", peer=_peer(session), by=self.hostname,
            protocol=protocol, when=self.transport.clock.now().astimezone(UTC),
            recipient=recipients[0] if len(set(recipients)) == 1 else None,
        )  # fmt: skip
        prepared = policy.prepare(raw, hop, sender=envelope.mail_from or "",
                                  recipients=recipients)  # fmt: skip
        mailboxes = list(dict.fromkeys(r.mailbox for r in envelope.accepted))
        try:
            message = Queued.of_message(
                prepared.head, prepared.body, message_id=prepared.message_id,
                recipients=mailboxes, folder="Inbox",
            )  # fmt: skip
        except ValidationError as exc:  # nothing a client sends should get here; said if so
            logger.warning("%s: a message not taken: %s", self.listener, exc)
            return [Reply(554, "5.6.0", "the message cannot be stored")] * len(recipients)
        size = message.size
        over = {r.mailbox: r for r in envelope.accepted if size > r.max_item_size}
        if over and self.listener is Listener.SMTP:
            r = next(iter(over.values()))
            return [policy.too_large(size, r.max_item_size, r.database)]
        fits = [m for m in mailboxes if m not in over]
        done: Reply = policy.QUEUE_UNAVAILABLE
        if fits:
            try:
                submitted = await self.transport.enqueue(message.replace(recipients=fits))
            except (sqlite3.Error, OSError):
                pass
            else:
                if submitted.new:
                    self._messages.inc()
                    self._bytes.inc(message.length)
                item = item_id_for(message.message_id)
                done = Reply(250, "2.0.0", f"{message.message_id} queued as {item}")
        return [
            policy.too_large(size, r.max_item_size, r.database) if r.mailbox in over else done
            for r in envelope.accepted
        ]


def _peer(session: Session) -> str:
    peer = session.peer
    if isinstance(peer, tuple) and peer:
        return str(peer[0])
    return str(peer or "")


class _Mail(SMTP):
    """What both listeners' sessions do beyond aiosmtpd's (mixed in before SMTP or LMTP)."""

    line_length_limit = READ_LIMIT  # the reader's bound; a line's own is mail_policy's

    def __init__(self, service: MailService, **kw: Any) -> None:
        self.service = service
        self._in_data = False  # a DATA's content is being read
        super().__init__(service, **kw)

    def _create_envelope(self) -> _Envelope:
        return _Envelope()

    def _getaddr(self, arg: str) -> tuple[str | None, str | None]:
        """aiosmtpd's `_getaddr` (an address of MAIL or RCPT and the rest of the line; None,
        None: not one), without the class it makes at each call."""
        if not arg:
            return "", ""
        try:
            if arg.lstrip().startswith("<"):
                address, rest = get_angle_addr(arg)
            else:
                address, rest = get_addr_spec(arg)
        except HeaderParseError:
            return None, None
        addr = address.addr_spec
        if self.local_part_limit and len(addr.rpartition("@")[0]) > self.local_part_limit:
            return None, None
        return addr, rest

    async def push(self, status: Any) -> None:
        text = status if isinstance(status, str) else bytes(status).decode("utf-8", "replace")
        for line in text.split("\r\n"):
            if line[:1] in ("4", "5"):
                self.service.refused(line)
        await super().push(status)

    async def _handle_client(self) -> None:
        assert self.session is not None
        peer = _peer(self.session)
        refusal = self.service.opened(peer)
        if refusal is not None:
            await self.push(str(refusal))
            assert self.transport is not None
            self.transport.close()
            return
        try:
            await super()._handle_client()
        finally:
            self.service.closed(peer)

    def _timeout_cb(self) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.service.refused(str(policy.IDLE))
            self._writer.write(f"{policy.IDLE}\r\n".encode())
        super()._timeout_cb()

    def _protocol(self) -> str:
        """RFC 3848's name of the way the message came."""
        assert self.session is not None
        if isinstance(self, LMTP):
            name = "LMTP"
        else:
            name = "ESMTP" if self.session.extended_smtp else "SMTP"
        if self._tls_protocol is not None:
            name += "S"
        if self.session.authenticated:
            name += "A"
        return name

    async def smtp_DATA(self, arg: str | None) -> None:
        if await self.check_helo_needed():
            return
        envelope = self.envelope
        assert isinstance(envelope, _Envelope) and self.session is not None
        if not envelope.rcpt_tos:
            await self.push("503 5.5.1 Error: need RCPT command")
            return
        if arg:
            await self.push("501 5.5.4 Syntax: DATA")
            return
        await self.push("354 End data with <CR><LF>.<CR><LF>")
        share = _Share(self.service.transport.memory, self.service.size_limit)
        try:
            raw, fault = await self._read_message(share)
            if fault is not None:
                replies = [fault]
            else:
                replies = await self.service.take(
                    session=self.session, envelope=envelope, raw=raw, protocol=self._protocol()
                )
        finally:
            share.release()
        if not isinstance(self, LMTP):
            replies = replies[:1]  # SMTP: one reply for the message
        elif len(replies) == 1:
            replies = replies * len(envelope.rcpt_tos)  # RFC 2033: one for each recipient
        self._set_post_data_state()
        await self.push("\r\n".join(str(r) for r in replies))

    async def _read_message(self, share: _Share) -> tuple[tuple[bytes, ...], Reply | None]:
        """The message up to the lone dot (its dot-stuffing undone), or what is wrong with
        it; a message refused is read to its end all the same, and not kept.  Read in
        pieces (`data_reader`), each checked whole (`mail_policy.Content`), and kept as
        those pieces, never joined (the queue writes them one after the other: a 1 MiB
        message joined was a fresh mapping and a copy of it, ~0.5 ms of the transport's
        CPU, issue 49); the memory budget is grown per piece, the idle timer reset as bytes
        arrive (`data_received`)."""
        limit = self.service.size_limit
        content = policy.Content()
        parts: list[bytes] = []
        size = 0
        fault: Reply | None = None
        self._in_data = True
        try:
            async for piece in data_reader.pieces(self._reader):
                if fault is not None:
                    continue  # read to the end, not kept
                block = content.feed(piece)
                fault = content.fault
                if fault is None and block:
                    size += len(block)
                    if size > limit:
                        fault = policy.too_large(size, limit, "every database")
                    else:
                        try:
                            await share.cover(size)
                        except Overloaded:
                            fault = policy.NO_MEMORY
                        else:
                            parts.append(block)
                if fault is not None:
                    parts.clear()
                    share.release()
        finally:
            self._in_data = False
        return tuple(parts), fault or content.end()

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        if self._in_data:  # a DATA's bytes arriving: the session is not idle (RFC 5321 4.5.3.2.6)
            self._reset_timeout()


class _SmtpSession(_Mail):
    pass


class _LmtpSession(_Mail, LMTP):
    pass
