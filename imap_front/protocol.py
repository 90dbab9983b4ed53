"""pymap's IMAP server as the front runs it: our limits and refusals, as subclasses of
pymap 0.36.7's classes (pinned exactly; `tests/imap_front/test_protocol.py` fails if an
upgrade moves what is overridden here).  What each fixes, found by the evaluation
(docs/concepts/imap.md, "What it gets wrong for us"):

- **A literal is refused before it is read.**  pymap reads a `LITERAL+` literal whole
  (`readexactly`) before judging it; here one over `max_literal` is answered
  `BAD [TOOBIG]` and the connection closed before a byte of it is read (RFC 7888: the
  client has already started sending it).  A synchronizing literal over the limit is
  answered `NO [TOOBIG]` instead of the `+` continuation, and the session goes on.
- **A long line is not a server bug.**  A command line over `max_line` (outside literals)
  overran asyncio's stream limit into `BYE [SERVERBUG]` and a traceback; here it is
  `* BYE [TOOBIG] Line too long.` and the connection closed, the line not read further.
- **No clear-text login, loopback included.**  pymap offers LOGIN and AUTH=PLAIN before
  STARTTLS to a peer on 127.0.0.1 (`from_localhost`), which behind a sidecar proxy is
  every client; here before TLS the capability says LOGINDISABLED, loopback or not, and
  a front without TLS offers no login at all.

And what it adds (docs/concepts/imap.md, "Users and credentials", "Limits for bad input"):
ENABLE and NAMESPACE (`commands.py`), CONDSTORE (`condstore.py`, `condstore_state.py`),
implicit TLS on a port of its own (no STARTTLS, login offered from the first line), the
session bounds and the failed-login waits of `limits.py` (`* BYE [LIMIT]` at the greeting,
`NO [LIMIT]` to a login, the connection
closed after `LOGIN_FAILURES_PER_CONNECTION` failures), and the autologout of a client
silent for `idle_timeout` outside IDLE (`* BYE Autologout; idle for too long.`).
"""

from __future__ import annotations

import asyncio
import logging
import re
import sys
from argparse import Namespace
from asyncio import StreamReader, StreamWriter
from collections.abc import Sequence
from contextlib import AsyncExitStack, closing
from ssl import SSLContext
from typing import Any

from proxyprotocol.sock import SocketInfo
from pymap.config import BackendCapability, IMAPConfig
from pymap.context import connection_exit
from pymap.exceptions import InvalidAuth, MailboxNotFound, ResponseError
from pymap.imap import IMAPConnection, IMAPServer
from pymap.imap.state import ConnectionState
from pymap.interfaces.login import LoginInterface
from pymap.interfaces.session import SessionInterface
from pymap.parsing.command import Command
from pymap.parsing.command.select import IdleCommand
from pymap.parsing.commands import Commands
from pymap.parsing.response import (
    CommandResponse,
    Response,
    ResponseBad,
    ResponseBye,
    ResponseCode,
    ResponseNo,
    ResponseOk,
    UntaggedResponse,
)
from pymap.parsing.state import ExpectContinuation, ParsingInterrupt, ParsingState
from pysasl import SASLAuth
from pysasl.creds.server import ServerCredentials

from dag_common.clock import Clock
from imap_front.commands import (
    FRONT_COMMANDS,
    NAMESPACE_RESPONSE,
    EnableCommand,
    NamespaceCommand,
    enabled,
)
from imap_front.condstore import CONDSTORE_COMMANDS
from imap_front.condstore_state import CondstoreState
from imap_front.errors import Bye
from imap_front.fetch_bodies import WRITE_AT
from imap_front.limits import LOGIN_FAILURES_PER_CONNECTION, LoginThrottle, Sessions
from imap_front.metrics import FrontMetrics
from imap_front.read_ahead import COMMAND, Read

logger = logging.getLogger(__name__)

_log = logging.getLogger("pymap.imap")  # pymap's connection log: its debug lines
_TAG = re.compile(rb"[\x21-\x7e]{1,64}")
_SYNC_LITERAL = re.compile(rb"{(\d+)}\r?\n$")
_PLUS_LITERAL = re.compile(rb"{(\d+)\+}\r?\n$")
# An idler's selected folder deleted, or it or a parent renamed (`handle_updates`)
FOLDER_GONE = b"Selected folder was deleted or renamed: select it by its name now."


