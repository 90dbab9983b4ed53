"""The log copier of a passive copy: pull closed generations, inspect, move into the log dir.

Pull model, as the seeds': the copier learns of newly closed generations from the active's
notification stream (a poll of the share's info is the fallback whenever the stream breaks),
fetches the missing generations into the Inspector directory (LastLogCopied), inspects
each in order (`inspector.inspect_generation`), and moves it into the log directory
(LastLogInspected).  When it is behind, it fetches a window of generations at once and
moves the inspected ones with a single directory fsync, so catching up costs about one
fsync per generation.  A generation that fails inspection is set aside in
IgnoredLogs/InspectionFailed and asked of the other copies of the database on the same
epoch (`peers`, their read-only copy share): the first one's that passes this copy's own
inspection takes its place (a bit flipped on the active's disk then costs no reseed, as long
as one copy got the generation before).  Else it is copied again; after
`max_inspection_failures` failures of the same generation the copy stops with `CopyFailed`.
A generation is never skipped.

The copy's stream incarnation (the `epoch` its status reports, which the Data Guarantee
service counts a flush on) is claimed only once shown: when a generation fetched from the
active at that epoch passes inspection (the creation-time chain ties it to every local
generation before it), or when the copy's last inspected generation is byte for byte the
active's.  A copy that had inspected past the point where a failover forked the stream
holds the old active's generations there: its last generation differs from the active's,
and it stops (FailedAndSuspended, reseed) instead of claiming a stream it is not on.

Logs Required (`log/spanning.py`): a database file whose header says a staged body pending
at its waypoint began in a lower generation (a seed taken while a large item was staged, a
copy whose logs were removed) needs those generations to read the body back when its commit
comes.  They are fetched first (`required_from`), checked whole, on this stream and chained
among themselves, and kept in the log directory without being replayed.

Transport failures are not the file's fault: the copy is DisconnectedAndHealthy and the
copier retries every `retry_interval` for as long as it takes (the seeds: a network outage
needs no reseed while the active keeps its logs).  A generation the active no longer has
(`GenerationGone`) ends in `CopyFailed`: only a reseed can help.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
from collections.abc import Callable, Sequence
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

from dag_common.backoff import Backoff
from dag_common.clock import Clock
from dag_common.durable import fsync_dir
from replication_node.admin_api import OpenLogKept
from replication_node.errors import (
    CopyFailed,
    Diverged,
    GenerationGone,
    InspectionFailed,
    LogFormatError,
    LogShareError,
)
from replication_node.log.files import write_all
from replication_node.log.inspector import InspectedLog, OutOfDateLog, inspect_generation
from replication_node.log.logfile import (
    OPEN_LOG_NAME,
    LogHeader,
    anchor_header,
    closed_log_name,
    seal_open_log,
)
from replication_node.log.spanning import Pending
from replication_node.log.spares import SparePool, fit, new_file
from replication_node.passive.markers import Markers
from replication_node.passive.stream_check import check_rejoin, check_stream
from replication_node.shipping.interfaces import CopyLogs, LogShareInfo, LogSource
from replication_node.storage.header import DatabaseHeader
from replication_node.storage.paths import CopyPaths

if TYPE_CHECKING:
    from replication_node.metrics import CopyMetrics
    from replication_node.passive.blocks import BlockReceiver, Taken

# How long the copier waits for block mode to finish receiving a generation the active just
# closed, before it fetches it instead.
_BLOCK_CLOSE_WAIT = 0.5

logger = logging.getLogger(__name__)

# Under IgnoredLogs: the logs a copy wrote when it was active, until the active's match them.
OUT_OF_DATE_DIR = "E00OutofDate"


class Copier:
    """Copies and inspects the active's closed generations; runs until cancelled."""

    def __init__(
        self,
        *,
        source: LogSource,
        paths: CopyPaths,
        markers: Markers,
        header: DatabaseHeader,
        clock: Clock,
        on_inspected: Callable[[], None],
        out_of_date: dict[int, OutOfDateLog] | None = None,
        rejoining: bool = False,
        max_inspection_failures: int = 3,
        retry_interval: float = 1.0,
        window: int = 8,
        metrics: CopyMetrics | None = None,
        blocks: BlockReceiver | None = None,
        peers: Sequence[CopyLogs] = (),
        spares: SparePool | None = None,
    ) -> None:
        self._source = source
        # The database file's header: the signatures a generation must carry, and its Logs
        # Required (0: none), fetched first if not on disk.
        self._required_from = header.required_from
        self._peers = tuple(peers)  # the database's other passive copies
        self._blocks = blocks  # block mode: the closed generations it received
        self._spares = spares  # truncated generations to write the copied ones over
        self._paths = paths
        self._markers = markers
        self._log_signature = header.log_signature
        self._database_signature = header.database_signature
        self._clock = clock
        self._on_inspected = on_inspected
        self._out_of_date = dict(out_of_date or {})
        self._rejoining = rejoining
        self._max_failures = max_inspection_failures
        self._retry = retry_interval
        self._window = window
        self._metrics = metrics
        self.failures: dict[int, int] = {}
        self._active_epoch = 0  # the epoch of the active whose share this copier reads
        self._prev: LogHeader | None = anchor_header(paths.logs, markers.last_log_inspected)
        # The staged bodies the last inspected generation left pending (None: not known here,
        # after a start; the next generation's CARRIED record is then checked on its own).
        self._prev_pending: Pending | None = None
        # One copying at a time: the run loop's, or a copy of the last logs (`copy_open_log`).
        self._copying = asyncio.Lock()
        self._writes = itertools.count()  # names the files written into Inspector
        self._inspected = asyncio.Condition()  # notified when LastLogInspected moves

    async def run(self) -> None:
        m = self._markers
        retry = Backoff.fixed(self._retry)
        while True:
            try:
                info = await self._source.info()
                self._seen(info)
                if self._rejoining:
                    await check_rejoin(self._source, self._paths, self._markers, info)
                    self._rejoining = False
                await check_stream(self._source, self._paths, self._markers, info)
                await self._fetch_required()
                await self._copy_through(info.last_generation)
                async for info in self._source.notifications(m.last_log_inspected):
                    self._seen(info)
                    await self._copy_through(info.last_generation)
                retry.reset()
                continue  # the stream ended (the active restarted?): ask again at once
            except GenerationGone as exc:
                raise CopyFailed(f"{exc}; the copy needs a reseed") from exc
            except LogShareError as exc:
                m.connected = False
                if m.disconnected_since is None:
                    m.disconnected_since = self._clock.monotonic()
                wait = retry.next()
                if retry.worth_saying():
                    logger.warning(
                        "%s: cannot reach the active (%d tries), again in %gs: %s",
                        self._paths.name, retry.failures, wait, exc,
                    )  # fmt: skip
                await self._clock.sleep(wait)

    def _seen(self, info: LogShareInfo) -> None:
        if info.log_signature != str(self._log_signature):
            raise CopyFailed(
                f"the active's log stream {info.log_signature} is not this copy's "
                f"({self._log_signature}); reseed the copy"
            )
        m = self._markers
        # An active that is not mounted (it serves its last logs to a copy taking over) is
        # not reached: the copy stays disconnected from it, for failover.
        m.connected = info.mounted
        if info.mounted:
            m.disconnected_since = None
            m.reached = True
        elif m.disconnected_since is None:
            m.disconnected_since = self._clock.monotonic()
        m.last_log_generated = max(m.last_log_generated, info.last_generation)
        m.last_log_copy_notified = max(m.last_log_copy_notified, info.last_generation)
        m.source_first_generation = info.first_generation
        self._active_epoch = info.epoch
        m.open_generation, m.open_commits = info.open_generation, info.open_commits

    async def _fetch_required(self) -> None:
        """The generations from the database's Logs Required through its waypoint that are
        not on disk: fetched, checked and kept, never replayed (the database has them)."""
        first, waypoint = self._required_from, self._markers.last_log_replayed
        logs = self._paths.logs
        missing = [
            g
            for g in range(first, waypoint + 1)
            if first and not (logs / closed_log_name(g)).exists()
        ]
        if not missing:
            return
        async with self._copying:
            for generation in missing:
                data, _ = await self._fetch(generation)
                await asyncio.to_thread(self._keep_required, generation, data)
        self._required_from = 0
        logger.info(
            "%s: fetched generations %d-%d below the waypoint, which hold parts of a staged "
            "body the database still needs (Logs Required)",
            self._paths.name,
            missing[0],
            missing[-1],
        )

    def _keep_required(self, generation: int, data: bytes) -> None:
        prev = anchor_header(self._paths.logs, generation - 1)
        inspect_generation(
            data,
            generation=generation,
            log_signature=self._log_signature,
            database_signature=self._database_signature,
            prev=prev,
            highest_known=max(self._markers.last_log_generated, generation),
        )
        staged = self._paths.inspector / closed_log_name(generation)
        with open(staged, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(staged, self._paths.logs / closed_log_name(generation))
        fsync_dir(self._paths.logs)

    async def _copy_through(self, last: int) -> None:
        """Copy and inspect every generation up to `last`, in order, a window at a time."""
        async with self._copying:
            await self._copy_window_by_window(last)

    async def copy_open_log(self, data: bytes) -> InspectedLog | None:
        """Attempt Copy Last Logs, the last step: keep the lost active's open log `data` as
        the generation it stands for (its valid records, sealed with a CLOSE record),
        inspected like any copied generation (signatures, the creation-time chain, an
        E00.log of this copy's own).  None if it holds no transaction.  It must be the
        generation after LastLogInspected: the closed ones before it are copied first."""
        try:
            sealed = seal_open_log(data)
        except LogFormatError as exc:
            raise InspectionFailed(f"the active's open log: {exc}") from exc
        if sealed is None:
            return None
        sealed_data, result = sealed
        generation = result.header.generation
        async with self._copying:
            m = self._markers
            if generation != m.last_log_inspected + 1:
                raise InspectionFailed(
                    f"the active's open log is generation {generation}, but this copy has "
                    f"inspected through {m.last_log_inspected}: the closed generations "
                    "between must be copied first"
                )
            m.last_log_generated = max(m.last_log_generated, generation)
            inspected = await asyncio.to_thread(self._stage, generation, sealed_data)
            m.last_log_copied = max(m.last_log_copied, generation)
            # Sealed here from a prefix of the lost active's open log: not that epoch's
            # generation as it wrote it, so no epoch is claimed on it (a flush by LSN past
            # the kept prefix must not count this copy while it is being activated).
            await self._commit([inspected], claim=False)
        logger.warning(
            "%s: kept the lost active's open log as generation %d (%d transaction(s)%s)",
            self._paths.name,
            generation,
            len(result.transactions),
            f"; a torn tail left out: {result.tail_error}" if result.tail_error else "",
        )
        return inspected

    async def _copy_window_by_window(self, last: int) -> None:
        """Fetches run a window ahead of inspection, and inspection runs ahead of the moves
        into the log directory: while a window's generations are moved in (one directory
        fsync for the window, then LastLogInspected), the next window's are inspected, and
        further ones are on their way (bench/shipping.py, issue 33).  The moves go in order,
        one window at a time.  A generation whose inspection failed is fetched again once
        what was inspected before it is moved in: the fetches beyond it stay good."""
        fetches: dict[int, asyncio.Future[tuple[bytes, Path]]] = {}
        moving: asyncio.Future[None] | None = None  # the last window's move into the log dir

        async def move_in(staged: list[InspectedLog]) -> None:
            nonlocal moving
            if moving is not None:
                await moving  # the windows before, in order (raises what theirs raised)
            moving = asyncio.ensure_future(self._commit(staged)) if staged else None

        try:
            first = self._markers.last_log_inspected + 1
            while first <= last:
                generations = range(first, min(last, first + self._window - 1) + 1)
                staged: list[InspectedLog] = []
                failed = False
                try:
                    for generation in generations:
                        for ahead in range(generation, min(last, generation + self._window) + 1):
                            if ahead not in fetches:
                                fetches[ahead] = asyncio.ensure_future(self._fetch_written(ahead))
                        data, written = await fetches.pop(generation)
                        try:
                            inspect = self._inspect_staged
                            staged.append(
                                await asyncio.to_thread(inspect, generation, data, written)
                            )
                        except InspectionFailed as exc:
                            whole = await self._from_peers(generation, exc)
                            if whole is None:
                                await move_in(staged)  # what passed before it counts
                                staged, failed = [], True
                                await self._inspection_failed(generation, exc)
                                break
                            staged.append(whole)
                        self._markers.last_log_copied = max(
                            self._markers.last_log_copied, generation
                        )
                except LogShareError:
                    await move_in(staged)  # what passed inspection before the outage counts
                    raise
                await move_in(staged)
                first = generation if failed else generations[-1] + 1
            await move_in([])  # the last window is in before the copy says it is done
        finally:  # the fetches run ahead and not inspected: their files go
            for fetch in fetches.values():
                fetch.cancel()
            for done in await asyncio.gather(*fetches.values(), return_exceptions=True):
                if isinstance(done, tuple):
                    done[1].unlink(missing_ok=True)
            if moving is not None:  # left by an error: it ends before the error goes on
                await asyncio.wait([moving])
                if not moving.cancelled() and moving.exception() is not None:
                    logger.warning(
                        "%s: a move into the log directory failed: %s",
                        self._paths.name,
                        moving.exception(),
                    )

    async def _fetch_written(self, generation: int) -> tuple[bytes, Path]:
        """A closed generation fetched and written into Inspector: the fetches of a window
        write their files side by side (their fsyncs overlap), inspection follows in order.
        Cancelled while its file is being written, the file goes once it is."""
        data, taken = await self._fetch(generation)
        if self._metrics is not None:
            self._metrics.copied(len(data))
        write = asyncio.ensure_future(asyncio.to_thread(self._write, generation, data, taken))
        try:
            return data, await asyncio.shield(write)
        except asyncio.CancelledError:
            write.add_done_callback(_drop_written)
            raise

    async def _fetch(self, generation: int) -> tuple[bytes, Taken | None]:
        """A closed generation: as block mode received it (and its file), else fetched."""
        if self._blocks is not None:
            taken = await self._blocks.take(generation, wait=_BLOCK_CLOSE_WAIT)
            if taken is not None:
                return taken.data, taken
        return await self._source.fetch(generation), None

    def _stage(self, generation: int, data: bytes, origin: str | None = None) -> InspectedLog:
        """Write a copied generation into Inspector (fsync'd) and inspect it (worker thread)."""
        return self._inspect_staged(generation, data, self._write(generation, data), origin)

    def _write(self, generation: int, data: bytes, taken: Taken | None = None) -> Path:
        """Write a copied generation into Inspector, fsync'd, under a name of its own (worker
        thread): a write whose fetch was cancelled may still be running when the generation
        is fetched again, and must not write into the file that one inspects (deleted on
        start if a crash left it).  Block mode's file (`taken`) is linked there instead; else it
        is written over a truncated generation's file when the pool has one (`spares.py`)."""
        written = self._paths.inspector / f"{closed_log_name(generation)}.{next(self._writes)}"
        if taken is None or not taken.link(written):
            fd = new_file(written, self._spares)
            try:
                write_all(fd, data)
                fit(fd, len(data))
                os.fsync(fd)
            finally:
                os.close(fd)
        return written

    def _inspect_staged(
        self, generation: int, data: bytes, written: Path, origin: str | None = None
    ) -> InspectedLog:
        """Inspect a generation `written` into Inspector (worker thread), in the stream's
        order; it takes its generation's name there.  One that fails is set aside before
        InspectionFailed propagates (named after the copy it came from, `origin`, when not
        from the active)."""
        staged = self._paths.inspector / closed_log_name(generation)
        os.replace(written, staged)
        try:
            try:
                inspected = self._inspect(data, generation)
            except Diverged as exc:
                self._discard_diverged(exc)
                inspected = self._inspect(data, generation)
        except InspectionFailed:
            count = self.failures.get(generation, 0) + 1
            failed_dir = self._paths.ignored / "InspectionFailed"
            failed_dir.mkdir(parents=True, exist_ok=True)
            suffix = f".{count}" if origin is None else f".{count}.{origin}"
            os.replace(staged, failed_dir / f"{staged.name}{suffix}")
            raise
        self._prev = inspected.header
        self._prev_pending = inspected.pending
        return inspected

    def _inspect(self, data: bytes, generation: int) -> InspectedLog:
        return inspect_generation(
            data,
            generation=generation,
            log_signature=self._log_signature,
            database_signature=self._database_signature,
            prev=self._prev,
            highest_known=self._markers.last_log_generated,
            out_of_date=self._out_of_date.get(generation),
            prev_pending=(
                self._prev_pending
                if self._prev is not None and self._prev.generation == generation - 1
                else None
            ),
        )

    def _discard_diverged(self, exc: Diverged) -> None:
        """Incremental reseed: the logs this copy wrote as active from the divergence point
        on were never in its database file (LLR kept them out), so they are set aside in
        IgnoredLogs/Diverged and the active's generations take their place."""
        kept = self._paths.ignored / "Diverged"
        kept.mkdir(parents=True, exist_ok=True)
        # (a list first: the move of the window before may be dropping superseded ones)
        dropped = sorted(g for g in list(self._out_of_date) if g >= exc.generation)
        for generation in dropped:
            superseded = self._out_of_date.pop(generation, None)
            if superseded is None:
                continue
            name = closed_log_name(generation) if superseded.whole else OPEN_LOG_NAME
            src = self._paths.ignored / OUT_OF_DATE_DIR / name
            if src.exists():
                os.replace(src, kept / name)
        fsync_dir(kept)
        logger.warning(
            "%s: incremental reseed: %s; this copy's logs of generations %s (written when it "
            "was active, never in its database) are set aside in IgnoredLogs/Diverged and "
            "their transactions are lost with the failover",
            self._paths.name,
            exc,
            dropped,
        )

    async def _from_peers(self, generation: int, exc: InspectionFailed) -> InspectedLog | None:
        """The generation from another copy on this epoch's stream, inspected here as the
        active's would have been; None if no copy has it whole (each one's answer is added
        to `exc`'s reason, for the copy's status should it fail in the end)."""
        if not self._peers or self._active_epoch < 1:
            return None
        tried = []
        for peer in self._peers:
            try:
                data = await peer.fetch(generation, self._active_epoch)
                inspected = await asyncio.to_thread(self._stage, generation, data, peer.node)
            except (LogShareError, InspectionFailed) as why:
                tried.append(str(why))
                continue
            logger.warning(
                "%s: generation %d from the active failed inspection (%s); the copy on %s "
                "had it whole and gave it",
                self._paths.name,
                generation,
                exc,
                peer.node,
            )
            if self._metrics is not None:
                self._metrics.from_other_copy()
            return inspected
        exc.args = (f"{exc}; no other copy had it whole ({'; '.join(tried)})",)
        return None

    async def _inspection_failed(self, generation: int, exc: InspectionFailed) -> None:
        """Count a failed inspection: CopyFailed at the limit, else a pause before recopying."""
        count = self.failures[generation] = self.failures.get(generation, 0) + 1
        if self._blocks is not None:  # a block-mode buffer that failed: fetch it next time
            self._blocks.release_through(generation)
        logger.warning(
            "%s: inspection of generation %d failed (%d of %d): %s",
            self._paths.name,
            generation,
            count,
            self._max_failures,
            exc,
        )
        if self._metrics is not None:
            self._metrics.inspection_failed(recopy=count < self._max_failures)
        if count >= self._max_failures:
            raise CopyFailed(f"generation {generation} failed inspection {count} times: {exc}")
        await self._clock.sleep(self._retry / 4)

    async def _commit(self, staged: list[InspectedLog], *, claim: bool = True) -> None:
        """Move inspected generations into the log directory (one directory fsync for all),
        then advance LastLogInspected; claim the active's epoch (`claim`), or no epoch (0)
        for a generation this copy sealed itself."""
        if not staged:
            return
        copied, copied_at = self._clock.now(), self._clock.monotonic()
        await asyncio.to_thread(self._move_into_log_dir, [s.generation for s in staged], copied)
        m = self._markers
        for inspected in staged:
            self.failures.pop(inspected.generation, None)
            m.copied_times[inspected.generation] = copied_at
        m.last_log_inspected = staged[-1].generation
        m.last_inspected_log_time = staged[-1].close_time
        # inspected from its share: chained to all before
        m.epoch = self._active_epoch if claim else 0
        if self._blocks is not None:
            self._blocks.release_through(m.last_log_inspected)
        self._on_inspected()
        async with self._inspected:
            self._inspected.notify_all()

    async def wait_inspected(self, generation: int, timeout: float) -> bool:
        """Whether LastLogInspected reaches `generation` within `timeout` seconds."""
        async with self._inspected:
            try:
                await asyncio.wait_for(
                    self._inspected.wait_for(
                        lambda: self._markers.last_log_inspected >= generation
                    ),
                    timeout,
                )
            except TimeoutError:
                return False
        return True

    def _move_into_log_dir(self, generations: list[int], copied: datetime) -> None:
        # Only the log directory's entries must survive a crash; a file left in Inspector by
        # a crash is deleted on start and copied again.  Each file's mtime is set to when the
        # copy got it (its own clock): after a restart the replay lag counts from there.
        stamp = copied.timestamp()
        for generation in generations:
            name = closed_log_name(generation)
            os.utime(self._paths.inspector / name, (stamp, stamp))
            os.replace(self._paths.inspector / name, self._paths.logs / name)
        fsync_dir(self._paths.logs)
        for generation in generations:
            # A log set aside from when this copy was active matched: it is superseded.
            superseded = self._out_of_date.pop(generation, None)
            if superseded is not None:
                name = closed_log_name(generation) if superseded.whole else OPEN_LOG_NAME
                (self._paths.ignored / OUT_OF_DATE_DIR / name).unlink(missing_ok=True)


def _drop_written(write: asyncio.Future[Path]) -> None:
    """Delete the file a cancelled fetch wrote into Inspector (if it got that far)."""
    if not write.cancelled() and write.exception() is None:
        write.result().unlink(missing_ok=True)


async def keep_open_log(
    copier: Copier, data: bytes, error: type[Exception], said: str, kept_through: int | None = None
) -> OpenLogKept | None:
    """`data` kept as the open generation (`Copier.copy_open_log`), as an answer says it (None:
    it held no transaction); `error(f"{said}: …")` if it fails inspection."""
    try:
        kept = await copier.copy_open_log(data)
    except InspectionFailed as exc:
        raise error(f"{said}: {exc}") from exc
    if kept is None:
        return None
    return OpenLogKept(generation=kept.generation, size=kept.size, kept_through=kept_through)
