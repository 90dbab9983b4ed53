"""Block mode over a WebSocket: the active sends its open log's bytes as they become
durable, the copy answers how far it holds them (`frames.py` has the frames, `log/blocks.py`
the feed).

    GET /v1/databases/{db}/logs/blocks?generation=G&offset=O&node=N
                                                    (WebSocket; the cluster token)

Served only while the active is mounted and G is its open generation (409 otherwise: a copy
behind catches up in file mode first).  The active sends HELLO (its log signature and epoch),
the open log's durable bytes from O (what the copy does not hold yet; 0: from its header)
read from disk as one DATA frame, then every block
of the feed as DATA, with CLOSED after a generation's last bytes (its length and the CRC32C
of the whole file) and the next generation from its header on; HEARTBEAT when idle.  It
closes the connection when the copy falls further behind than the feed keeps, or when the
stream stops.  The copy sends ACK frames (generation, offset held durably).

The connection holds a `reader` of the feed from before it takes its position, so that the
writer makes blocks for every batch it begins meanwhile (none is made while no copy follows,
`log/blocks.py`).  A batch already being written when the copy came has no blocks: the feed
gives a gap where it ends, and the bytes up to it are read from the log's files (durable and
named once the gap is published) and sent as its blocks would have been, CLOSED frames and
all (`_send_from_files`): the copy gets every byte, in order, as from the feed.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import aiohttp
import crc32c
import orjson
from aiohttp import web

from dag_common.model import Position
from dag_common.tasks import cancel_and_wait
from replication_node.errors import LogShareError
from replication_node.log.blocks import BlockFeed, FeedBehind
from replication_node.log.logfile import HEADER_SIZE, OPEN_LOG_NAME, LogHeader, closed_log_name
from replication_node.shipping.frames import (
    BlockProtocolError,
    Frame,
    FrameKind,
    decode_frame,
    encode_frame,
)
from replication_node.shipping.interfaces import LogShareSource

logger = logging.getLogger(__name__)

_MAX_FRAME = 80 * 1024 * 1024  # a prefix of the largest log file, with room


def _conflict(message: str) -> web.HTTPConflict:
    return web.HTTPConflict(
        text=orjson.dumps({"error": message}).decode(), content_type="application/json"
    )


def _read_prefix(log_dir: Path, generation: int, length: int) -> bytes | None:
    """The first `length` bytes of E00.log if it is still `generation` (None: it rolled).
    Nothing of a generation may be durable yet (the roll that opened it held its header's
    block back while a staged body goes on into it, `log/writer.py`): then there is nothing
    to read, and the copy gets the generation from its header on, as the feed publishes it."""
    if length == 0:
        return b""
    try:
        with open(log_dir / OPEN_LOG_NAME, "rb") as f:
            data = f.read(length)
    except FileNotFoundError:
        return None
    try:
        header = LogHeader.decode(data)
    except Exception:
        return None
    if header.generation != generation or len(data) != length:
        return None
    return data


def _read_generation(log_dir: Path, generation: int, start: int, stop: int | None) -> bytes | None:
    """Bytes `start` to `stop` (None: its end) of `generation`'s file, durable; None if it is
    gone.  Closed, it has its generation's name; still open, it is E00.log, which a settle
    may rename meanwhile (then it has its name)."""
    closed = log_dir / closed_log_name(generation)
    for path in (closed, log_dir / OPEN_LOG_NAME, closed):
        try:
            with open(path, "rb") as f:
                if path != closed and _generation_of(f.read(HEADER_SIZE)) != generation:
                    continue
                f.seek(start)
                data = f.read() if stop is None else f.read(stop - start)
        except FileNotFoundError:
            continue
        return data if stop is None or len(data) == stop - start else None
    return None


def _generation_of(header: bytes) -> int | None:
    """The generation a log file's header names (None: not a header)."""
    try:
        return LogHeader.decode(header).generation
    except Exception:
        return None


async def _send_from_files(
    ws: web.WebSocketResponse, log_dir: Path, at: tuple[int, int, int], to: Position
) -> tuple[int, int, int]:
    """Send the log from `at` (generation, offset, the CRC32C of the generation so far) up
    to `to`, read from its files: what batches written while no copy followed made into no
    block (a gap, `log/blocks.py`), durable and named by the time the feed gives what follows
    it.  Each generation closed on the way ends with its CLOSED frame, as from the feed.
    Where it then stands; FeedBehind if a generation's file is gone."""
    generation, end, crc = at
    while Position(generation, end) < to:
        stop = to.offset if generation == to.generation else None
        data = await asyncio.to_thread(_read_generation, log_dir, generation, end, stop)
        if data is None:
            raise FeedBehind(f"generation {generation} is gone from the log's files")
        if data:
            await ws.send_bytes(encode_frame(Frame(FrameKind.DATA, generation, end, data)))
            crc, end = crc32c.crc32c(data, crc), end + len(data)
        if stop is None:
            await ws.send_bytes(encode_frame(Frame(FrameKind.CLOSED, generation, end, crc=crc)))
            generation, crc, end = generation + 1, 0, 0
    return generation, end, crc


async def serve_blocks(
    request: web.Request, source: LogShareSource, heartbeat: float
) -> web.StreamResponse:
    """The active's side of one copy's block-mode connection."""
    try:
        wanted = int(request.query["generation"])
        start = int(request.query.get("offset", "0"))
    except (KeyError, ValueError):
        raise web.HTTPBadRequest(text="generation and offset must be integers") from None
    node = request.query.get("node", "?")
    feed = source.block_feed()
    if feed is None:
        raise _conflict("the active copy is not mounted: no block mode")
    with feed.reader():  # from before its position: every batch begun from now has blocks
        return await _serve(request, source, feed, (wanted, start, node), heartbeat)