class FrontConfig(IMAPConfig):
    """pymap's settings for the front: our TLS context, the literal limit as APPENDLIMIT,
    no login before TLS, no DNS lookups (greeting, DNSBL)."""

    def __init__(
        self, *, host: str, port: int, ssl_context: SSLContext | None, max_line: int,
        max_literal: int, idle_timeout: float = 1800.0,
    ) -> None:  # fmt: skip
        args = Namespace(passlib_cfg=None, proxy_protocol=None, inherited_sockets=None)
        super().__init__(
            args, host=host, port=port, ssl_context=ssl_context,
            tls_enabled=ssl_context is not None, max_append_len=max_literal,
            reject_dnsbl=False, invalid_user_sleep=0.0,
        )  # fmt: skip
        self.max_line = max_line
        self.max_literal = max_literal
        self.idle_timeout = idle_timeout
        self.metrics: FrontMetrics | None = None  # set by serve: commands counted

    @property
    def commands(self) -> Commands:
        commands = super().commands
        for command in (*FRONT_COMMANDS, *CONDSTORE_COMMANDS):
            commands.register(command)
        return commands

    @property
    def login_capability(self) -> Sequence[bytes]:
        return [*super().login_capability, b"ENABLE", b"NAMESPACE", b"CONDSTORE"]

    @property
    def backend_capability(self) -> BackendCapability:
        # IDLE: fed by the node's change feed (folders.py).
        return BackendCapability(idle=True, object_id=True, multi_append=True)

    @property
    def initial_auth(self) -> SASLAuth:
        return SASLAuth([])  # nothing before TLS; without TLS, nothing at all

    @property
    def greeting(self) -> bytes:
        return b"imap_front ready"


class _LoginRefused(ResponseError):
    """A login refused with a code (LIMIT), or the last failure a connection may have."""

    def __init__(self, text: bytes, code: bytes | None, *, bye: bool = False) -> None:
        super().__init__(text)
        self.text, self.code, self.bye = text, code, bye

    def get_response(self, tag: bytes) -> ResponseNo:
        code = ResponseCode.of(self.code) if self.code else None
        response = ResponseNo(tag, self.text, code)
        if self.bye:
            response.add_untagged(ResponseBye(b"Too many failed logins."))
        return response


class FrontState(CondstoreState):
    """pymap's connection state: no loopback exception in its greeting, login offered from
    the start on the implicit-TLS port, ENABLE and NAMESPACE, and a login held to the
    session bound and the failed-login waits."""

    def __init__(
        self, login: LoginInterface, config: FrontConfig, *, address: str, sessions: Sessions,
        throttle: LoginThrottle, clock: Clock, implicit_tls: bool = False,
    ) -> None:  # fmt: skip
        super().__init__(login, config)
        self._address = address
        self._sessions = sessions
        self._throttle = throttle
        self._clock = clock
        self._failures = 0
        if implicit_tls:  # the connection is TLS from its first byte
            self.auth = config.tls_auth
            self._capability = [c for c in self._capability if c != b"STARTTLS"]

    async def do_greeting(self) -> CommandResponse:
        return ResponseOk(b"*", self.config.greeting, self.capability)

    async def _login(self, creds: ServerCredentials) -> SessionInterface:
        stack = connection_exit.get()
        try:
            authenticated = await self.login.authenticate(creds)
            authorized = await self.login.authorize(authenticated, creds.authzid)
        except InvalidAuth:
            self._failures += 1
            count, delay = self._throttle.failed(self._address)
            logger.warning("failed login for %r from %s (%d from there lately)",
                           creds.authcid[:64], self._address, count)  # fmt: skip
            await self._clock.sleep(delay)
            if self._failures >= LOGIN_FAILURES_PER_CONNECTION:
                raise _LoginRefused(b"Invalid authentication credentials.",
                                b"AUTHENTICATIONFAILED", bye=True) from None  # fmt: skip
            raise
        user = authorized.name
        if not self._sessions.login(user):
            most = self._sessions.max_per_user
            raise _LoginRefused(b"Too many sessions for this user (%d)." % most, b"LIMIT")
        try:
            session = await stack.enter_async_context(authorized.new_session())
        except BaseException:
            self._sessions.logout(user)
            raise
        stack.callback(self._sessions.logout, user)
        return session

    async def do_enable(self, cmd: EnableCommand) -> tuple[CommandResponse, None]:
        if b"CONDSTORE" in cmd.capabilities:
            self.condstore = True
        response = ResponseOk(cmd.tag, b"ENABLE completed.")
        response.add_untagged(UntaggedResponse(enabled(cmd.capabilities)))
        return response, None

    async def do_namespace(self, cmd: NamespaceCommand) -> tuple[CommandResponse, None]:
        response = ResponseOk(cmd.tag, b"NAMESPACE completed.")
        response.add_untagged(UntaggedResponse(NAMESPACE_RESPONSE))
        return response, None


