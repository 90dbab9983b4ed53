"""Block mode, the passive copy's half: follow the active's open log as it is written.

While the copy is connected and caught up (it has inspected every generation the active
closed), it follows the open generation over the block connection (`shipping/blocks.py`): each
DATA frame is appended to `Blocks/E<gen>.partial` and fsync'd, and acknowledged (how far the
copy holds the log durably, which a synchronous commit waits for).  When the active closes
the generation (CLOSED: the file's length and CRC32C), the buffer must equal the closed file:
it becomes `Blocks/E<gen>.log`, and the copier takes it from there instead of fetching it
(`take`), inspecting it exactly as a fetched one before it moves into the log directory.

The copy falls back to file mode, saying why, when the connection breaks or the active
drops it (it fell behind the feed), or a frame is malformed, fails its CRC, comes out of
order, or is of another log stream or epoch.  A bad frame is never written: the buffer keeps
what passed every check.  The buffer is kept across a broken connection and a restart of the
copy's process (its valid records; a torn tail, never acknowledged, cut): what it holds was
durable on the active and acknowledged, and should the active be lost, an activation of this
copy keeps it as the generation it stands for (`keep_buffer`, sealed and inspected as Attempt
Copy Last Logs keeps an open log), so that block mode loses at most the commits in flight.  A
new connection resumes it where it ended, from the same epoch only.  It is discarded when it
is shown not to be the active's (`BufferMismatch`: a close that does not match it, another
epoch), and once the copier holds its generation; nothing from it is replayed before its
generation is closed, matched and inspected.  It returns to block mode once caught up again.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import re
import uuid
from dataclasses import dataclass
from pathlib import Path

import crc32c
import orjson

from dag_common.backoff import Backoff
from dag_common.clock import Clock
from dag_common.durable import fsync_dir
from dag_common.model import CopyMode, Position
from replication_node.errors import LogFormatError, LogShareError
from replication_node.log.files import write_all
from replication_node.log.logfile import HEADER_SIZE, LogHeader, closed_log_name, scan
from replication_node.log.spares import SparePool, fit, new_file
from replication_node.passive.markers import Markers
from replication_node.shipping.frames import BlockProtocolError, Frame, FrameKind
from replication_node.shipping.interfaces import BlockChannel, LogSource

logger = logging.getLogger(__name__)


class BufferMismatch(BlockProtocolError):
    """What the buffer holds is not the active's (a close that does not match, a buffer of
    another epoch): it is discarded."""


@dataclass(frozen=True)
class Taken:
    """A closed generation as block mode received it: its bytes, and the file they were read
    from, named by its device and inode as read (a link to it is known to be that file)."""

    data: bytes
    path: Path
    file_id: tuple[int, int]

    @classmethod
    def read(cls, path: Path) -> Taken:
        with open(path, "rb") as f:
            st = os.fstat(f.fileno())
            return cls(f.read(), path, (st.st_dev, st.st_ino))

    def link(self, to: Path) -> bool:
        """Give the file the name `to` as well (a hard link), rather than writing its bytes
        again: they are on disk already, fsync'd block by block as they came, and a closed
        buffer is never written to.  False, and nothing left at `to`, if that cannot be done
        (released or replaced since it was read, `to` taken, another file system)."""
        try:
            os.link(self.path, to)
        except OSError:
            return False
        st = os.stat(to)
        if (st.st_dev, st.st_ino) != self.file_id:
            to.unlink(missing_ok=True)
            return False
        return True


_PARTIAL = re.compile(r"^E([0-9A-F]{8})-(\d+)\.partial$")


def _parse_partial(name: str) -> tuple[int, int] | None:
    """(generation, epoch) of a buffer's file name, or None."""
    match = _PARTIAL.match(name)
    return (int(match[1], 16), int(match[2])) if match else None


@dataclass(frozen=True, slots=True)
class BlockProgress:
    """What the copy's status says of block mode."""

    mode: CopyMode
    held: Position  # the open generation being received (0: none), held durably through
    reason: str | None  # why in file mode


