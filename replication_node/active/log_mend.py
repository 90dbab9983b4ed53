"""Mending a generation of the LLR window damaged on the active's own disk (issue 52).

The active holds its last `llr_depth` generations' large staged bodies as their place in its
own log (`logged_bodies.py`).  A generation damaged there after its commits were
acknowledged (a bit flip) stops the LLR flush and the reads of those bodies, while the
copies, which copied it before the damage, hold it whole.  So the active takes it whole from
a copy, by the path a passive takes a generation the active could not give it
(`passive/copier._from_peers`): the copies' log share (`shipping/copy_share.py`,
`HttpCopyLogs`, behind the node token, answered only by a copy on this epoch's stream that
inspected that far), checked here as a passive's inspection checks a generation it takes,
and more, since the active holds its own witnesses (`check_replacement`):

- the passive's inspection (`log/inspector.inspect_generation`): the header's checksum,
  generation and database and log signatures, every record's CRC32C, the CLOSE record, the
  creation-time chain to the active's own previous generation (when it is still on disk);
- the chain onwards: the active's own next generation (closed, or E00.log) names this one's
  creation time as its previous;
- byte for byte what the active's own file still vouches for: its header if its checksum
  holds, and every record whose own CRC32C (salted by the header) holds at the same offset,
  must be the copy's exactly; only what the active's own checksums reject is taken, a file
  longer than the copy's is refused, and so is a copy nothing of the active's own vouches
  for (each record's checksum is salted with its header's: a copy with another header than
  the one the active wrote matches none of the active's records);
- the commits the LLR overlay holds in memory for that generation (never on the damaged
  disk) are the copy's transaction records, at the same offsets and commit times;
- then the staged bodies read from it are checked as every read checks them (each part's
  CRC32C, the commit's size and CRC32C, the SHA-256 counted where the body came in).

It is written in place as every durable file is (temp, fsync, rename, fsync the directory:
`dag_common.durable.atomic_write`): a reader holding the damaged file open reads it to its
error, the next one the mended file.  Then the LLR flush runs at once (`ActiveCopy.
flush_llr_after_roll`) and the window moves again; the damage note leaves the status as the
generation reads whole.

Where no copy gives it sound after `MEND_ROUNDS` rounds of asking every copy (the copies are
gone, or damaged too), the active fails over rather than stay stuck: a switchover to a
healthy copy through the existing machinery (`cluster/step_down.py`), which has replayed
every generation the active closed, so nothing acknowledged is lost, and whose own database
file serves the bodies.  Chosen over dismounting (the operator's `db dismount`, or
automatic failover after it) because a switchover loses nothing and keeps taking writes;
chosen over waiting alone because a stuck window means the active can neither flush nor
dismount cleanly.  If no copy can take over either, the active stays mounted (its other
items are read and written), the damaged bodies' reads are refused (503 naming the
generation), its status says what was tried, and the rounds go on with a backoff: a copy
that comes back is asked again.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

from dag_common.backoff import Backoff
from dag_common.clock import Clock
from dag_common.durable import atomic_write
from dag_common.errors import DagError
from replication_node.errors import InspectionFailed, LogFormatError, LogShareError
from replication_node.log import logfile
from replication_node.log.inspector import InspectedLog, inspect_generation
from replication_node.log.logfile import HEADER_SIZE, LogHeader, chain_problem, iter_records
from replication_node.shipping.interfaces import CopyLogs as CopyLogs
from replication_node.storage.header import DatabaseHeader

if TYPE_CHECKING:
    from replication_node.active.copy import ActiveCopy

logger = logging.getLogger(__name__)

MEND_ROUNDS = 3
"""Rounds of asking every copy for a damaged generation before failing over."""

FIRST_RETRY, LONGEST_RETRY = 1.0, 10.0
"""Seconds between two rounds: doubling from the first to the longest."""

# Switch the database over to a healthy copy; the new active's node, or an error naming
# why no copy took it (`cluster/step_down.py`).
StepDown = Callable[[], Awaitable[str]]


@dataclass(frozen=True, slots=True)
class LocalView:
    """What the active's own disk and memory say of a damaged generation: the witnesses a
    copy's bytes are held against (`check_replacement`)."""

    generation: int
    local: bytes  # the file as it reads now (damaged)
    prev: LogHeader | None  # the active's own previous generation's header, if on disk
    next: LogHeader | None  # its next generation's (closed, or E00.log), if it reads
    commits: tuple[tuple[int, datetime], ...]  # the overlay's commits there: offset, time
    highest_known: int  # the last generation the active closed
    header: DatabaseHeader  # its database file's: the signatures its logs carry