class _Refused(Exception):
    """A synchronizing literal over the limit: answered NO [TOOBIG], the command dropped."""

    def __init__(self, size: int) -> None:
        super().__init__(size)
        self.size = size


def _tag(line: bytes | memoryview) -> bytes:
    head = bytes(line[:65]).split(b" ", 1)[0]
    return head if _TAG.fullmatch(head) else b"*"


class FrontConnection(IMAPConnection):
    """One client's connection, its lines and literals held to the front's limits."""

    __slots__ = ["commands_read", "idle_timeout", "max_literal", "metrics"]

    def __init__(
        self, commands: Any, config: FrontConfig, reader: StreamReader, writer: StreamWriter,
        sock_info: SocketInfo,
    ) -> None:  # fmt: skip
        super().__init__(commands, config, reader, writer, sock_info)
        self.max_literal = config.max_literal
        self.idle_timeout = config.idle_timeout
        self.metrics = config.metrics
        self.commands_read = 0

    async def handle_updates(self, state: ConnectionState, done: Any, cmd: IdleCommand) -> None:
        """IDLE's updates; a session that cannot go on (`errors.Bye`: its mailbox moved to a
        folder of another UIDVALIDITY) says `* BYE [UNAVAILABLE]` at once and is closed.

        The selected folder gone (another session deleted it, or renamed it or a parent:
        the change feed woke the idler, `Folder._names`) says `* BYE [NONEXISTENT]` at once
        and is closed, as Dovecot does and RFC 2180 3.2 allows: pymap would hold the
        failure until the client's DONE and answer that tagged NO, so an idler (which says
        DONE only after 29 minutes) would idle on a name that is gone and never be told.
        Outside IDLE such a folder is answered NO, command by command."""
        try:
            await super().handle_updates(state, done, cmd)
        except Bye as exc:
            await self.write_response(exc.bye())
            self.writer.close()
        except MailboxNotFound:
            await self.write_response(ResponseBye(FOLDER_GONE, ResponseCode.of(b"NONEXISTENT")))
            self.writer.close()

    async def send_error_disconnect(self) -> None:
        """pymap's `* BYE [SERVERBUG]`, the error logged with its traceback first (pymap
        logs nothing of it: a front's bug would leave no trace)."""
        exc = sys.exc_info()[1]  # a client gone (EOF, reset) is no error
        if exc is not None and not isinstance(
            exc, asyncio.CancelledError | ConnectionError | EOFError
        ):
            logger.error("a command failed: the session ends * BYE [SERVERBUG]", exc_info=exc)
        await super().send_error_disconnect()

    async def write_response(self, resp: Response) -> None:
        """pymap's, with a command's untagged answers gathered into writes of `WRITE_AT`
        bytes (pymap wrote each FETCH line as its own TLS record and `send`), and the
        answer rendered a second time for the debug log only when that log is on."""
        untagged = getattr(resp, "_untagged", None)
        if not untagged:
            await super().write_response(resp)
        else:
            await self._write_gathered(resp, untagged)
        if self.metrics is not None:
            self.metrics.answered(resp)

    async def _write_gathered(self, resp: Response, untagged: list[UntaggedResponse]) -> None:
        out = _Gathered()
        try:
            for each in untagged:
                stream = getattr(each, "stream", None)
                if stream is not None:  # a FETCH of bodies: handed on as it goes
                    await stream(out, self._send)
                else:
                    await each.async_write(out)  # a FETCH's body is loaded here (its hook)
                if len(out.data) >= WRITE_AT:
                    await self._send(out)
            Response.write(resp, out)  # the tagged line itself
            await self._send(out)
        except ConnectionError:
            return
        if _log.isEnabledFor(logging.DEBUG):
            self._print("%s <--| %s", bytes(resp))

    async def _send(self, out: _Gathered, data: bytes | memoryview | None = None) -> None:
        """What `out` holds, then `data` as it is (a large body: not copied into `out`),
        to the transport; then wait until it has taken them."""
        if out.data:
            self.writer.write(out.take())
        if data is not None:
            self.writer.write(data)
        await self.writer.drain()

    async def _line(self) -> bytes:
        try:
            return await self.reader.readline()
        except ValueError:  # the stream's limit (max_line) overrun: not read further
            await self.write_response(ResponseBye(b"Line too long.", ResponseCode.of(b"TOOBIG")))
            raise EOFError() from None

    async def readline(self) -> memoryview:
        buf = bytearray(await self._line())
        while True:
            if not buf.endswith(b"\n"):
                raise EOFError()
            plus = _PLUS_LITERAL.search(buf) if buf.endswith((b"+}\n", b"+}\r\n")) else None
            if plus is None:
                self._print("%s -->| %s", buf)
                return memoryview(buf)
            size = int(plus.group(1))
            if size > self.max_literal:
                await self.write_response(
                    ResponseBad(
                        _tag(buf),
                        b"Literal over %d bytes: not read." % self.max_literal,
                        ResponseCode.of(b"TOOBIG"),
                    )
                )
                raise EOFError()  # its bytes are on their way: the session cannot go on
            buf += await self.reader.readexactly(size)
            buf += await self._line()

    async def _interrupt(
        self, state: Any, interrupt: ParsingInterrupt, continuations: list[memoryview]
    ) -> None:
        expected = interrupt.expected
        if isinstance(expected, ExpectContinuation) and expected.literal_length > self.max_literal:
            raise _Refused(expected.literal_length)
        await super()._interrupt(state, interrupt, continuations)

    async def _next_line(self) -> memoryview:
        """A command's first line, within `idle_timeout` (IDLE's DONE is read elsewhere)."""
        try:
            return await asyncio.wait_for(self.readline(), self.idle_timeout)
        except TimeoutError:
            await self.write_response(ResponseBye(b"Autologout; idle for too long."))
            raise EOFError() from None

    def _pipelined(self) -> bool:
        """Whether the client has sent another command line already (the reader holds it)."""
        return b"\n" in getattr(self.reader, "_buffer", b"")

    async def read_command(self, state: ConnectionState) -> Command:
        while True:
            line = await self._next_line()
            sync = _SYNC_LITERAL.search(line)
            try:
                if sync is not None and int(sync.group(1)) > self.max_literal:
                    raise _Refused(int(sync.group(1)))
                conts: list[memoryview] = []
                while True:
                    params = self.params.copy(ParsingState(continuations=conts))
                    try:
                        cmd, _ = self.commands.parse(line, params)
                    except ParsingInterrupt as interrupt:
                        await self._interrupt(state, interrupt, conts)
                    else:
                        self.commands_read += 1
                        COMMAND.set(Read(self.commands_read, self._pipelined()))
                        return cmd
            except _Refused:
                await self.write_response(
                    ResponseNo(
                        _tag(line),
                        b"Literal over %d bytes: not sent." % self.max_literal,
                        ResponseCode.of(b"TOOBIG"),
                    )
                )


