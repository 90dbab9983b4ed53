"""How generations travel, as the pipeline sees it: the active's side of a log share
(`LogShareSource`, implemented by `active/share.py`), a passive copy's view of it
(`LogSource`, over HTTP by `logshare_client.py`), another copy's inspected logs (`CopyLogs`)
and block mode's connection (`BlockChannel`).  Each stage is tested with real files and a
real aiohttp log share on port 0 through these, without the rest of the node.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from dag_common.model import Position

if TYPE_CHECKING:
    from replication_node.log.blocks import BlockFeed
    from replication_node.shipping.frames import Frame


@dataclass(frozen=True, slots=True)
class LogShareInfo:
    """What a log share says about its stream: `GET /v1/databases/{db}/logs`."""

    database: str
    database_signature: str
    log_signature: str
    first_generation: int  # lowest closed generation still on disk (0: none)
    last_generation: int  # highest closed generation (LastLogGenerated)
    open_generation: int  # generation of E00.log
    epoch: int = 0  # the stream incarnation: the epoch of the active writing it (0: unknown)
    open_commits: int = 0  # acknowledged commits in E00.log (it is LastLogGenerated if > 0)
    # False: the active is not mounted and serves its last logs to the copy taking over
    # (Attempt Copy Last Logs); a copy does not count it as reached for failover.
    mounted: bool = True

    @property
    def generated_at_risk(self) -> int:
        """LastLogGenerated counting the open log once it holds an acknowledged commit."""
        return self.open_generation if self.open_commits > 0 else self.last_generation


@dataclass(frozen=True, slots=True)
class SeedInfo:
    """What a seed brought: the database file's header values at the time of the copy."""

    database_signature: str
    log_signature: str
    waypoint: int  # the seeded copy replays from waypoint + 1
    # The sizes of the closed generations above the waypoint that the active had when it
    # took the copy (waypoint + 1 first): the logs the seeded copy needs next (progress).
    log_sizes: tuple[int, ...] = ()


class SeedListener(Protocol):
    """Follows a seed's transfer (`passive.seeder.SeedProgress`)."""

    def announced(self, info: SeedInfo) -> None:
        """The seed's header values and the logs above its waypoint, before its bytes."""
        ...

    def received(self, done: int, total: int | None) -> None:
        """Bytes of the database file received so far, of `total` (None: not announced)."""
        ...


class LogShareSource(Protocol):
    """The active side of one database's log share (read-only)."""

    @property
    def log_dir(self) -> Path: ...

    def share_info(self) -> LogShareInfo: ...

    async def wait_for_generation(
        self, after: int, timeout: float, *, at_risk_after: int | None = None
    ) -> int:
        """Return the last closed generation once it is > `after` (or, given `at_risk_after`,
        once the generation at risk, `LogShareInfo.generated_at_risk`, is above it), or at
        `timeout` anyway."""
        ...

    async def seed_to(self, dest: Path) -> SeedInfo:
        """Write a consistent copy of the database file to `dest`."""
        ...

    def open_log_path(self) -> Path | None:
        """The open log E00.log, only while it is held for the copy taking over."""
        ...

    def block_feed(self) -> BlockFeed | None:
        """The open log's durable blocks while mounted (block mode), else None."""
        ...


class LogSource(Protocol):
    """A passive copy's view of its active's log share (over HTTP in production)."""

    async def info(self) -> LogShareInfo: ...

    async def fetch(self, generation: int) -> bytes:
        """The bytes of a closed generation (raises LogShareError if it cannot)."""
        ...

    def notifications(self, after: int) -> AsyncIterator[LogShareInfo]:
        """Yield the share's info each time its last closed generation moves past `after`,
        and as a heartbeat in between; ends, or raises LogShareError, when the connection
        goes."""
        ...

    async def seed(self, dest: Path, listener: SeedListener | None = None) -> SeedInfo:
        """Stream a consistent copy of the database file into `dest`, telling `listener`
        what the active announced and the bytes as they arrive."""
        ...

    async def hand_over(self, to: str) -> LogShareInfo:
        """Ask the active, not mounted, to hold its last logs for the copy on `to`."""
        ...

    async def fetch_open_log(self) -> bytes:
        """The bytes of the open log E00.log the active holds for this copy."""
        ...

    async def open_blocks(self, start: Position, node: str) -> BlockChannel:
        """Follow the active's open log in block mode from `start` (its generation, an
        offset in it), as the copy on `node` (LogShareError if the active will not: not
        mounted, another generation open)."""
        ...


class CopyLogs(Protocol):
    """Another copy's inspected generations (`shipping/copy_share.py`), asked for a generation
    the active could not give whole."""

    node: str

    async def fetch(self, generation: int, epoch: int) -> bytes:
        """The generation as that copy inspected it on `epoch`'s stream (LogShareError if
        it cannot: unreachable, another epoch, not that far, truncated)."""
        ...


class BlockChannel(Protocol):
    """A passive copy's block-mode connection to its active (`shipping/blocks.py`)."""

    async def receive(self) -> Frame | None:
        """The next frame; None when the connection ended (LogShareError if it broke)."""
        ...

    async def ack(self, position: Position) -> None:
        """Tell the active the copy holds the log durably through `position`."""
        ...

    async def close(self) -> None: ...
