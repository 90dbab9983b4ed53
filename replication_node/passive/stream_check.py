"""Is a passive copy on the active's stream?  Two checks the copier makes on each (re)start.

- `check_rejoin`: a copy that was active follows a new active; its database file must hold
  only what the new active's stream holds (else a full reseed).
- `check_stream`: the copy claims the active's epoch at once if its last inspected
  generation is the active's byte for byte, and stops if it is not (the stream forked
  below it in a failover).

Both compare a generation the copy holds with the active's.  The active may truncate that
generation at any moment (this copy has inspected it; the others may have too), even between
its share's info and the fetch: it is then as if the info had come a moment later, showing
nothing to compare with, and the next generation inspected settles the question through the
creation-time chain.  Never a generation the copy needs, so never a reseed (stop 57's CI:
a passive restarted after kill -9 failed for a generation it already had).
"""

from __future__ import annotations

import asyncio
import logging

from replication_node.errors import CopyFailed, GenerationGone
from replication_node.log.logfile import closed_log_name
from replication_node.passive.markers import Markers
from replication_node.shipping.interfaces import LogShareInfo, LogSource
from replication_node.storage.paths import CopyPaths

logger = logging.getLogger(__name__)


async def check_rejoin(
    source: LogSource, paths: CopyPaths, markers: Markers, info: LogShareInfo
) -> None:
    """A copy that was active follows a new active: is its database file on its stream?

    The file holds every generation through its waypoint W.  If the active's stream has
    not reached W, or its generation W is not this copy's, the file holds transactions
    the active never had: diverged at or below the waypoint, only a full reseed helps.
    (Divergence above W is in logs only, never replayed: `Diverged`, in the copier's stage.)
    On success the `was-active` marker goes.
    """
    waypoint = markers.last_log_replayed
    if waypoint > 0:
        if info.last_generation < waypoint:
            raise CopyFailed(
                f"diverged at or below the database's waypoint: this copy's file holds "
                f"generation {waypoint}, the active's stream ends at "
                f"{info.last_generation}; a full reseed is needed"
            )
        ours = paths.logs / closed_log_name(waypoint)
        if info.first_generation <= waypoint and ours.exists():
            theirs = await _fetch_to_compare(source, paths, waypoint)
            if theirs is not None and theirs != await asyncio.to_thread(ours.read_bytes):
                raise CopyFailed(
                    f"diverged at or below the database's waypoint: generation {waypoint}"
                    " differs from the active's; a full reseed is needed"
                )
    await asyncio.to_thread(paths.was_active.unlink, missing_ok=True)
    logger.info("%s: rejoined the active's stream at generation %d", paths.name, waypoint)


async def check_stream(
    source: LogSource, paths: CopyPaths, markers: Markers, info: LogShareInfo
) -> None:
    """Claim the active's epoch now if this copy's last inspected generation is the
    active's, byte for byte; stop if it is not (the stream forked below it)."""
    generation = markers.last_log_inspected
    if info.epoch == markers.epoch or not (
        generation >= 1 and info.first_generation <= generation <= info.last_generation
    ):
        return  # nothing to compare with yet: the next generation inspected settles it
    ours = paths.logs / closed_log_name(generation)
    if not ours.exists():
        return
    theirs = await _fetch_to_compare(source, paths, generation)
    if theirs is None:
        return  # truncated since the info: the next generation inspected settles it
    if theirs != await asyncio.to_thread(ours.read_bytes):
        raise CopyFailed(
            f"this copy's generation {generation} is not the active's (epoch {info.epoch}): "
            "the stream forked below it in a failover and this copy holds the old "
            "active's logs; reseed the copy"
        )
    markers.epoch = info.epoch


async def _fetch_to_compare(source: LogSource, paths: CopyPaths, generation: int) -> bytes | None:
    """The active's `generation`; None if it was truncated since the info said it was there."""
    try:
        return await source.fetch(generation)
    except GenerationGone:
        logger.info(
            "%s: generation %d truncated on the active before it could be compared",
            paths.name,
            generation,
        )
        return None