def check_replacement(data: bytes, view: LocalView) -> InspectedLog:
    """The copy's bytes of `view.generation` inspected, and held against the active's own
    witnesses (see the module); InspectionFailed naming what does not hold."""
    gen = view.generation
    inspected = inspect_generation(
        data,
        generation=gen,
        log_signature=view.header.log_signature,
        database_signature=view.header.database_signature,
        prev=view.prev,
        highest_known=view.highest_known,
    )
    if view.next is not None:
        problem = chain_problem(inspected.header, view.next, view.header.log_signature)
        if problem:
            raise InspectionFailed(f"the active's own next generation: {problem}")
    if len(view.local) > len(data):
        raise InspectionFailed(
            f"generation {gen} is {len(view.local)} bytes on the active, {len(data)} there"
        )
    header_holds = _header_holds(view.local)
    if header_holds and view.local[:HEADER_SIZE] != data[:HEADER_SIZE]:
        raise InspectionFailed(f"generation {gen}'s header differs from the active's own")
    # Every record's checksum is salted with its header's: a copy with another header than
    # the one the active wrote matches none of the active's own records.
    salt, vouched = inspected.header.salt, header_holds
    records = [r for r in iter_records(data, gen, salt) if not isinstance(r, str)]
    for rec in records:
        mine = view.local[rec.offset : rec.offset + rec.size]
        if mine == data[rec.offset : rec.offset + rec.size]:
            vouched = vouched or _record_holds(mine, rec.size, gen, salt)
        elif _record_holds(mine, rec.size, gen, salt):
            raise InspectionFailed(
                f"generation {gen}'s record at offset {rec.offset} differs from the active's "
                "own, which its checksum vouches for"
            )
    if view.local == data:
        raise InspectionFailed(f"generation {gen} there is the same as the active's own")
    if not vouched:
        raise InspectionFailed(
            f"nothing of generation {gen} as the active holds it vouches for the copy's"
        )
    offered = [
        (r.offset, r.commit_time) for r in records if r.type is logfile.RecordType.TRANSACTION
    ]
    if view.commits and list(view.commits) != offered:
        raise InspectionFailed(
            f"generation {gen}'s commits are not those the active holds in memory "
            f"({len(offered)} there, {len(view.commits)} here, or at other offsets or times)"
        )
    return inspected


def _header_holds(local: bytes) -> bool:
    try:
        LogHeader.decode(local)
    except LogFormatError:
        return False
    return True


def _record_holds(mine: bytes, size: int, gen: int, salt: int) -> bool:
    """Whether the active's own bytes at a record's place are a record its checksum holds."""
    if len(mine) != size:
        return False
    first = next(iter_records(bytes(HEADER_SIZE) + mine, gen, salt), "")
    return not isinstance(first, str) and first.size == size