async def _serve(
    request: web.Request,
    source: LogShareSource,
    feed: BlockFeed,
    asked: tuple[int, int, str],
    heartbeat: float,
) -> web.StreamResponse:
    """`serve_blocks` once the connection reads the feed: `asked` is the generation and
    offset the copy asked for, and its node."""
    wanted, start, node = asked
    generation, durable, sequence = feed.position()
    if wanted != generation:
        raise _conflict(
            f"generation {wanted} is not the open log (generation {generation} is): a copy "
            "catches up in file mode before it follows in block mode"
        )
    if not 0 <= start <= durable:
        raise _conflict(f"offset {start} is beyond generation {generation}'s durable {durable}")
    prefix = await asyncio.to_thread(_read_prefix, source.log_dir, generation, durable)
    if prefix is None:
        raise _conflict(f"generation {generation} closed meanwhile; ask again")
    ws = web.WebSocketResponse(max_msg_size=_MAX_FRAME)
    await ws.prepare(request)
    info = source.share_info()
    hello = {"log_signature": info.log_signature, "epoch": info.epoch}
    reader = asyncio.create_task(_read_acks(ws, feed, node))
    feed.follower_joined(node)
    try:
        await ws.send_bytes(encode_frame(Frame(FrameKind.HELLO, payload=orjson.dumps(hello))))
        if start < durable:
            await ws.send_bytes(
                encode_frame(Frame(FrameKind.DATA, generation, start, prefix[start:]))
            )
        crc, end = crc32c.crc32c(prefix), durable
        async for block in feed.follow(sequence, idle=heartbeat):
            if ws.closed:
                break
            if block is None:
                await ws.send_bytes(encode_frame(Frame(FrameKind.HEARTBEAT)))
                continue
            if block.position < (generation, end):
                continue  # written before the prefix was read: the prefix holds it
            if block.position > (generation, end):  # written while no copy followed
                at = (generation, end, crc)
                at = await _send_from_files(ws, source.log_dir, at, block.position)
                generation, end, crc = at
            if block.gap:
                continue
            frame = Frame(FrameKind.DATA, block.generation, block.offset, block.data)
            await ws.send_bytes(encode_frame(frame, room=block.room))  # no copy of the data
            crc, end = crc32c.crc32c(block.data, crc), block.end
            if block.closed:
                await ws.send_bytes(encode_frame(Frame(FrameKind.CLOSED, generation, end, crc=crc)))
                generation, crc, end = generation + 1, 0, 0
    except FeedBehind as exc:
        logger.info("%s: block mode of %s ends: %s", request.path, node, exc)
    except (ConnectionError, RuntimeError) as exc:  # the copy went away
        logger.debug("%s: block mode of %s ends: %s", request.path, node, exc)
    finally:
        feed.follower_left(node)
        await cancel_and_wait([reader])
        await ws.close()
    return ws


async def _read_acks(ws: web.WebSocketResponse, feed: BlockFeed, node: str) -> None:
    """The copy's ACK frames: how far it holds the log durably (for synchronous commit)."""
    async for message in ws:
        if message.type is not aiohttp.WSMsgType.BINARY:
            continue
        try:
            frame = decode_frame(message.data)
        except BlockProtocolError as exc:
            logger.warning("block mode: a bad frame from %s: %s", node, exc)
            continue
        if frame.kind is FrameKind.ACK:
            feed.ack(node, frame.position)


class HttpBlockChannel:
    """A passive copy's end of the connection (implements interfaces.BlockChannel)."""

    def __init__(self, session: aiohttp.ClientSession, ws: aiohttp.ClientWebSocketResponse):
        self._session = session
        self._ws = ws

    async def receive(self) -> Frame | None:
        try:
            message = await self._ws.receive()
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:
            raise LogShareError(f"block mode connection broke: {exc!r}") from exc
        if message.type is aiohttp.WSMsgType.BINARY:
            return decode_frame(message.data)
        if message.type in (aiohttp.WSMsgType.CLOSE, aiohttp.WSMsgType.CLOSED):
            return None
        if message.type is aiohttp.WSMsgType.ERROR:
            raise LogShareError(f"block mode connection broke: {self._ws.exception()!r}")
        raise BlockProtocolError(f"unexpected block mode message {message.type.name}")

    async def ack(self, position: Position) -> None:
        try:
            await self._ws.send_bytes(encode_frame(Frame(FrameKind.ACK, *position)))
        except (aiohttp.ClientError, ConnectionError, RuntimeError) as exc:
            raise LogShareError(f"block mode connection broke: {exc!r}") from exc

    async def close(self) -> None:
        await self._ws.close()


async def connect_blocks(
    session: aiohttp.ClientSession,
    url: str,
    headers: dict[str, str],
    start: Position,
    node: str,
    silence: float,
) -> HttpBlockChannel:
    """Open block mode at `start` (the open generation, from an offset in it; LogShareError
    if the active refuses or is gone)."""
    generation, offset = start
    try:
        ws = await session.ws_connect(
            url,
            headers=headers,
            params={"generation": str(generation), "offset": str(offset), "node": node},
            max_msg_size=_MAX_FRAME,
            timeout=aiohttp.ClientWSTimeout(ws_receive=silence, ws_close=silence),
        )
    except aiohttp.WSServerHandshakeError as exc:
        raise LogShareError(f"the active refused block mode (HTTP {exc.status})") from exc
    except (aiohttp.ClientError, TimeoutError, OSError, RuntimeError) as exc:
        raise LogShareError(f"block mode: the active is unreachable: {exc!r}") from exc
    return HttpBlockChannel(session, ws)
