"""What a passive copy finds on its own disk when its pipeline starts: the markers its
database header and its closed logs give, and the logs it wrote when it was active, set
aside to be compared with the active's stream (never replayed)."""

from __future__ import annotations

import logging
import os

from dag_common.clock import Clock
from dag_common.durable import fsync_dir
from replication_node.errors import LogFormatError
from replication_node.log.inspector import OutOfDateLog
from replication_node.log.logdir import list_closed_generations, remove_prepared
from replication_node.log.logfile import (
    OPEN_LOG_NAME,
    PreparedHeader,
    close_time_of,
    closed_log_name,
    parse_closed_log_name,
    scan,
)
from replication_node.passive.copier import OUT_OF_DATE_DIR
from replication_node.passive.markers import Markers
from replication_node.storage.header import DatabaseHeader
from replication_node.storage.paths import CopyPaths

logger = logging.getLogger(__name__)


def prepare_local_logs(
    paths: CopyPaths, header: DatabaseHeader, markers: Markers, database: str, clock: Clock
) -> tuple[dict[int, OutOfDateLog], bool]:
    """Set `markers` from the database `header` and the local logs (blocking: a worker thread).

    Logs this copy wrote when it was active (its E00.log, and its closed generations
    above the database's waypoint when `was-active` says it was) go to
    IgnoredLogs/E00OutofDate: they are not replayed, they are compared with what the
    active sends (`inspector`).  Files left in Inspector by a crash are dropped (they
    will be copied again); closed generations beyond a gap are dropped too.  Returns
    those logs, and whether this copy rejoins after being active (`was-active` stays
    until the copier has checked its database against the active's stream).
    """
    aside = paths.ignored / OUT_OF_DATE_DIR
    for d in (paths.logs, paths.inspector, aside):
        d.mkdir(parents=True, exist_ok=True)
    for leftover in paths.inspector.iterdir():
        leftover.unlink()
    remove_prepared(paths.logs)  # files an active's writer made for a roll that never came
    marker = paths.was_active
    own = [OPEN_LOG_NAME] if (paths.logs / OPEN_LOG_NAME).exists() else []
    if marker.exists():
        own += [
            closed_log_name(g) for g in list_closed_generations(paths.logs) if g > header.waypoint
        ]
    for name in own:
        os.replace(paths.logs / name, aside / name)
    if own:
        fsync_dir(aside)
        fsync_dir(paths.logs)
        logger.info("%s: logs from when it was active set aside: %s", database, own)
    out_of_date = {}
    for path in sorted(aside.iterdir()):
        gen = parse_closed_log_name(path.name)
        try:
            if gen is not None and gen > header.waypoint:
                out_of_date[gen] = OutOfDateLog(gen, path.read_bytes(), whole=True)
            elif path.name == OPEN_LOG_NAME:
                data = path.read_bytes()
                if PreparedHeader.decode(data) is not None:
                    # Installed by a roll whose header never reached the disk: never
                    # fsync'd since, so it holds nothing acknowledged either.
                    path.unlink()
                    continue
                result = scan(data)
                if not result.transactions:
                    # No commit (the log a clean roll or dismount opened, perhaps with
                    # staged parts, which nothing acknowledged): no transaction can be
                    # lost with it, so nothing can have diverged.
                    path.unlink()
                elif result.header.generation > header.waypoint:
                    g = result.header.generation
                    out_of_date[g] = OutOfDateLog(g, data[: result.valid_end])
        except LogFormatError as exc:
            logger.warning("%s: unreadable %s left aside: %s", database, path.name, exc)
    m = markers
    m.last_log_replayed = header.waypoint
    m.last_replayed_log_time = header.last_log_time
    inspected = header.waypoint
    m.last_inspected_log_time = header.last_log_time
    m.copied_times.clear()
    wall, mono = clock.now().timestamp(), clock.monotonic()
    for gen in list_closed_generations(paths.logs):
        path = paths.logs / closed_log_name(gen)
        if gen > inspected + 1 and gen > header.waypoint:
            logger.warning("%s: generation %d follows a gap; dropped", database, gen)
            path.unlink()
            continue
        closed = close_time_of(path)
        if closed is None:
            logger.warning("%s: generation %d is incomplete; dropped", database, gen)
            path.unlink()
            continue
        # When this copy got it: the file's mtime, which the copier set to its own wall
        # clock, carried over to this process's monotonic clock (an mtime in the future, the
        # wall clock having jumped back since, counts as now).
        m.copied_times[gen] = mono - max(0.0, wall - path.stat().st_mtime)
        if gen == inspected + 1:
            inspected = gen
            m.last_inspected_log_time = closed
    m.last_log_inspected = m.last_log_copied = inspected
    m.last_log_generated = max(m.last_log_generated, inspected)
    m.connected = False
    return out_of_date, marker.exists()