class LogMend:
    """Mends the damaged generations of one mount's LLR window (see the module): woken by
    each damage found (`LogBodies.on_damage`, any thread), asks every copy in turn, fails
    over after `rounds` rounds where none gave it sound."""

    def __init__(
        self,
        *,
        database: str,
        epoch: int,
        copies: Sequence[CopyLogs],
        clock: Clock,
        step_down: StepDown | None = None,
        rounds: int = MEND_ROUNDS,
        on_mended: Callable[[], None] | None = None,
    ) -> None:
        self._database = database
        self._epoch = epoch
        self._copies = list(copies)
        self._clock = clock
        self._step_down = step_down
        self._rounds = rounds
        self._on_mended = on_mended  # (the metric)
        self._wake = asyncio.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        # What the status says besides the damage itself: what was tried, what is next.
        self.note: str | None = None
        self.mended = 0  # generations taken whole from a copy
        self.unexpected_errors = 0

    def wake(self, generation: int) -> None:
        """A damaged generation was found (any thread): mend it."""
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._wake.set)

    async def run(self, copy: ActiveCopy) -> None:
        """Mend `copy`'s damaged generations as they are found, until cancelled (the mount
        ends)."""
        self._loop = asyncio.get_running_loop()
        copy.bodies.on_damage = self.wake
        self.note = None
        backoff, rounds = Backoff(FIRST_RETRY, LONGEST_RETRY), 0
        while True:
            if not copy.bodies.damaged:
                self.note, rounds = None, 0
                backoff.reset()
                self._wake.clear()
                await self._wake.wait()
                continue
            tried: list[str] = []
            try:
                for gen in sorted(copy.bodies.damaged):
                    tried += await self._mend(copy, gen)
            except Exception as exc:  # a bug, or a disk that fails the write: said, retried
                self.unexpected_errors += 1
                logger.exception("%s: mending the log failed", self._database)
                tried.append(f"mending it failed: {exc!r}")
            if not copy.bodies.damaged:
                await copy.flush_llr_after_roll()
                continue
            rounds += 1
            said = "; ".join(tried) or "no other copy of it"
            self.note = f"no copy gave it sound ({said}); asked {rounds} time(s)"
            if rounds >= self._rounds and self._step_down is not None:
                await self._fail_over(first=rounds == self._rounds)
            await self._clock.sleep(backoff.next())

    async def _fail_over(self, *, first: bool) -> None:
        assert self._step_down is not None
        logger.log(
            logging.CRITICAL if first else logging.INFO,
            "%s: a damaged generation of the active's LLR window: %s; switching over to a "
            "healthy copy",
            self._database,
            self.note,
        )
        try:
            # The switchover's end stops this mount (and this task): shielded, it goes on.
            node = await asyncio.shield(self._step_down())
        except DagError as exc:
            self.note = f"{self.note}; no copy could take over either: {exc}"
            logger.log(
                logging.ERROR if first else logging.INFO, "%s: %s", self._database, self.note
            )
        else:
            self.note = f"{self.note}; switched over to {node}"

    async def _mend(self, copy: ActiveCopy, gen: int) -> list[str]:
        """Take generation `gen` whole from a copy; what each copy answered if none did."""
        bodies, logs = copy.bodies, copy.paths.logs
        path = logs / logfile.closed_log_name(gen)
        if await asyncio.to_thread(bodies.recheck, gen):
            return []  # whole again (put back), or gone with its truncation
        view = await _local_view(copy, gen, path)
        tried = []
        for source in self._copies:
            try:
                data = await source.fetch(gen, self._epoch)
                await asyncio.to_thread(check_replacement, data, view)
            except (LogShareError, InspectionFailed) as why:
                tried.append(f"{source.node}: {why}")
                continue
            await asyncio.to_thread(atomic_write, path, data)
            if await asyncio.to_thread(bodies.recheck, gen):
                self.mended += 1
                if self._on_mended is not None:
                    self._on_mended()
                logger.warning(
                    "%s: generation %d of the active's log was damaged on its disk; the copy "
                    "on %s had it whole and gave it (checked against the active's own "
                    "records and chain), written in place",
                    self._database,
                    gen,
                    source.node,
                )
                return []
            tried.append(f"{source.node}: written, yet does not read whole")
        return tried


async def _local_view(copy: ActiveCopy, gen: int, path: Path) -> LocalView:
    """The active's own witnesses of generation `gen`: its files read in a worker thread,
    its memory (the overlay, which its writes change) on the loop."""
    commits = tuple(
        (t.position.offset, t.commit_time)
        for t in copy.overlay.transactions_through(gen)
        if t.generation == gen
    )
    header, highest = copy.db.header, copy.stream.last_closed_generation
    local, prev, following = await asyncio.to_thread(_neighbours, path, gen)
    return LocalView(
        generation=gen,
        local=local,
        prev=prev,
        next=following,
        commits=commits,
        highest_known=highest,
        header=header,
    )


def _neighbours(path: Path, gen: int) -> tuple[bytes, LogHeader | None, LogHeader | None]:
    """The damaged file's bytes, its previous and next generations' headers (worker thread):
    the next is closed, or the open log E00.log."""
    logs = path.parent
    following = logs / logfile.closed_log_name(gen + 1)
    if not following.exists():
        following = logs / logfile.OPEN_LOG_NAME
    prev = _header_or_none(logs / logfile.closed_log_name(gen - 1), gen - 1)
    return path.read_bytes(), prev, _header_or_none(following, gen + 1)


def _header_or_none(path: Path, gen: int) -> LogHeader | None:
    """The header of generation `gen` at `path`, if it is there and reads whole."""
    try:
        header = logfile.read_header(path)
    except (OSError, LogFormatError):
        return None
    return header if header.generation == gen else None
