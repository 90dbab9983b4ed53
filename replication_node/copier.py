"""The log copier of a passive copy: pull closed generations, inspect, move into the log dir.

Pull model, as the seeds': the copier learns of newly closed generations from the active's
notification stream (a poll of the share's info is the fallback whenever the stream breaks),
fetches each missing generation in order into the Inspector directory (LastLogCopied),
inspects it (`inspector.inspect_generation`), and moves it into the log directory
(LastLogInspected).  A generation that fails inspection is set aside in
IgnoredLogs/InspectionFailed and copied again; after `max_inspection_failures` failures of
the same generation the copy stops with `CopyFailed`.  A generation is never skipped.

Transport failures are not the file's fault: the copy is DisconnectedAndHealthy and the
copier retries every `retry_interval` for as long as it takes (the seeds: a network outage
needs no reseed while the active keeps its logs).  A generation the active no longer has
(`GenerationGone`) ends in `CopyFailed`: only a reseed can help.
"""

from __future__ import annotations

import asyncio
import logging
import os
import uuid
from collections.abc import Callable
from pathlib import Path

from dag_common.clock import Clock
from dag_common.durable import fsync_dir
from replication_node.active import CopyPaths
from replication_node.errors import CopyFailed, GenerationGone, InspectionFailed, LogShareError
from replication_node.inspector import OutOfDateLog, inspect_generation
from replication_node.interfaces import LogShareInfo, LogSource
from replication_node.logfile import LogHeader, anchor_header, closed_log_name
from replication_node.markers import Markers

logger = logging.getLogger(__name__)


class Copier:
    """Copies and inspects the active's closed generations; runs until cancelled."""

    def __init__(
        self,
        *,
        source: LogSource,
        paths: CopyPaths,
        markers: Markers,
        log_signature: uuid.UUID,
        database_signature: uuid.UUID,
        clock: Clock,
        on_inspected: Callable[[], None],
        out_of_date: OutOfDateLog | None = None,
        max_inspection_failures: int = 3,
        retry_interval: float = 1.0,
    ) -> None:
        self._source = source
        self._paths = paths
        self._markers = markers
        self._log_signature = log_signature
        self._database_signature = database_signature
        self._clock = clock
        self._on_inspected = on_inspected
        self._out_of_date = out_of_date
        self._max_failures = max_inspection_failures
        self._retry = retry_interval
        self.failures: dict[int, int] = {}
        self._prev: LogHeader | None = anchor_header(paths.logs, markers.last_log_inspected)

    async def run(self) -> None:
        m = self._markers
        outage_logged = False
        while True:
            try:
                info = await self._source.info()
                self._seen(info)
                await self._copy_through(info.last_generation)
                async for info in self._source.notifications(m.last_log_inspected):
                    self._seen(info)
                    await self._copy_through(info.last_generation)
                outage_logged = False
                continue  # the stream ended (the active restarted?): ask again at once
            except GenerationGone as exc:
                raise CopyFailed(f"{exc}; the copy needs a reseed") from exc
            except LogShareError as exc:
                m.connected = False
                if not outage_logged:
                    logger.warning(
                        "%s: cannot reach the active, retrying: %s", self._paths.name, exc
                    )
                    outage_logged = True
            await self._clock.sleep(self._retry)

    def _seen(self, info: LogShareInfo) -> None:
        if info.log_signature != str(self._log_signature):
            raise CopyFailed(
                f"the active's log stream {info.log_signature} is not this copy's "
                f"({self._log_signature}); reseed the copy"
            )
        m = self._markers
        m.contacted = m.connected = True
        m.last_log_generated = max(m.last_log_generated, info.last_generation)
        m.last_log_copy_notified = max(m.last_log_copy_notified, info.last_generation)
        m.source_first_generation = info.first_generation

    async def _copy_through(self, last: int) -> None:
        while self._markers.last_log_inspected < last:
            await self._copy_one(self._markers.last_log_inspected + 1)

    async def _copy_one(self, generation: int) -> None:
        m = self._markers
        name = closed_log_name(generation)
        while True:
            data = await self._source.fetch(generation)
            staged = self._paths.inspector / name
            await asyncio.to_thread(_write_synced, staged, data)
            m.last_log_copied = max(m.last_log_copied, generation)
            try:
                inspected = await asyncio.to_thread(
                    inspect_generation,
                    data,
                    generation=generation,
                    log_signature=self._log_signature,
                    database_signature=self._database_signature,
                    prev=self._prev,
                    highest_known=m.last_log_generated,
                    out_of_date=self._out_of_date,
                )
            except InspectionFailed as exc:
                count = self.failures[generation] = self.failures.get(generation, 0) + 1
                await asyncio.to_thread(self._set_aside, staged, count)
                logger.warning(
                    "%s: inspection of generation %d failed (%d of %d): %s",
                    self._paths.name,
                    generation,
                    count,
                    self._max_failures,
                    exc,
                )
                if count >= self._max_failures:
                    raise CopyFailed(
                        f"generation {generation} failed inspection {count} times: {exc}"
                    ) from exc
                await self._clock.sleep(self._retry / 4)
                continue
            await asyncio.to_thread(_move_synced, staged, self._paths.logs / name)
            self.failures.pop(generation, None)
            self._prev = inspected.header
            m.close_times[generation] = inspected.close_time
            m.last_log_inspected = generation
            m.last_inspected_log_time = inspected.close_time
            self._on_inspected()
            return

    def _set_aside(self, staged: Path, count: int) -> None:
        """Keep a failed copy for the operator in IgnoredLogs/InspectionFailed."""
        failed_dir = self._paths.ignored / "InspectionFailed"
        failed_dir.mkdir(parents=True, exist_ok=True)
        os.replace(staged, failed_dir / f"{staged.name}.{count}")


def _write_synced(path: Path, data: bytes) -> None:
    with open(path, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def _move_synced(src: Path, dst: Path) -> None:
    # Only the log directory's entry must survive a crash; a file left in Inspector by a
    # crash is deleted on start and copied again.
    os.replace(src, dst)
    fsync_dir(dst.parent)
