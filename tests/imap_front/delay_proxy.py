"""A TCP proxy in front of one node's HTTPS port that can hold one answer's bytes until
told (no `tc netem` here): it ends the client's TLS with the node's own certificate, opens
its own TLS connection to the node, and reads each request's first line, so a test can say
"the answer to the next request whose line matches this, hold it" (`hold`), learn when the
node has answered it (`Held.answered`) and let it through later (`Held.release`).

Everything else passes untouched, in both directions, as it comes.  A connection's
requests follow each other (HTTP/1.1 with no pipelining: aiohttp's), so the client bytes
that come after an answer began start the next request."""

from __future__ import annotations

import asyncio
import contextlib
import re
import ssl
from dataclasses import dataclass, field
from pathlib import Path


@dataclass(eq=False)
class Held:
    """One request whose answer the proxy holds: `line` its request line once seen."""

    pattern: re.Pattern[bytes]
    seen: asyncio.Event = field(default_factory=asyncio.Event)
    answered: asyncio.Event = field(default_factory=asyncio.Event)  # bytes of it held
    released: asyncio.Event = field(default_factory=asyncio.Event)
    line: bytes = b""

    def release(self) -> None:
        self.released.set()


class DelayProxy:
    """Listens on 127.0.0.1 (`port`), forwards to `upstream` (host, port) over TLS."""

    def __init__(self, upstream: tuple[str, int], cert: Path, key: Path, ca: Path) -> None:
        self._upstream = upstream
        self._server_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        self._server_ctx.load_cert_chain(cert, key)
        self._client_ctx = ssl.create_default_context(cafile=str(ca))
        self._server: asyncio.Server | None = None
        self._wanted: list[Held] = []
        self._tasks: set[asyncio.Task[None]] = set()
        self._writers: set[asyncio.StreamWriter] = set()
        self.port = 0
        self.lines: list[bytes] = []  # every request line seen, in order

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0, ssl=self._server_ctx)
        self.port = self._server.sockets[0].getsockname()[1]

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    def hold(self, pattern: bytes) -> Held:
        """Hold the answer to the next request whose line matches `pattern` (a regex)."""
        held = Held(re.compile(pattern))
        self._wanted.append(held)
        return held

    async def close(self) -> None:
        for held in self._wanted:
            held.release()
        if self._server is not None:
            self._server.close()
        for writer in list(self._writers):
            writer.close()  # each connection's pumps end, and its task with them
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()

    def _claim(self, line: bytes) -> Held | None:
        for held in self._wanted:
            if not held.seen.is_set() and held.pattern.search(line):
                held.line = line
                held.seen.set()
                return held
        return None

    async def _serve(self, down_r: asyncio.StreamReader, down_w: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        self._writers.add(down_w)
        try:
            try:
                up_r, up_w = await asyncio.open_connection(
                    *self._upstream, ssl=self._client_ctx, server_hostname="127.0.0.1"
                )
            except OSError:
                return  # the node is gone: the client sees its connection closed
            self._writers.add(up_w)
            state = _Conn()
            pumps = [
                asyncio.ensure_future(self._requests(down_r, up_w, state)),
                asyncio.ensure_future(self._answers(up_r, down_w, state)),
            ]
            try:
                await asyncio.wait(pumps, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for pump in pumps:
                    pump.cancel()
                await asyncio.gather(*pumps, return_exceptions=True)
                up_w.close()
                self._writers.discard(up_w)
        finally:
            down_w.close()
            self._writers.discard(down_w)
            self._tasks.discard(task)

    async def _requests(
        self, down: asyncio.StreamReader, up: asyncio.StreamWriter, state: _Conn
    ) -> None:
        while chunk := await down.read(65536):
            if state.new_request:
                state.new_request = False
                line = chunk.split(b"\r\n", 1)[0]
                self.lines.append(line)
                state.held = self._claim(line)
            up.write(chunk)
            await up.drain()

    async def _answers(
        self, up: asyncio.StreamReader, down: asyncio.StreamWriter, state: _Conn
    ) -> None:
        while chunk := await up.read(65536):
            state.new_request = True
            held = state.held
            if held is not None:
                held.answered.set()
                await held.released.wait()
                state.held = None
            down.write(chunk)
            with contextlib.suppress(ConnectionError):
                await down.drain()


@dataclass(eq=False)
class _Conn:
    new_request: bool = True
    held: Held | None = None