class _Gathered:
    """Bytes a response writes, kept until they are handed to the transport at once."""

    __slots__ = ("data",)

    def __init__(self) -> None:
        self.data = bytearray()

    def write(self, data: bytes) -> None:
        self.data += data

    def take(self) -> bytearray:
        """The bytes held, handed on as they are (not copied): `out` starts a new buffer."""
        taken, self.data = self.data, bytearray()
        return taken


class FrontServer(IMAPServer):
    """pymap's server callback, making our connections and states; a connection past the
    front's bound is refused `* BYE [LIMIT]` before any greeting."""

    def __init__(
        self, login: LoginInterface, config: FrontConfig, *, sessions: Sessions,
        throttle: LoginThrottle, clock: Clock, implicit_tls: bool = False,
    ) -> None:  # fmt: skip
        super().__init__(login, config)
        self._front: FrontConfig = config
        self._sessions = sessions
        self._throttle = throttle
        self._clock = clock
        self._implicit_tls = implicit_tls
        self._running: set[asyncio.Task[Any]] = set()  # the connections being served

    async def end_sessions(self) -> None:
        """At shutdown, before the node client closes: each connection's task cancelled
        (a command waiting for an active, an APPEND sent again, ends there) and awaited."""
        tasks = [t for t in self._running if not t.done()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def __call__(
        self, reader: StreamReader, writer: StreamWriter, sock_info: SocketInfo
    ) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._running.add(task)
            task.add_done_callback(self._running.discard)
        if not self._sessions.connect():
            bye = ResponseBye(b"Too many sessions on this front.", ResponseCode.of(b"LIMIT"))
            try:
                writer.write(bytes(bye))
                await writer.drain()
            except ConnectionError:
                pass
            finally:
                writer.close()
            return
        try:
            address = str(sock_info.peername_ip or sock_info.peername_str or "unknown")
            conn = FrontConnection(self.commands, self._front, reader, writer, sock_info)
            state = FrontState(
                self._login, self._front, address=address, sessions=self._sessions,
                throttle=self._throttle, clock=self._clock, implicit_tls=self._implicit_tls,
            )  # fmt: skip
            async with AsyncExitStack() as stack:
                connection_exit.set(stack)
                stack.enter_context(closing(conn))
                await conn.run(state)
        finally:
            self._sessions.disconnect()
