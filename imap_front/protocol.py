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
"""

from __future__ import annotations

import re
from argparse import Namespace
from asyncio import StreamReader, StreamWriter
from contextlib import AsyncExitStack, closing
from ssl import SSLContext
from typing import Any

from proxyprotocol.sock import SocketInfo
from pymap.config import BackendCapability, IMAPConfig
from pymap.context import connection_exit
from pymap.imap import IMAPConnection, IMAPServer
from pymap.imap.state import ConnectionState
from pymap.interfaces.login import LoginInterface
from pymap.parsing.command import Command
from pymap.parsing.response import (
    CommandResponse,
    Response,
    ResponseBad,
    ResponseBye,
    ResponseCode,
    ResponseNo,
    ResponseOk,
)
from pymap.parsing.state import ExpectContinuation, ParsingInterrupt, ParsingState
from pysasl import SASLAuth

from imap_front.metrics import FrontMetrics

_TAG = re.compile(rb"[\x21-\x7e]{1,64}")
_SYNC_LITERAL = re.compile(rb"{(\d+)}\r?\n$")
_PLUS_LITERAL = re.compile(rb"{(\d+)\+}\r?\n$")


class FrontConfig(IMAPConfig):
    """pymap's settings for the front: our TLS context, the literal limit as APPENDLIMIT,
    no login before TLS, no DNS lookups (greeting, DNSBL)."""

    def __init__(
        self, *, host: str, port: int, ssl_context: SSLContext | None, max_line: int,
        max_literal: int,
    ) -> None:  # fmt: skip
        args = Namespace(passlib_cfg=None, proxy_protocol=None, inherited_sockets=None)
        super().__init__(
            args, host=host, port=port, ssl_context=ssl_context,
            tls_enabled=ssl_context is not None, max_append_len=max_literal,
            reject_dnsbl=False, invalid_user_sleep=0.0,
        )  # fmt: skip
        self.max_line = max_line
        self.max_literal = max_literal
        self.metrics: FrontMetrics | None = None  # set by serve: commands counted

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


class FrontState(ConnectionState):
    """pymap's connection state, the loopback exception taken out of its greeting."""

    async def do_greeting(self) -> CommandResponse:
        return ResponseOk(b"*", self.config.greeting, self.capability)


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

    __slots__ = ["max_literal", "metrics"]

    def __init__(
        self, commands: Any, config: FrontConfig, reader: StreamReader, writer: StreamWriter,
        sock_info: SocketInfo,
    ) -> None:  # fmt: skip
        super().__init__(commands, config, reader, writer, sock_info)
        self.max_literal = config.max_literal
        self.metrics = config.metrics

    async def write_response(self, resp: Response) -> None:
        await super().write_response(resp)
        if self.metrics is not None:
            self.metrics.answered(resp)

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

    async def read_command(self, state: ConnectionState) -> Command:
        while True:
            line = await self.readline()
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
                        return cmd
            except _Refused:
                await self.write_response(
                    ResponseNo(
                        _tag(line),
                        b"Literal over %d bytes: not sent." % self.max_literal,
                        ResponseCode.of(b"TOOBIG"),
                    )
                )


class FrontServer(IMAPServer):
    """pymap's server callback, making our connections and states."""

    def __init__(self, login: LoginInterface, config: FrontConfig) -> None:
        super().__init__(login, config)
        self._front: FrontConfig = config

    async def __call__(
        self, reader: StreamReader, writer: StreamWriter, sock_info: SocketInfo
    ) -> None:
        conn = FrontConnection(self.commands, self._front, reader, writer, sock_info)
        state = FrontState(self._login, self._front)
        async with AsyncExitStack() as stack:
            connection_exit.set(stack)
            stack.enter_context(closing(conn))
            await conn.run(state)