class BlockReceiver:
    """Follows the active's open log while the copy is caught up; runs until cancelled."""

    def __init__(
        self,
        *,
        source: LogSource,
        node: str,
        directory: Path,
        markers: Markers,
        log_signature: uuid.UUID,
        clock: Clock,
        retry_interval: float = 1.0,
        check_interval: float = 0.1,
        spares: SparePool | None = None,
    ) -> None:
        self._source = source
        # Truncated generations a new buffer is written over (`log/spares.py`): a file of
        # the log's size already, its old bytes past what this one holds.
        self._spares = spares
        self._node = node
        self._dir = directory
        self._markers = markers
        self._log_signature = str(log_signature)
        self._clock = clock
        self._retry = retry_interval
        self._check = check_interval
        self.mode = CopyMode.FILE
        self.reason: str | None = "not caught up with the active yet"
        self.generation = 0  # the generation being received (0: none)
        self.epoch = 0  # the epoch of the active it came from
        self.offset = 0  # how far it is held durably
        self._crc = 0
        self._closed: dict[int, asyncio.Event] = {}
        self.fallbacks = 0

    def progress(self) -> BlockProgress:
        return BlockProgress(self.mode, Position(self.generation, self.offset), self.reason)

    # ---- what the copier asks --------------------------------------------------------------

    async def take(self, generation: int, wait: float) -> Taken | None:
        """The closed `generation` as received in block mode, or None (fetch it): waits up
        to `wait` seconds for it to close when it is the one being received."""
        path = self._dir / closed_log_name(generation)
        if not path.exists() and self.mode is CopyMode.BLOCK and generation == self.generation:
            event = self._closed.setdefault(generation, asyncio.Event())
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(event.wait(), wait)
        try:
            return await asyncio.to_thread(Taken.read, path)
        except FileNotFoundError:
            return None

    def release_through(self, generation: int) -> None:
        """The copier holds every generation through `generation`: drop their buffers."""
        if not self._dir.exists():
            return
        for entry in self._dir.iterdir():
            if entry.suffix == ".log" and entry.name.startswith("E"):
                with contextlib.suppress(ValueError):
                    if int(entry.stem[1:], 16) <= generation:
                        entry.unlink(missing_ok=True)
        for gen in [g for g in self._closed if g <= generation]:
            del self._closed[gen]

    # ---- the loop ----------------------------------------------------------------------------

    async def run(self) -> None:
        await asyncio.to_thread(self._recover)
        # Block mode is entered again `retry` after it ended, whyever it ended.
        retry = Backoff.fixed(self._retry)
        while True:
            while not self._caught_up():
                await self._clock.sleep(self._check)
            keep = False
            try:
                await self._follow(self._markers.last_log_inspected + 1)
                reason, keep = "the active ended the block connection", True
            except LogShareError as exc:  # the connection, not the data
                reason, keep = str(exc), True
            except BufferMismatch as exc:  # what the buffer holds is not the active's
                reason = str(exc)
            except (BlockProtocolError, LogFormatError) as exc:
                # The bad frame was never written: what the buffer holds passed every check.
                reason, keep = str(exc), True
            except OSError as exc:
                reason = str(exc)
            except Exception as exc:  # a bug here must not stop the copy: file mode works
                logger.exception("%s: block mode failed", self._dir)
                reason = f"block mode failed ({type(exc).__name__}: {exc})"
            self._fall_back(reason, keep=keep)
            await self._clock.sleep(retry.next())

    def _caught_up(self) -> bool:
        m = self._markers
        return m.connected and m.last_log_inspected >= m.last_log_generated

    def _fall_back(self, reason: str, *, keep: bool) -> None:
        if self.mode is CopyMode.BLOCK:
            self.fallbacks += 1
            logger.warning("%s: block mode ends, back to file mode: %s", self._dir, reason)
        self.mode, self.reason = CopyMode.FILE, reason
        if not keep or self.generation <= self._markers.last_log_inspected:
            self._discard_partial()
            self.generation, self.offset = 0, 0

    async def keep_buffer(self) -> bytes | None:
        """The buffer of the generation after LastLogInspected, for an activation to keep
        (None: none, or only a header).  Block mode stops first: nothing appends to it."""
        if self.generation != self._markers.last_log_inspected + 1 or self.offset <= HEADER_SIZE:
            return None
        return await asyncio.to_thread(self._held)

    def _held(self) -> bytes:
        """The bytes the buffer holds durably (a spare's old bytes may lie past them)."""
        with open(self._partial(), "rb") as f:
            return f.read(self.offset)

    async def _follow(self, generation: int) -> None:
        # A buffer kept from a broken connection goes on where it ended (what it holds was
        # acknowledged: it is never given up for a fresh copy of the same bytes).
        resume = self.generation == generation and self.offset > 0
        channel = await self._source.open_blocks(
            Position(generation, self.offset if resume else 0), self._node
        )
        try:
            epoch = await self._hello(await self._receive(channel))
            if resume and epoch != self.epoch:
                raise BufferMismatch(
                    f"the buffer of generation {generation} came from the active at epoch "
                    f"{self.epoch}; this one is at epoch {epoch}: received again"
                )
            await asyncio.to_thread(self._dir.mkdir, parents=True, exist_ok=True)
            if not resume:
                self._start(generation, epoch)
            self.mode, self.reason = CopyMode.BLOCK, None
            logger.info("%s: block mode from generation %d", self._dir, generation)
            while True:
                frame = await self._receive(channel)
                if frame.kind is FrameKind.HEARTBEAT:
                    continue
                if frame.kind is FrameKind.DATA:
                    await self._append(frame)
                    await channel.ack(Position(self.generation, self.offset))
                elif frame.kind is FrameKind.CLOSED:
                    await self._close(frame)
                else:
                    raise BlockProtocolError(f"unexpected {frame.kind.name} frame")
        finally:
            await channel.close()

    async def _receive(self, channel: BlockChannel) -> Frame:
        frame = await channel.receive()
        if frame is None:
            raise LogShareError("the active ended the block connection")
        return frame

    async def _hello(self, frame: Frame) -> int:
        """Check the HELLO frame; the active's epoch."""
        if frame.kind is not FrameKind.HELLO:
            raise BlockProtocolError(f"the block connection began with {frame.kind.name}")
        try:
            hello = orjson.loads(frame.payload)
            signature, epoch = str(hello["log_signature"]), int(hello["epoch"])
        except (orjson.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
            raise BlockProtocolError(f"a malformed HELLO frame: {exc}") from exc
        if signature != self._log_signature:
            raise BlockProtocolError(
                f"block mode offered for log stream {signature}, not this copy's "
                f"({self._log_signature})"
            )
        # A copy not yet shown on any stream (nothing closed since it was seeded) takes the
        # active's: what it builds is inspected against its own logs like a fetched log.
        if self._markers.epoch and epoch != self._markers.epoch:
            raise BlockProtocolError(
                f"block mode offered at epoch {epoch}; this copy follows epoch "
                f"{self._markers.epoch}"
            )
        return epoch

    # ---- the buffer ------------------------------------------------------------------------

    def _recover(self) -> None:
        """After a restart: keep the buffer of the generation after LastLogInspected (its
        valid records; a torn tail, never acknowledged, cut), drop every other file."""
        if not self._dir.exists():
            return
        wanted = self._markers.last_log_inspected + 1
        for entry in sorted(self._dir.iterdir()):
            parsed = _parse_partial(entry.name)
            if parsed is None or parsed[0] != wanted or self.generation:
                entry.unlink(missing_ok=True)
                continue
            data = entry.read_bytes()
            try:
                result = scan(data)
            except LogFormatError:
                entry.unlink(missing_ok=True)
                continue
            # A buffer written over a spare may still begin with the old generation's
            # header (a crash before its own header's fsync): not this generation's bytes.
            if result.header.generation != wanted:
                entry.unlink(missing_ok=True)
                continue
            end = result.valid_end
            if end < len(data):
                with open(entry, "r+b") as f:
                    f.truncate(end)
                    os.fsync(f.fileno())
            self.generation, self.epoch = parsed
            self.offset, self._crc = end, crc32c.crc32c(data[:end])
            self.reason = (
                f"resuming its buffer of generation {self.generation} (through byte {end}) "
                "kept from before a restart"
            )

    def _partial(self) -> Path:
        return self._dir / f"E{self.generation:08X}-{self.epoch}.partial"

    def _start(self, generation: int, epoch: int) -> None:
        self._discard_partial()
        self.generation, self.epoch, self.offset, self._crc = generation, epoch, 0, 0

    def _discard_partial(self) -> None:
        if self.generation:
            self._partial().unlink(missing_ok=True)

    async def _append(self, frame: Frame) -> None:
        if (frame.generation, frame.offset) != (self.generation, self.offset):
            raise BlockProtocolError(
                f"block of generation {frame.generation} at {frame.offset} out of order: "
                f"expected generation {self.generation} at {self.offset}"
            )
        if frame.offset == 0:
            header = LogHeader.decode(frame.payload[:HEADER_SIZE])
            if header.generation != self.generation:
                raise BlockProtocolError(
                    f"the block buffer of generation {self.generation} begins with the "
                    f"header of generation {header.generation}"
                )
            if str(header.log_signature) != self._log_signature:
                raise BlockProtocolError("a block header of another log stream")
        await asyncio.to_thread(self._write, frame.payload)
        self.offset += len(frame.payload)
        self._crc = crc32c.crc32c(frame.payload, self._crc)

    def _write(self, data: bytes) -> None:
        new = self.offset == 0
        if new:
            fd = new_file(self._partial(), self._spares)
        else:
            fd = os.open(self._partial(), os.O_WRONLY | os.O_CLOEXEC)
        try:
            # At its offset, not appended: a buffer written over a spare has the spare's size.
            os.lseek(fd, self.offset, os.SEEK_SET)
            write_all(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
        if new:  # the buffer itself must survive a crash, not only its bytes
            fsync_dir(self._dir)

    def _seal(self, done: Path) -> None:
        """The buffer, matched with the active's close, named as its closed generation: cut
        to what it holds first if it was written over a larger spare."""
        fd = os.open(self._partial(), os.O_WRONLY | os.O_CLOEXEC)
        try:
            if fit(fd, self.offset):
                os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(self._partial(), done)

    async def _close(self, frame: Frame) -> None:
        if frame.generation != self.generation or frame.offset != self.offset:
            raise BufferMismatch(
                f"generation {frame.generation} closed at {frame.offset}, but this copy holds "
                f"generation {self.generation} through {self.offset}"
            )
        if frame.crc != self._crc:
            raise BufferMismatch(
                f"generation {self.generation} as received in block mode differs from the "
                "active's closed file (CRC32C)"
            )
        done = self._dir / closed_log_name(self.generation)
        await asyncio.to_thread(self._seal, done)
        self._closed.setdefault(self.generation, asyncio.Event()).set()
        self._start(self.generation + 1, self.epoch)
